# SPDX-License-Identifier: MIT
# R4's 64 sample lengths are the same list on both sides of the comparison: bench's kR4Lengths
# (benchmarks/models.hpp) and the PyTorch peer's draw (benchmarks/peer/peer.py --r4-lengths,
# Python's own random module, no torch needed).
#   cmake -DPYTHON=<python3> -DSOURCE=<attn source dir> -P r4_lengths.cmake
execute_process(COMMAND "${PYTHON}" "${SOURCE}/benchmarks/peer/peer.py" --r4-lengths
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "peer.py --r4-lengths failed (${rc}): ${err}")
endif()
string(JSON peer_list GET "${out}" lengths)
string(JSON n LENGTH "${peer_list}")
set(peer "")
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON v GET "${peer_list}" ${i})
  list(APPEND peer ${v})
endforeach()
file(READ "${SOURCE}/benchmarks/models.hpp" models)
if(NOT models MATCHES "kR4Lengths = {([0-9, \n]*)}")
  message(FATAL_ERROR "benchmarks/models.hpp: no 'kR4Lengths = {...}' list found")
endif()
string(REGEX REPLACE "[ \n]+" "" bench "${CMAKE_MATCH_1}")
string(REPLACE "," ";" bench "${bench}")
if(NOT bench STREQUAL peer)
  message(FATAL_ERROR "R4's lengths differ:\n  bench (models.hpp): ${bench}\n  peer (peer.py):     ${peer}")
endif()
list(LENGTH bench count)
message(STATUS "R4: the same ${count} lengths on both sides")
