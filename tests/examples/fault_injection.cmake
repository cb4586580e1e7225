# SPDX-License-Identifier: MIT
# Crash consistency of the run directory: a training run is ended abruptly (_exit, as kill -9
# would) after its 1st, 2nd, ... file-system step (ATTN_FAULT_AFTER_WRITES=N: a temporary written,
# a rename done, a line appended), until a run gets through. After each kill:
#  - a directory holding state.json loads: predict works;
#  - --resume finishes with model.safetensors, last.safetensors and optimizer.safetensors byte for
#    byte those of an uninterrupted run (last.safetensors a link to model.safetensors exactly when
#    they hold the same bytes), metrics.jsonl with one line per epoch (no duplicates), and
#    no temporary or .pending file left.
# A second round kills the resumed run as well (at its 1st, 3rd, 5th ... step) before resuming again.
#   cmake -DPROGRAM=<imdb|clue> -DDATA=<dir> -DWORK=<dir> -DEPOCHS=<n> "-DARGS=<extra>" -P fault_injection.cmake
include(${CMAKE_CURRENT_LIST_DIR}/smoke_util.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
separate_arguments(extra UNIX_COMMAND "${ARGS}")
set(common "${PROGRAM}" --data "${DATA}" --epochs ${EPOCHS} --heads 2 --threads 1 ${extra})
set(fault_exit 86)

smoke_run(ref 0 ${common} --out "${WORK}/ref")
set(ref "${WORK}/ref/h2")

# check_resumed(<dir> <what>): --resume finishes and matches the uninterrupted run.
function(check_resumed out what)
  smoke_run(resume 0 ${common} --out "${out}" --resume)
  foreach(f model.safetensors last.safetensors optimizer.safetensors)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${ref}/${f}" "${out}/h2/${f}" RESULT_VARIABLE diff)
    if(NOT diff EQUAL 0)
      message(FATAL_ERROR "${what}: after --resume ${f} differs from the uninterrupted run's\n${resume_output}")
    endif()
  endforeach()
  smoke_expect_stored_once("${out}/h2")
  file(STRINGS "${out}/h2/metrics.jsonl" lines)
  list(LENGTH lines n)
  if(NOT n EQUAL EPOCHS)
    message(FATAL_ERROR "${what}: metrics.jsonl has ${n} lines, expected ${EPOCHS}:\n${lines}")
  endif()
  set(e 0)
  foreach(line IN LISTS lines)
    math(EXPR e "${e} + 1")
    string(JSON epoch GET "${line}" epoch)
    if(NOT epoch EQUAL e)
      message(FATAL_ERROR "${what}: metrics.jsonl line ${e} is epoch ${epoch}")
    endif()
  endforeach()
  file(GLOB leftovers "${out}/h2/.*.tmp-*" "${out}/h2/*.pending")
  if(leftovers)
    message(FATAL_ERROR "${what}: left behind: ${leftovers}")
  endif()
endfunction()

# killed(<out> <N> <result-var> <extra args>...): runs with ATTN_FAULT_AFTER_WRITES=N; the result
# is "killed" or "finished".
function(killed out n var)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ATTN_FAULT_AFTER_WRITES=${n} ${common} --out "${out}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e TIMEOUT 600)
  if(rc EQUAL 0)
    set(${var} finished PARENT_SCOPE)
  elseif(rc EQUAL fault_exit)
    set(${var} killed PARENT_SCOPE)
  else()
    message(FATAL_ERROR "ATTN_FAULT_AFTER_WRITES=${n}: exit ${rc}\n${o}${e}")
  endif()
endfunction()

set(kills 0)
set(n 0)
set(result killed)
while(result STREQUAL "killed")
  math(EXPR n "${n} + 1")
  set(out "${WORK}/k${n}")
  killed("${out}" ${n} result)
  if(result STREQUAL "finished")
    break()
  endif()
  math(EXPR kills "${kills} + 1")
  if(EXISTS "${out}/h2/state.json")
    smoke_run(pred 0 "${PROGRAM}" predict --model "${out}/h2" "text")
  endif()
  check_resumed("${out}" "killed after step ${n}")
  file(REMOVE_RECURSE "${out}")
endwhile()
if(kills LESS 20)
  message(FATAL_ERROR "only ${kills} kill points: the run takes fewer file-system steps than expected")
endif()

# Killed twice: in the first run at step n, then in the resumed run at step m.
set(twice 0)
foreach(n RANGE 3 ${kills} 4)
  set(out "${WORK}/t${n}")
  killed("${out}" ${n} r1)
  foreach(m 1 3 5)
    killed("${out}" ${m} r2 --resume)
    if(r2 STREQUAL "killed")
      math(EXPR twice "${twice} + 1")
    endif()
  endforeach()
  check_resumed("${out}" "killed after step ${n}, then the resumed runs after steps 1, 3, 5")
  file(REMOVE_RECURSE "${out}")
endforeach()
message(STATUS "fault injection: ${kills} single kills and ${twice} kills of resumed runs, every directory consistent")
