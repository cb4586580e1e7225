# SPDX-License-Identifier: MIT
# Finds attn's dependencies: all from Debian packages (scripts/install-deps.sh); nothing is downloaded.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
if(ATTN_BUILD_TESTS OR ATTN_BUILD_EXAMPLES OR ATTN_BUILD_BENCHMARKS)
  find_package(fmt REQUIRED)  # attn's own programs print with it; the library does not use it
endif()
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(MPI QUIET COMPONENTS CXX)

# The GEMM library under cpu::gemm (include/attn/backend/cpu/blas.hpp). BLIS and OpenBLAS pick
# their kernels for the CPU at run time and beat Eigen's compile-time kernels on the projection
# shapes (benchmarks/README.md). Only their OpenMP builds are used (Debian's libblis-openmp-dev,
# libopenblas-openmp-dev): they share attn's OpenMP runtime and run on the calling thread inside
# attn's parallel loops, where the pthreads builds would oversubscribe the cores.
set(ATTN_BLAS auto CACHE STRING "GEMM library for the CPU backend: auto (BLIS, else OpenBLAS, else Eigen's own), blis, openblas or none")
set_property(CACHE ATTN_BLAS PROPERTY STRINGS auto blis openblas none)
set(ATTN_BLAS_VENDOR none)
set(ATTN_BLAS_LIBRARY "")
if(NOT ATTN_BLAS MATCHES "^(auto|blis|openblas|none)$")
  message(FATAL_ERROR "ATTN_BLAS is '${ATTN_BLAS}'; it must be auto, blis, openblas or none")
endif()
# BLIS first, then OpenBLAS: each from the directory of its OpenMP build (Debian's
# lib<vendor>-openmp-dev), or from ATTN_<VENDOR>_LIBRARY when set.
foreach(_attn_vendor blis openblas)
  if(ATTN_BLAS_LIBRARY OR NOT ATTN_BLAS MATCHES "^(auto|${_attn_vendor})$")
    continue()
  endif()
  string(TOUPPER ${_attn_vendor} _attn_var)
  set(_attn_var ATTN_${_attn_var}_LIBRARY)
  find_library(${_attn_var} NAMES ${_attn_vendor} PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/${_attn_vendor}-openmp
    NO_DEFAULT_PATH DOC "${_attn_vendor}, OpenMP build")
  if(${_attn_var})
    set(ATTN_BLAS_VENDOR ${_attn_vendor})
    set(ATTN_BLAS_LIBRARY ${${_attn_var}})
  elseif(ATTN_BLAS STREQUAL "${_attn_vendor}")
    message(FATAL_ERROR "ATTN_BLAS=${_attn_vendor}: the OpenMP build of ${_attn_vendor} was not found (apt-get install lib${_attn_vendor}-openmp-dev, or set ${_attn_var})")
  endif()
endforeach()
if(ATTN_BLAS_LIBRARY)
  message(STATUS "attn: cpu::gemm uses ${ATTN_BLAS_VENDOR} (${ATTN_BLAS_LIBRARY})")
else()
  message(STATUS "attn: cpu::gemm uses Eigen's product (ATTN_BLAS=${ATTN_BLAS}; no BLIS or OpenBLAS OpenMP build found)")
endif()

# oneDNN's FP32 GEMM for cpu::gemm<float> (include/attn/backend/cpu/dnnl.hpp): Debian's libdnnl2 (its
# OpenMP build, sharing attn's runtime), ahead of BLIS on every FP32 shape of the reference models
# (benchmarks/README.md). Double stays with the BLAS above. The package ships the library only
# (libdnnl-dev adds headers attn does not need), so it is found by its file name.
set(ATTN_DNNL auto CACHE STRING "oneDNN's dnnl_sgemm for float GEMMs: auto (when libdnnl.so.2 is found), on or off")
set_property(CACHE ATTN_DNNL PROPERTY STRINGS auto on off)
if(NOT ATTN_DNNL MATCHES "^(auto|on|off)$")
  message(FATAL_ERROR "ATTN_DNNL is '${ATTN_DNNL}'; it must be auto, on or off")
endif()
set(ATTN_DNNL_FOUND "")
if(NOT ATTN_DNNL STREQUAL "off")
  find_library(ATTN_DNNL_LIBRARY NAMES dnnl libdnnl.so.2 DOC "oneDNN (libdnnl.so.2)")
  if(ATTN_DNNL_LIBRARY)
    set(ATTN_DNNL_FOUND ${ATTN_DNNL_LIBRARY})
    message(STATUS "attn: cpu::gemm<float> uses oneDNN (${ATTN_DNNL_LIBRARY})")
  elseif(ATTN_DNNL STREQUAL "on")
    message(FATAL_ERROR "ATTN_DNNL=on: libdnnl.so.2 was not found (apt-get install libdnnl2, or set ATTN_DNNL_LIBRARY)")
  endif()
endif()
