# SPDX-License-Identifier: MIT
# Exact resume: training for 2 epochs must give bit-identical weights and optimizer state to
# training for 1 epoch, stopping, and resuming for the second (same data order, same dropout
# streams, same Adam state and learning-rate schedule), with and without --ema (whose average is
# resumed from ema.safetensors and is what model.safetensors holds). Also checks the numerical guard: a
# learning rate that blows the weights up stops the run naming the first parameter with a
# non-finite gradient, and --on-nonfinite skip counts the steps and finishes.
#   cmake -DPROGRAM=<imdb|clue> -DDATA=<dir> -DWORK=<dir> "-DARGS=<extra args>" -P resume_exact.cmake
include(${CMAKE_CURRENT_LIST_DIR}/smoke_util.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
separate_arguments(extra UNIX_COMMAND "${ARGS}")
set(common "${PROGRAM}" --data "${DATA}" --epochs 2 --patience 5 --heads 2 ${extra})

smoke_run(straight 0 ${common} --out "${WORK}/straight")
smoke_run(first 0 ${common} --out "${WORK}/resumed" --stop-after 1)
smoke_expect_match("${first_output}" "stopping after 1 epoch" "--stop-after 1")
if(EXISTS "${WORK}/resumed/h2/metrics.jsonl")
  file(STRINGS "${WORK}/resumed/h2/metrics.jsonl" lines)
  list(LENGTH lines n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "--stop-after 1 wrote ${n} epoch lines, expected 1")
  endif()
endif()
# The first epoch is the best so far, so last.safetensors is a link to model.safetensors.
smoke_expect_stored_once("${WORK}/resumed/h2")
if(NOT smoke_stored_once EQUAL 0)
  message(FATAL_ERROR "after one epoch last.safetensors and model.safetensors differ")
endif()
smoke_run(second 0 ${common} --out "${WORK}/resumed" --resume)
smoke_expect_match("${second_output}" "resumed after epoch 1" "--resume")
foreach(f last.safetensors optimizer.safetensors model.safetensors)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${WORK}/straight/h2/${f}" "${WORK}/resumed/h2/${f}" RESULT_VARIABLE diff)
  if(NOT diff EQUAL 0)
    message(FATAL_ERROR "${f}: 2 epochs straight and 1 + resume 1 differ")
  endif()
endforeach()
smoke_expect_stored_once("${WORK}/straight/h2")
smoke_expect_stored_once("${WORK}/resumed/h2")
smoke_jsonl_file("${WORK}/resumed/h2/metrics.jsonl" lines)
list(LENGTH lines n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "resumed metrics.jsonl: expected 2 epoch lines, found ${n}")
endif()

# The same with a moving average of the weights: the average resumes exactly too; the log gives the
# live weights' accuracy beside it; model.safetensors holds the average, not last.safetensors' weights;
# resuming it without --ema is refused.
set(ema_args --ema 0.9 --ema-every 2)
smoke_run(ema_straight 0 ${common} ${ema_args} --out "${WORK}/ema_straight")
smoke_expect_match("${ema_straight_output}" "the live weights' validation accuracy [0-9.]+%" "--ema")
smoke_run(ema_first 0 ${common} ${ema_args} --out "${WORK}/ema_resumed" --stop-after 1)
smoke_run(ema_second 0 ${common} ${ema_args} --out "${WORK}/ema_resumed" --resume)
foreach(f last.safetensors optimizer.safetensors ema.safetensors model.safetensors)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${WORK}/ema_straight/h2/${f}" "${WORK}/ema_resumed/h2/${f}" RESULT_VARIABLE diff)
  if(NOT diff EQUAL 0)
    message(FATAL_ERROR "--ema: ${f}: 2 epochs straight and 1 + resume 1 differ")
  endif()
endforeach()
smoke_expect_files_differ("${WORK}/ema_straight/h2/model.safetensors" "${WORK}/ema_straight/h2/last.safetensors"
                          "--ema: model.safetensors equals last.safetensors: the saved model is not the average")
smoke_expect_stored_once("${WORK}/ema_resumed/h2")
smoke_run(ema_mismatch fail ${common} --out "${WORK}/ema_resumed" --resume)
smoke_expect_match("${ema_mismatch_output}" "--ema" "resuming an --ema run without --ema")

# Numerical guard.
smoke_run(diverge fail "${PROGRAM}" --data "${DATA}" --epochs 1 --heads 2 --lr 1e30 --clip 0 ${extra} --out "${WORK}/diverge")
smoke_expect_match("${diverge_output}" "non-finite (loss|gradient)[^\n]* at step [0-9]+; first parameter with a non-finite gradient: '[a-z0-9_.]+'"
                   "--lr 1e30 (stop)")
smoke_run(skip 0 "${PROGRAM}" --data "${DATA}" --epochs 1 --heads 2 --lr 1e30 --clip 0 --on-nonfinite skip ${extra} --out "${WORK}/skip")
smoke_expect_match("${skip_output}" "non-finite steps skipped so far: [1-9]" "--lr 1e30 --on-nonfinite skip")
smoke_jsonl_file("${WORK}/skip/h2/metrics.jsonl" lines)
string(JSON skipped GET "${lines}" skipped_steps)
if(NOT skipped GREATER 0)
  message(FATAL_ERROR "metrics.jsonl: skipped_steps is ${skipped}")
endif()
smoke_run(badclip fail "${PROGRAM}" --data "${DATA}" --clip -1 --out "${WORK}/bad")
smoke_run(badpolicy fail "${PROGRAM}" --data "${DATA}" --on-nonfinite ignore --out "${WORK}/bad")
message(STATUS "exact resume and numerical guard passed")
