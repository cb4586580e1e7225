# SPDX-License-Identifier: MIT
# An example under `mpirun -np 2` with --batch b trains the same model as one process with
# --batch 2b: the weights after one epoch agree within TOL (dropout off, so that both see the
# same computation; the all-reduce only changes the order of floating-point sums). The attention's
# in_proj_bias (CLUE: attn.in_proj_bias, IMDb: encoder.layers.0.self_attn.in_proj_bias) is left
# out: the key bias has an exactly zero gradient (softmax is invariant to it), so Adam turns
# rounding noise there into full-size steps in either run.
#   cmake -DLAUNCH=<mpirun -np 2 ...> -DPROGRAM=<imdb|clue> -DCOMPARE=<compare_weights> -DDATA=<dir>
#         -DWORK=<dir> -DBATCH=<b> "-DARGS=<extra>" -DTOL=<tol> -P mpi_equivalence.cmake
include(${CMAKE_CURRENT_LIST_DIR}/smoke_util.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
separate_arguments(extra UNIX_COMMAND "${ARGS}")
set(common --data "${DATA}" --epochs 1 --heads 2 --dropout 0 --attn-dropout 0 --threads 1 ${extra})
math(EXPR double_batch "${BATCH} * 2")
smoke_run(one 0 "${PROGRAM}" ${common} --batch ${double_batch} --out "${WORK}/one")
smoke_run(two 0 ${LAUNCH} "${PROGRAM}" ${common} --batch ${BATCH} --out "${WORK}/two")
smoke_expect_match("${two_output}" "x 2 processes \\(global batch ${double_batch}\\)" "mpirun -np 2")
# The exchange line: the buckets' all-reduce, and the rows of the sparse tables gathered (not
# all-reduced; the IMDb model's token and n-gram tables are sparse, CLUE's tables are not).
set(rows "0")
if(PROGRAM MATCHES "imdb")
  set(rows "[1-9][0-9]*")
endif()
smoke_expect_match("${two_output}" "epoch 1: gradient exchange per step: [0-9.]+ MB all-reduced, ${rows} rows \\([0-9.]+ MB\\) of sparse tables gathered, [0-9.]+ ms"
                   "mpirun -np 2")
string(REGEX MATCHALL "attn [A-Za-z ]+example:" banners "${two_output}")
list(LENGTH banners nb)
if(NOT nb EQUAL 1)
  message(FATAL_ERROR "expected one banner (rank 0 only prints), found ${nb}:\n${two_output}")
endif()
smoke_jsonl_file("${WORK}/two/h2/metrics.jsonl" lines)
smoke_safetensors_file("${WORK}/two/h2/model.safetensors")
execute_process(COMMAND "${COMPARE}" "${WORK}/one/h2/last.safetensors" "${WORK}/two/h2/last.safetensors" ${TOL}
                        --skip attn.in_proj_bias --skip encoder.layers.0.self_attn.in_proj_bias
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "2 processes x batch ${BATCH} and 1 process x batch ${double_batch} differ")
endif()
message(STATUS "data-parallel example equivalence passed")
