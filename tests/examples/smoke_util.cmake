# SPDX-License-Identifier: MIT
# Helpers for the example smoke tests (cmake -P scripts): run a program, and check that the files
# it wrote exist and parse (JSON, JSON lines, safetensors headers, vocabularies, HTML).

# smoke_no_sanitizer_report(<text> <what>): fails when text holds an AddressSanitizer,
# LeakSanitizer or UBSan report (scripts/sanitize.sh's builds). A run that is expected to fail
# exits non-zero anyway, so its exit status alone would let a leak on the error path through.
function(smoke_no_sanitizer_report text what)
  if(text MATCHES "ERROR: (AddressSanitizer|LeakSanitizer)|UndefinedBehaviorSanitizer|[0-9]: runtime error: ")
    message(FATAL_ERROR "${what}: a sanitizer report:\n${text}")
  endif()
endfunction()

# smoke_run(<out-prefix> <expect: 0 | fail> <program> <args>...): runs the program; sets
# <out-prefix>_output (stdout + stderr) and fails the test on an unexpected exit status or a
# sanitizer report.
function(smoke_run prefix expect)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 900)
  set(${prefix}_output "${out}${err}" PARENT_SCOPE)
  smoke_no_sanitizer_report("${out}${err}" "${ARGN}")
  if(expect STREQUAL "fail")
    if(rc EQUAL 0)
      message(FATAL_ERROR "expected a failure, but it succeeded: ${ARGN}\n${out}${err}")
    endif()
  elseif(NOT rc EQUAL 0)
    message(FATAL_ERROR "exit status ${rc}: ${ARGN}\n${out}${err}")
  endif()
endfunction()

# smoke_expect_match(<text> <regex> <what>): fails unless text matches regex.
function(smoke_expect_match text regex what)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${what}: output does not match '${regex}':\n${text}")
  endif()
endfunction()

# smoke_expect_files_differ(<a> <b> <message>): fails with message when the two files are byte for
# byte the same (and when either cannot be read).
function(smoke_expect_files_differ a b message)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${a}" "${b}" RESULT_VARIABLE rc)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${message}")
  elseif(NOT rc EQUAL 1)
    message(FATAL_ERROR "cannot compare ${a} and ${b} (compare_files exit ${rc})")
  endif()
endfunction()

# smoke_expect_stored_once(<run-dir>): last.safetensors is stored once with model.safetensors (a hard
# link: the same device and inode) exactly when the two hold the same bytes, i.e. when the last
# epoch was the best and its live weights were saved.
function(smoke_expect_stored_once dir)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${dir}/model.safetensors" "${dir}/last.safetensors" RESULT_VARIABLE same)
  execute_process(COMMAND stat -c %d:%i "${dir}/model.safetensors" OUTPUT_VARIABLE a RESULT_VARIABLE rc1)
  execute_process(COMMAND stat -c %d:%i "${dir}/last.safetensors" OUTPUT_VARIABLE b RESULT_VARIABLE rc2)
  if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
    message(FATAL_ERROR "${dir}: cannot stat model.safetensors or last.safetensors")
  endif()
  if(same EQUAL 0 AND NOT a STREQUAL b)
    message(FATAL_ERROR "${dir}: last.safetensors holds model.safetensors' bytes in a second copy, not a link to it")
  elseif(NOT same EQUAL 0 AND a STREQUAL b)
    message(FATAL_ERROR "${dir}: last.safetensors and model.safetensors are one file but compare different")
  endif()
  set(smoke_stored_once ${same} PARENT_SCOPE)
endfunction()

function(smoke_require_file path)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "missing output file ${path}")
  endif()
  file(SIZE "${path}" size)
  if(size EQUAL 0)
    message(FATAL_ERROR "empty output file ${path}")
  endif()
endfunction()

# smoke_json_check(<json-text> <what>): fails unless the text is one valid JSON value.
function(smoke_json_check text what)
  string(JSON type ERROR_VARIABLE err TYPE "${text}")
  if(err)
    message(FATAL_ERROR "${what}: not valid JSON (${err})")
  endif()
endfunction()

# smoke_json_file(<path>): the file holds one JSON value.
function(smoke_json_file path)
  smoke_require_file("${path}")
  file(READ "${path}" text)
  smoke_json_check("${text}" "${path}")
endfunction()

# smoke_jsonl_file(<path> <out-var>): every line is a JSON value; <out-var> gets the lines as a list
# (semicolons inside lines are escaped by CMake's file(STRINGS)).
function(smoke_jsonl_file path var)
  smoke_require_file("${path}")
  file(STRINGS "${path}" lines ENCODING UTF-8)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    smoke_json_check("${line}" "${path}: line ${n}")
  endforeach()
  if(n EQUAL 0)
    message(FATAL_ERROR "${path}: no lines")
  endif()
  set(${var} "${lines}" PARENT_SCOPE)
endfunction()

# smoke_safetensors_file(<path>): an 8-byte little-endian header length, then a JSON header whose
# entries (other than __metadata__) have dtype, shape and data_offsets.
function(smoke_safetensors_file path)
  smoke_require_file("${path}")
  file(READ "${path}" hex LIMIT 8 HEX)
  string(LENGTH "${hex}" hl)
  if(NOT hl EQUAL 16)
    message(FATAL_ERROR "${path}: shorter than the 8-byte header length")
  endif()
  set(len 0)
  foreach(i RANGE 7 0 -1)
    math(EXPR off "${i} * 2")
    string(SUBSTRING "${hex}" ${off} 2 byte)
    math(EXPR len "${len} * 256 + 0x${byte}")
  endforeach()
  file(SIZE "${path}" size)
  if(len LESS 2 OR len GREATER size)
    message(FATAL_ERROR "${path}: header length ${len} does not fit the file (${size} bytes)")
  endif()
  file(READ "${path}" header OFFSET 8 LIMIT ${len})
  smoke_json_check("${header}" "${path} header")
  string(JSON count LENGTH "${header}")
  set(tensors 0)
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON key MEMBER "${header}" ${i})
    if(key STREQUAL "__metadata__")
      continue()
    endif()
    string(JSON dtype GET "${header}" "${key}" dtype)
    string(JSON shape GET "${header}" "${key}" shape)
    string(JSON offsets GET "${header}" "${key}" data_offsets)
    math(EXPR tensors "${tensors} + 1")
  endforeach()
  if(tensors EQUAL 0)
    message(FATAL_ERROR "${path}: no tensors")
  endif()
endfunction()

# smoke_vocab_file(<path>): <pad> and <unk> on lines 1 and 2, more tokens after them.
function(smoke_vocab_file path)
  smoke_require_file("${path}")
  file(STRINGS "${path}" lines ENCODING UTF-8 LIMIT_COUNT 3)
  list(LENGTH lines n)
  if(n LESS 3)
    message(FATAL_ERROR "${path}: fewer than 3 tokens")
  endif()
  list(GET lines 0 l0)
  list(GET lines 1 l1)
  if(NOT l0 STREQUAL "<pad>" OR NOT l1 STREQUAL "<unk>")
    message(FATAL_ERROR "${path}: does not start with <pad>, <unk>")
  endif()
endfunction()

# smoke_html_file(<path>): a complete HTML document with at least one inline SVG.
function(smoke_html_file path)
  smoke_require_file("${path}")
  file(READ "${path}" text)
  if(NOT text MATCHES "^<!DOCTYPE html>" OR NOT text MATCHES "</html>" OR NOT text MATCHES "<svg")
    message(FATAL_ERROR "${path}: not a complete HTML report with charts")
  endif()
endfunction()

# smoke_eval_classes(<path> <classes>): the CLUE example's eval.json, whose valid and dev entries
# each have a macro-F1, a confusion matrix of <classes> rows and <classes> per-class scores.
function(smoke_eval_classes path classes)
  smoke_json_file("${path}")
  file(READ "${path}" ev)
  foreach(split valid dev)
    string(JSON f1 GET "${ev}" ${split} macro_f1)
    string(JSON rows LENGTH "${ev}" ${split} confusion)
    string(JSON n LENGTH "${ev}" ${split} classes)
    if(NOT rows EQUAL classes OR NOT n EQUAL classes)
      message(FATAL_ERROR "${path}: ${split} has ${rows} confusion rows and ${n} classes, expected ${classes}")
    endif()
  endforeach()
endfunction()
