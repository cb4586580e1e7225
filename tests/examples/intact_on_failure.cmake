# SPDX-License-Identifier: MIT
# A failed run leaves the run directory it was pointed at byte-identical: --resume with options that
# differ from config.json's, bad option values, a second run without --resume or --overwrite,
# corrupted config.json / state.json (out of range, mistyped, truncated), a corrupt, missing or
# other head count's model.safetensors, and a directory another process holds all fail with a
# message naming the option or the file and field, before anything is written; predict reports the
# same fields, and its --dump never replaces a file that is not an earlier dump. Also: an empty training split is an error, a one-class split a warning naming the class,
# and --data that is not a directory says what it is.
#   cmake -DPROGRAM=<imdb|clue> -DKIND=<imdb|clue> -DDATA=<dir> -DLIMIT=<n> -DWORK=<dir> "-DARGS=<extra>" -P intact_on_failure.cmake
include(${CMAKE_CURRENT_LIST_DIR}/smoke_util.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
separate_arguments(extra UNIX_COMMAND "${ARGS}")
set(common "${PROGRAM}" --heads 2 --threads 1 ${extra})
set(run ${common} --data "${DATA}" --limit ${LIMIT} --out "${WORK}/run")
set(checks 0)

# dir_hash(<dir> <out-var>): every file below dir (hidden ones included) with its SHA-256.
function(dir_hash dir var)
  file(GLOB_RECURSE files LIST_DIRECTORIES true RELATIVE "${dir}" "${dir}/*")
  list(SORT files)
  set(h "")
  foreach(f IN LISTS files)
    if(IS_DIRECTORY "${dir}/${f}")
      string(APPEND h "${f}/\n")
    else()
      file(SHA256 "${dir}/${f}" s)
      string(APPEND h "${f} ${s}\n")
    endif()
  endforeach()
  set(${var} "${h}" PARENT_SCOPE)
endfunction()

# expect_intact(<out> <regex> <what> <command>...): the command fails, its output matches regex,
# and <out> (an --out directory) is byte for byte what it was.
function(expect_intact out regex what)
  dir_hash("${out}" before)
  smoke_run(r fail ${ARGN})
  smoke_expect_match("${r_output}" "${regex}" "${what}")
  dir_hash("${out}" after)
  if(NOT before STREQUAL after)
    message(FATAL_ERROR "${what}: the failed run changed ${out}:\nbefore:\n${before}\nafter:\n${after}")
  endif()
  math(EXPR n "${checks} + 1")
  set(checks ${n} PARENT_SCOPE)
endfunction()

set(out "${WORK}/run")
smoke_run(first 0 ${run} --epochs 1)
file(COPY "${DATA}" DESTINATION "${WORK}/data-copy")
get_filename_component(data_name "${DATA}" NAME)

expect_intact("${out}" "--limit: 40 differs from the run's ${LIMIT}" "--resume --limit 40"
              ${common} --data "${DATA}" --out "${out}" --epochs 2 --limit 40 --resume)
expect_intact("${out}" "--max-len: 16 differs" "--resume --max-len 16" ${run} --epochs 2 --max-len 16 --resume)
expect_intact("${out}" "--seed: 7 differs" "--resume --seed 7" ${run} --epochs 2 --seed 7 --resume)
expect_intact("${out}" "--split-seed: 7 differs" "--resume --split-seed 7" ${run} --epochs 2 --split-seed 7 --resume)
expect_intact("${out}" "--dropout: 0.5 differs" "--resume --dropout 0.5" ${run} --epochs 2 --dropout 0.5 --resume)
expect_intact("${out}" "--data: [^\n]*data-copy[^\n]* differs" "--resume --data <copy>"
              ${common} --data "${WORK}/data-copy/${data_name}" --limit ${LIMIT} --out "${out}" --epochs 2 --resume)
expect_intact("${out}" "--lr: 'nan' is not a finite number" "--resume --lr nan" ${run} --epochs 2 --lr nan --resume)
expect_intact("${out}" "--lr: 'nan' is not a finite number" "--lr nan" ${run} --epochs 2 --lr nan)
expect_intact("${out}" "--epochs: '0'" "--resume --epochs 0" ${run} --epochs 0 --resume)
expect_intact("${out}" "already holds a run [^\n]*--resume[^\n]*--overwrite" "a second run without --resume" ${run} --epochs 1)
expect_intact("${out}" "--resume excludes --overwrite|--overwrite excludes --resume" "--resume --overwrite" ${run} --resume --overwrite)
expect_intact("${out}" "no-such-data" "--resume --data <missing>" ${common} --data "${WORK}/no-such-data" --limit ${LIMIT}
              --out "${out}" --resume)

# Corrupted files of a copy of the run: --resume and predict fail naming the file and the field.
# corrupt(<file> <json-text> <regex> <what>)
function(corrupt file text regex what)
  set(bad "${WORK}/bad")
  file(REMOVE_RECURSE "${bad}")
  file(COPY "${out}/h2" DESTINATION "${bad}")
  file(WRITE "${bad}/h2/${file}" "${text}")
  expect_intact("${bad}" "${file}: ${regex}" "${what}" ${common} --data "${DATA}" --limit ${LIMIT} --out "${bad}" --epochs 2 --resume)
  if(file STREQUAL "config.json")
    expect_intact("${bad}" "${file}: ${regex}" "predict: ${what}" "${PROGRAM}" predict --model "${bad}/h2" "text")
  endif()
  set(checks ${checks} PARENT_SCOPE)
endfunction()
file(READ "${out}/h2/state.json" state)
file(READ "${out}/h2/config.json" config)
foreach(c "epochs_done;-1" "epochs_done;1e30" "epochs_done;0" "step;9223372036854775807" "step;-1" "skipped_steps;-3"
          "best_valid;2.0" "best_valid;null" "stale;1000000000")
  list(GET c 0 field)
  list(GET c 1 value)
  string(JSON t SET "${state}" ${field} ${value})
  corrupt(state.json "${t}" "field ${field}: " "state.json ${field} ${value}")
endforeach()
string(JSON t SET "${state}" history 0 valid_accuracy 7)
corrupt(state.json "${t}" "field history\\[0\\]\\.valid_accuracy: " "state.json history valid_accuracy 7")
string(LENGTH "${state}" n)
math(EXPR n "${n} / 2")
string(SUBSTRING "${state}" 0 ${n} t)
corrupt(state.json "${t}" "byte offset [0-9]+: " "truncated state.json")
foreach(c "max_len;2000000000" "max_len;0" "max_len;1e15" "vocab;-2" "dropout;1.5" "dropout;\"x\"")
  list(GET c 0 field)
  list(GET c 1 value)
  string(JSON t SET "${config}" model ${field} ${value})
  corrupt(config.json "${t}" "field model\\.${field}: " "config.json model.${field} ${value}")
endforeach()
foreach(value -8 1e30 3.5 "\"8\"")
  string(JSON t SET "${config}" heads ${value})
  corrupt(config.json "${t}" "field heads: " "config.json heads ${value}")
endforeach()
string(LENGTH "${config}" n)
math(EXPR n "${n} / 2")
string(SUBSTRING "${config}" 0 ${n} t)
corrupt(config.json "${t}" "byte offset [0-9]+: " "truncated config.json")
if(KIND STREQUAL "imdb")
  string(JSON t SET "${config}" model nblr_order 0)
  corrupt(config.json "${t}" "field model\\.nblr_order: " "config.json model.nblr_order 0")
else()
  string(JSON l0 GET "${config}" labels 0 label)
  string(JSON t SET "${config}" labels 1 label "\"${l0}\"")
  corrupt(config.json "${t}" "field labels\\[1\\]\\.label: duplicate label '${l0}'" "config.json duplicate label")
endif()

# A directory with checkpoints but no state.json cannot be resumed.
set(bad "${WORK}/bad")
file(REMOVE_RECURSE "${bad}")
file(COPY "${out}/h2" DESTINATION "${bad}")
file(REMOVE "${bad}/h2/state.json")
expect_intact("${bad}" "no state\\.json" "--resume without state.json" ${common} --data "${DATA}" --limit ${LIMIT} --out "${bad}" --resume)

# The checkpoints a resumed run continues from, the best epoch's included, are read before anything
# is written: a truncated or missing model.safetensors, or the weights of another head count (the
# attention's weights have the same shapes for every head count), fail naming the file.
macro(fresh_copy)
  set(bad "${WORK}/bad")
  file(REMOVE_RECURSE "${bad}")
  file(COPY "${out}/h2" DESTINATION "${bad}")
endmacro()
fresh_copy()
file(REMOVE "${bad}/h2/model.safetensors")  # (a hard link of last.safetensors after one epoch)
file(WRITE "${bad}/h2/model.safetensors" "not a safetensors file")
expect_intact("${bad}" "model\\.safetensors: " "--resume with a corrupt model.safetensors"
              ${common} --data "${DATA}" --limit ${LIMIT} --out "${bad}" --epochs 2 --resume)
file(REMOVE "${bad}/h2/model.safetensors")
expect_intact("${bad}" "model\\.safetensors: missing" "--resume without model.safetensors"
              ${common} --data "${DATA}" --limit ${LIMIT} --out "${bad}" --epochs 2 --resume)
smoke_run(four 0 "${PROGRAM}" --heads 4 --threads 1 ${extra} --data "${DATA}" --limit ${LIMIT} --out "${WORK}/run4" --epochs 1)
fresh_copy()
file(REMOVE "${bad}/h2/model.safetensors")
file(COPY "${WORK}/run4/h4/model.safetensors" DESTINATION "${bad}/h2")
expect_intact("${bad}" "model\\.safetensors: byte offset 0: metadata 'heads' is 4, but the run directory is that of 2 heads"
              "--resume with a 4-head model.safetensors" ${common} --data "${DATA}" --limit ${LIMIT} --out "${bad}" --epochs 2 --resume)
expect_intact("${bad}" "metadata 'heads' is 4, but the run directory is that of 2 heads" "predict with a 4-head model.safetensors"
              "${PROGRAM}" predict --model "${bad}/h2" "text")
# predict --dump never replaces a file that is not an earlier dump.
expect_intact("${out}" "not an earlier predict --dump output; it is kept" "predict --dump onto model.safetensors"
              "${PROGRAM}" predict --model "${out}/h2" --dump "${out}/h2/model.safetensors" "text")
expect_intact("${out}" "no-such-dir: --dump: no such directory" "predict --dump into a missing directory"
              "${PROGRAM}" predict --model "${out}/h2" --dump "${WORK}/no-such-dir/d.safetensors" "text")
# A run directory another process is using (holding its lock, as flock(1) does here) is left alone.
find_program(FLOCK flock)
if(FLOCK)
  expect_intact("${out}" "another process is using this run directory" "--resume while another process holds the directory"
                "${FLOCK}" -n "${out}/h2" ${run} --epochs 2 --resume)
endif()

# --data that is not a directory: nothing is written.
set(fresh "${WORK}/fresh")
execute_process(COMMAND mkfifo "${WORK}/fifo" RESULT_VARIABLE fifo_rc)
set(not_dirs /dev/zero)
if(fifo_rc EQUAL 0)
  list(APPEND not_dirs "${WORK}/fifo")
endif()
foreach(d IN LISTS not_dirs)
  smoke_run(nd fail ${common} --data "${d}" --out "${fresh}")
  smoke_expect_match("${nd_output}" "${d}: is a (pipe \\(FIFO\\)|character device), expected the" "--data ${d}")
  if(EXISTS "${fresh}")
    message(FATAL_ERROR "--data ${d}: wrote ${fresh}")
  endif()
endforeach()

# Empty and one-class training data.
if(KIND STREQUAL "imdb")
  file(MAKE_DIRECTORY "${WORK}/empty/train/pos" "${WORK}/empty/train/neg")
  smoke_run(empty fail ${common} --data "${WORK}/empty" --out "${fresh}")
  smoke_expect_match("${empty_output}" "train: 0 reviews found" "empty train/pos and train/neg")
  smoke_run(one fail ${common} --data "${DATA}" --limit 1 --out "${fresh}")
  smoke_expect_match("${one_output}" "--limit 1\\)" "--limit 1")
  file(MAKE_DIRECTORY "${WORK}/neg/train/pos")
  file(COPY "${DATA}/train/neg" DESTINATION "${WORK}/neg/train")
  smoke_run(neg 0 ${common} --data "${WORK}/neg" --limit ${LIMIT} --epochs 1 --out "${fresh}")
  smoke_expect_match("${neg_output}" "warning: the training split holds only class 'negative'" "negative reviews only")
else()
  file(MAKE_DIRECTORY "${WORK}/one")
  file(COPY "${DATA}/labels.json" DESTINATION "${WORK}/one")
  file(READ "${DATA}/train.json" train)
  string(REGEX REPLACE "\"label\": \"[0-9]+\"" "\"label\": \"103\"" same "${train}")
  file(WRITE "${WORK}/one/train.json" "${same}")
  smoke_run(one 0 ${common} --data "${WORK}/one" --epochs 1 --out "${fresh}")
  smoke_expect_match("${one_output}" "warning: the training split holds only class '[^']+'" "one-class train.json")
  file(REMOVE_RECURSE "${fresh}")
  string(REGEX MATCH "^[^\n]*\n" l0 "${train}")
  file(WRITE "${WORK}/one/train.json" "${l0}")
  smoke_run(empty fail ${common} --data "${WORK}/one" --out "${fresh}")
  smoke_expect_match("${empty_output}" "train\\.json: line 1: fewer than 2 labelled examples" "one-line train.json")
  # An optional split that exists but is no file is an error, not skipped.
  file(MAKE_DIRECTORY "${WORK}/devdir/dev.json")
  file(COPY "${DATA}/labels.json" "${DATA}/train.json" DESTINATION "${WORK}/devdir")
  smoke_run(devdir fail ${common} --data "${WORK}/devdir" --out "${fresh}")
  smoke_expect_match("${devdir_output}" "dev\\.json: is a directory" "dev.json directory")
  if(fifo_rc EQUAL 0)
    file(MAKE_DIRECTORY "${WORK}/testfifo")
    file(COPY "${DATA}/labels.json" "${DATA}/train.json" DESTINATION "${WORK}/testfifo")
    execute_process(COMMAND mkfifo "${WORK}/testfifo/test.json")
    smoke_run(testfifo fail ${common} --data "${WORK}/testfifo" --out "${fresh}")
    smoke_expect_match("${testfifo_output}" "test\\.json: is a pipe or socket" "test.json FIFO")
  endif()
endif()

# --overwrite replaces the run.
smoke_run(over 0 ${run} --epochs 1 --overwrite)
smoke_jsonl_file("${out}/h2/metrics.jsonl" lines)
list(LENGTH lines n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "--overwrite: metrics.jsonl has ${n} lines, expected 1")
endif()
message(STATUS "failed runs left the run directory intact: ${checks} checks passed")
