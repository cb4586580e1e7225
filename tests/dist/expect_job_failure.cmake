# SPDX-License-Identifier: MIT
# Runs an MPI job that must fail, and checks that it fails cleanly: a non-zero exit, within
# MAX_SECONDS (it must not hang), with EXPECT (a regular expression) in its output.
#   cmake -DLAUNCH="mpirun;-np;2;prog;throw" -DEXPECT="uncaught exception" -DMAX_SECONDS=60
#         [-DENV="ATTN_DIST_TIMEOUT=2;OMP_NUM_THREADS=1"] -P expect_job_failure.cmake
# EXPECT_EXIT_ZERO=ON turns it into the control run: exit 0 required.
foreach(v LAUNCH EXPECT MAX_SECONDS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "expect_job_failure.cmake: ${v} is not set")
  endif()
endforeach()
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${ENV} ${LAUNCH}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${MAX_SECONDS})
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
message("exit: ${rc}; ${elapsed} s\n--- stdout\n${out}\n--- stderr\n${err}")
if(NOT rc MATCHES "^-?[0-9]+$")
  message(FATAL_ERROR "the job did not end by itself within ${MAX_SECONDS} s: ${rc}")
endif()
if(EXPECT_EXIT_ZERO)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the control run failed with exit ${rc}")
  endif()
elseif(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0; a failing rank must fail the job")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the job's output lacks /${EXPECT}/")
endif()
message("ok: ended with exit ${rc} after ${elapsed} s, output matches /${EXPECT}/")
