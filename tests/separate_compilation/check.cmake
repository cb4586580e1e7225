# SPDX-License-Identifier: MIT
# Compiles uses_kernels.cpp twice and lists its symbols with nm: header-only, each kernel it uses
# must be defined in the object (instantiated there); with ATTN_SEPARATE_COMPILATION, each must be
# an undefined reference (declared extern, left to attn::compiled). Fails otherwise.
set(_kernels
  "attn::cpu::gemm<float>(" "attn::cpu::gemm_strided_batched<double>(" "attn::kernels::tile::gemm<float>("
  "attn::kernels::softmax_rows<double>(" "attn::kernels::gather_rows<float, long>("
  "attn::kernels::layer_norm_forward<float>(" "attn::kernels::cross_entropy_backward<double, int>("
  "attn::kernels::lstm_cell_backward<float>(" "attn::kernels::adam_update<double>(" "attn::detail::lstm_impl<float, attn::cpu>("
  "attn::kernels::mha_flash_forward<float>(" "attn::kernels::mha_naive_backward<double>(")
foreach(mode header_only separate)
  set(_def)
  if(mode STREQUAL "separate")
    set(_def -DATTN_SEPARATE_COMPILATION)
  endif()
  set(_obj ${WORK}/uses_kernels_${mode}.o)
  file(MAKE_DIRECTORY ${WORK})
  execute_process(COMMAND ${CXX} -std=c++20 -O0 -fopenmp ${_def} -I${INCLUDES} -isystem ${EIGEN} -c ${SRC} -o ${_obj}
    RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "separate_compilation: ${SRC} does not compile (${mode}):\n${_err}")
  endif()
  execute_process(COMMAND ${NM} -C ${_obj} RESULT_VARIABLE _rc OUTPUT_VARIABLE _syms)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "separate_compilation: ${NM} failed on ${_obj}")
  endif()
  string(REPLACE "\n" ";" _lines "${_syms}")
  foreach(k ${_kernels})
    set(_kind "")
    foreach(l ${_lines})
      string(FIND "${l}" "${k}" _pos)
      if(NOT _pos EQUAL -1)
        string(REGEX MATCH "^[0-9a-f ]* ([A-Za-z]) " _m "${l}")
        set(_kind ${CMAKE_MATCH_1})
        break()
      endif()
    endforeach()
    if(mode STREQUAL "separate" AND NOT _kind STREQUAL "U")
      message(FATAL_ERROR "separate_compilation: ${k}...) is '${_kind}' in the object, not an undefined (extern) reference")
    elseif(mode STREQUAL "header_only" AND NOT _kind MATCHES "^[TW]$")
      message(FATAL_ERROR "separate_compilation: header-only, ${k}...) is '${_kind}', not defined in the object")
    endif()
  endforeach()
endforeach()
list(LENGTH _kernels _n)
message("separate_compilation: ok (${_n} kernels instantiated header-only, extern with ATTN_SEPARATE_COMPILATION)")
