# SPDX-License-Identifier: MIT
# Compiles SRC (syntax only). Exit 1 when it fails with the message on SRC's "// expect: " line;
# exit 0 when it compiles or fails for another reason (the WILL_FAIL test then fails).
file(STRINGS ${SRC} _expect REGEX "^// expect: ")
string(REPLACE "// expect: " "" _expect "${_expect}")
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -fopenmp -I${INCLUDES} -isystem ${EIGEN} ${SRC}
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(_rc EQUAL 0)
  message("compile_fail: ${SRC} compiled, but must not")
  return()
endif()
string(FIND "${_err}${_out}" "${_expect}" _pos)
if(_pos EQUAL -1)
  message("compile_fail: ${SRC} failed to compile, but without \"${_expect}\":\n${_err}")
  return()
endif()
message("compile_fail: ${SRC} rejected with \"${_expect}\" as expected")
message(FATAL_ERROR "expected compile failure")
