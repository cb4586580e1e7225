# SPDX-License-Identifier: MIT
# Every numeric option of the example programs against NaN, infinity, -1, 0 and 2^64, and a few
# boundary values: a refused value is an error naming the option (non-zero exit); an accepted one
# gets as far as reading --data (which is missing here, so the run ends there with "not found").
# Either way nothing is written.
#   cmake -DIMDB=<imdb> -DCLUE=<clue> -DWORK=<dir> -P numeric_options.cmake
include(${CMAKE_CURRENT_LIST_DIR}/smoke_util.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(missing "${WORK}/no-such-data")
set(out "${WORK}/out")
set(values nan inf -1 0 18446744073709551616)

set(cases 0)
# check_value(<program> <option> <value> <a|r> [<args before the option>...])
function(check_value program option value expect)
  execute_process(COMMAND "${program}" ${ARGN} ${option} ${value} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e TIMEOUT 120)
  set(text "${o}${e}")
  get_filename_component(name "${program}" NAME)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${name} ${option} ${value}: exit 0, expected an error\n${text}")
  endif()
  if(expect STREQUAL "a")
    if(NOT text MATCHES "no-such-data[^\n]*not found")
      message(FATAL_ERROR "${name} ${option} ${value}: should be accepted (and fail on the missing --data), got exit ${rc}:\n${text}")
    endif()
  else()
    string(REGEX REPLACE "([][+.*()^$?|\\\\])" "\\\\\\1" opt_re "${option}")
    if(NOT text MATCHES "${opt_re}" OR text MATCHES "no-such-data[^\n]*not found")
      message(FATAL_ERROR "${name} ${option} ${value}: should be refused naming ${option}, got exit ${rc}:\n${text}")
    endif()
  endif()
  if(EXISTS "${out}")
    message(FATAL_ERROR "${name} ${option} ${value}: wrote ${out}")
  endif()
  math(EXPR n "${cases} + 1")
  set(cases ${n} PARENT_SCOPE)
endfunction()

# run_table(<program> <table>...): each entry "option:e1,e2,e3,e4,e5" gives a (accept) or r
# (refuse) for the values nan, inf, -1, 0, 2^64.
function(run_table program)
  foreach(entry IN LISTS ARGN)
    string(REPLACE ":" ";" parts "${entry}")
    list(GET parts 0 option)
    list(GET parts 1 expects)
    string(REPLACE "," ";" expects "${expects}")
    foreach(i RANGE 4)
      list(GET values ${i} v)
      list(GET expects ${i} x)
      check_value("${program}" "${option}" "${v}" "${x}" --data "${missing}" --out "${out}")
    endforeach()
  endforeach()
  set(cases ${cases} PARENT_SCOPE)
endfunction()

set(training
    --epochs:r,r,r,r,r --batch:r,r,r,r,r --lr:r,r,r,r,a --weight-decay:r,r,r,a,r --warmup:r,r,r,a,r
    --patience:r,r,r,r,r --clip:r,r,r,a,a --seed:r,r,r,a,r --stop-after:r,r,r,a,r --dropout:r,r,r,a,r
    --attn-dropout:r,r,r,a,r --max-len:r,r,r,r,r --min-freq:r,r,r,a,r --max-vocab:r,r,r,a,r
    --valid-fraction:r,r,r,r,r --threads:r,r,r,a,r --limit:r,r,r,a,r)
run_table("${IMDB}" ${training} --heads:r,r,r,r,r --layers:r,r,r,r,r --window:r,r,r,a,r --ngram-buckets:r,r,r,a,r --ngram-order:r,r,r,r,r --ngram-dropout:r,r,r,a,r
          --attn-entropy:r,r,r,a,r           --nblr-buckets:r,r,r,a,r --nblr-order:r,r,r,r,r --nblr-c:r,r,r,r,r --nblr-folds:r,r,r,r,r)
run_table("${CLUE}" ${training} --heads:r,r,r,r,r --label-smoothing:r,r,r,a,r --bench-seconds:r,r,r,r,r
          --bench-latency:r,r,r,a,r)
set(top_expect r r r a r)
foreach(i RANGE 4)
  list(GET values ${i} v)
  list(GET top_expect ${i} x)
  execute_process(COMMAND "${CLUE}" predict --model "${missing}" --top ${v} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
  if(rc EQUAL 0 OR (x STREQUAL "a" AND NOT "${o}${e}" MATCHES "no-such-data")
     OR (x STREQUAL "r" AND NOT "${o}${e}" MATCHES "--top"))
    message(FATAL_ERROR "clue predict --top ${v}: exit ${rc}\n${o}${e}")
  endif()
  math(EXPR cases "${cases} + 1")
endforeach()

# Boundaries and the values of the report: --threads is [0, 4096] like ATTN_NUM_THREADS, --max-len
# has a stated limit, seeds span 64 bits, a fraction or sign never reaches an unsigned option.
foreach(program IMDB CLUE)
  set(p "${${program}}")
  set(d --data "${missing}" --out "${out}")
  check_value("${p}" --threads 100000 r ${d})
  check_value("${p}" --threads 4097 r ${d})
  check_value("${p}" --threads 4096 a ${d})
  check_value("${p}" --max-len 10000000 r ${d})
  check_value("${p}" --max-len 4096 a ${d})
  check_value("${p}" --max-len 8192 a ${d})
  check_value("${p}" --seed 18446744073709551615 a ${d})
  check_value("${p}" --seed -0 r ${d})
  check_value("${p}" --limit -5 r ${d})
  check_value("${p}" --limit 1.5 r ${d})
  check_value("${p}" --max-vocab 1 r ${d})
  check_value("${p}" --lr 1e999 r ${d})
  check_value("${p}" --lr -nan r ${d})
  check_value("${p}" --warmup 1.0000001 r ${d})
  check_value("${p}" --weight-decay NaN r ${d})
  check_value("${p}" --epochs 100001 r ${d})
endforeach()
check_value("${CLUE}" --bench-seconds nan r --bench --data "${missing}" --out "${out}")
check_value("${CLUE}" --bench-seconds 0.5 a --bench --data "${missing}" --out "${out}")
check_value("${IMDB}" --heads 18446744073709551608 r --data "${missing}" --out "${out}")
message(STATUS "numeric options: ${cases} cases passed")
