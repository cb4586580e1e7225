# SPDX-License-Identifier: MIT
# IMDb example smoke test: a 300-review, 2-epoch run (bigram and trigram embeddings) lowers the
# training loss and writes every output file, and they parse; the ablation
# run and the NB-LR baseline are reported beside the attention model, with the attention's entropy;
# an unsupported --heads fails and lists the supported values; --ensemble nblr without NB-LR fails.
#   cmake -DPROGRAM=<imdb> -DDATA=<aclImdb> -DWORK=<dir> -P imdb_smoke.cmake
include(${CMAKE_CURRENT_LIST_DIR}/smoke_util.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(out "${WORK}/run")

string(REPEAT "a long review " 40 long_text)  # 120 tokens, 64 kept (--max-len): 65 positions with [CLS]
smoke_run(train 0 "${PROGRAM}" --data "${DATA}" --limit 300 --epochs 2 --batch 16 --max-len 64 --out "${out}" --ngram-buckets 1024
          --ngram-order 3 --nblr-buckets 4096 --explain "${long_text}")
smoke_expect_match("${train_output}" "epoch 1: train loss" "imdb training")
# --limit keeps both classes in proportion: 150 of each, 135 of each in the training portion (90%).
smoke_expect_match("${train_output}" "data: 270 train \\(135 positive\\)" "imdb --limit 300")
smoke_expect_match("${train_output}" "attention entropy on validation \\(fraction of uniform\\):( [01]\\.[0-9][0-9])+" "imdb entropy")
smoke_expect_match("${train_output}" "fraction of uniform; a layer's line averages every row, the classifier reads only the \\[CLS\\] row of the last layer\\)"
                   "imdb summary: which entropy the classifier reads")
smoke_expect_match("${train_output}" "\nno attention +[0-9.]+%" "imdb ablation row")
smoke_expect_match("${train_output}" "\nNB-LR alone \\(baseline\\) +[0-9.]+%" "imdb baseline row")
if(NOT IS_DIRECTORY "${out}/ablation")
  message(FATAL_ERROR "the ablation run's directory ${out}/ablation is missing")
endif()
file(READ "${out}/report.html" report)
foreach(part "attention weight" "weight of the [CLS] row (what the classifier reads)" "training objective (train) and validation cross-entropy"
        "(the first 64 of 65 positions drawn)" "mean attention received per token (every row)"
        "Attention entropy on validation" "NB-LR alone")
  string(FIND "${report}" "${part}" at)
  if(at LESS 0)
    message(FATAL_ERROR "report.html lacks \"${part}\"")
  endif()
endforeach()
file(GLOB runs LIST_DIRECTORIES true "${out}/h*")
list(LENGTH runs nruns)
if(NOT nruns EQUAL 1)
  message(FATAL_ERROR "expected one run directory under ${out}, found: ${runs}")
endif()
smoke_jsonl_file("${runs}/metrics.jsonl" lines)
list(LENGTH lines n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "metrics.jsonl: expected 2 epoch lines, found ${n}")
endif()
list(GET lines 0 first)
list(GET lines 1 second)
string(JSON loss1 GET "${first}" train_loss)
string(JSON loss2 GET "${second}" train_loss)
string(JSON acc GET "${second}" valid_accuracy)
if(NOT loss1 GREATER 0 OR acc LESS 0 OR acc GREATER 1)
  message(FATAL_ERROR "metrics.jsonl: implausible train_loss ${loss1} or valid_accuracy ${acc}")
endif()
if(NOT loss2 LESS loss1)
  message(FATAL_ERROR "metrics.jsonl: the training loss did not fall (epoch 1 ${loss1}, epoch 2 ${loss2})")
endif()
smoke_safetensors_file("${runs}/model.safetensors")
smoke_vocab_file("${runs}/vocab.txt")
smoke_json_file("${runs}/config.json")
smoke_json_file("${out}/summary.json")
smoke_html_file("${out}/report.html")

# A [CLS]-pooled, checkpointed two-layer model trained with a penalty on its [CLS] rows' entropy:
# the [CLS] row's entropy is reported, predict names the tokens the [CLS] row attends to.
smoke_run(cls 0 "${PROGRAM}" --data "${DATA}" --limit 120 --epochs 1 --batch 16 --max-len 48 --out "${WORK}/cls" --pool cls --layers 2
          --window 8 --checkpoint --no-ablation --nblr-buckets 0 --ngram-buckets 1024 --attn-entropy 0.5 --attn-entropy-target 0.25
          --adversarial 0.5)
smoke_expect_match("${cls_output}" "attention entropy of the \\[CLS\\] row \\(the classifier's input\\), last layer:( [01]\\.[0-9][0-9])+" "imdb --pool cls")
smoke_expect_match("${cls_output}" "checkpointed, \\[CLS\\] entropy penalty 0.5 above 0.25, adversarial training eps 0.5\\)"
                   "imdb --attn-entropy --attn-entropy-target --adversarial")
# Adversarial training changes what both the attention model and the ablation learn; the [CLS]
# entropy penalty is on by default, hinged at 0.5.
foreach(eps 0 5)
  smoke_run(adv${eps} 0 "${PROGRAM}" --data "${DATA}" --limit 120 --epochs 1 --batch 16 --max-len 48 --heads 2 --nblr-buckets 0
            --ngram-buckets 1024 --adversarial 0.${eps} --out "${WORK}/adv${eps}")
endforeach()
smoke_expect_match("${adv5_output}" "== 2 heads \\(1 x TransformerEncoderLayer<2, 128>, \\[CLS\\] entropy penalty 0.03 above 0.5, adversarial training eps 0.5\\)"
                   "imdb --adversarial")
smoke_expect_match("${adv0_output}" "== 2 heads \\(1 x TransformerEncoderLayer<2, 128>, \\[CLS\\] entropy penalty 0.03 above 0.5\\)" "imdb --adversarial 0")
foreach(dir adv0/h2 adv5/h2)
  file(READ "${WORK}/${dir}/config.json" cfg)
  string(JSON penalty GET "${cfg}" options --attn-entropy)
  string(JSON target GET "${cfg}" options --attn-entropy-target)
  if(NOT penalty EQUAL 0.03 OR NOT target EQUAL 0.5)
    message(FATAL_ERROR "${dir}/config.json records --attn-entropy ${penalty} and --attn-entropy-target ${target}, expected 0.03 and 0.5")
  endif()
endforeach()
# Without the penalty the header names none, and the run records both as 0.
smoke_run(nopen 0 "${PROGRAM}" --data "${DATA}" --limit 120 --epochs 1 --batch 16 --max-len 48 --heads 2 --nblr-buckets 0
          --ngram-buckets 1024 --adversarial 0 --attn-entropy 0 --no-ablation --out "${WORK}/nopen")
smoke_expect_match("${nopen_output}" "== 2 heads \\(1 x TransformerEncoderLayer<2, 128>\\)" "imdb --attn-entropy 0 --adversarial 0")
file(READ "${WORK}/nopen/h2/config.json" cfg)
string(JSON target GET "${cfg}" options --attn-entropy-target)
if(NOT target EQUAL 0)
  message(FATAL_ERROR "nopen/h2/config.json records --attn-entropy-target ${target} for a run without the penalty, expected 0")
endif()
smoke_expect_match("${adv5_output}" "== ablation: no attention, the inputs mean\\+max pooled, adversarial training eps 0.5;" "imdb --adversarial, ablation")
foreach(run h2 ablation)
  smoke_expect_files_differ("${WORK}/adv0/${run}/model.safetensors" "${WORK}/adv5/${run}/model.safetensors"
                            "imdb --adversarial 0.5 trained the same ${run} weights as without it")
endforeach()
smoke_run(cls_predict 0 "${PROGRAM}" predict --model "${WORK}/cls/h8" "not good, but brilliant")
smoke_expect_match("${cls_predict_output}" "(positive|negative)\t[0-9.]+\t[a-z,]+\\([0-9.]+\\)" "imdb predict --pool cls")
# The same model with dynamic int8 quantization; training in int8 is refused before anything is written.
smoke_run(cls_predict8 0 "${PROGRAM}" predict --model "${WORK}/cls/h8" "not good, but brilliant" --precision int8)
smoke_expect_match("${cls_predict8_output}" "(positive|negative)\t[0-9.]+\t[a-z,]+\\([0-9.]+\\)" "imdb predict --precision int8")
smoke_run(train8 fail "${PROGRAM}" --data "${DATA}" --epochs 1 --precision int8 --out "${WORK}/int8_run")
smoke_expect_match("${train8_output}" "--precision int8 is for inference" "imdb training with --precision int8")
if(EXISTS "${WORK}/int8_run")
  message(FATAL_ERROR "training with --precision int8 wrote ${WORK}/int8_run")
endif()
# --limit above half the reviews: still both classes in proportion (650 of each of 1,300, 585 in training).
smoke_run(limit_half 0 "${PROGRAM}" --data "${DATA}" --limit 1300 --epochs 1 --batch 64 --max-len 16 --no-ablation --nblr-buckets 0
          --ngram-buckets 512 --threads 1 --out "${WORK}/limit_half")
smoke_expect_match("${limit_half_output}" "data: 1170 train \\(585 positive\\)" "imdb --limit 1300")
# With a test split (aclImdb/test: here 30 reviews of each class copied from train): its accuracy,
# by length too, is printed and in summary.json.
file(MAKE_DIRECTORY "${WORK}/with_test/aclImdb/test/pos" "${WORK}/with_test/aclImdb/test/neg")
file(COPY "${DATA}/train" DESTINATION "${WORK}/with_test/aclImdb")
foreach(cls pos neg)
  file(GLOB reviews "${DATA}/train/${cls}/*.txt")
  list(SUBLIST reviews 0 30 reviews)
  file(COPY ${reviews} DESTINATION "${WORK}/with_test/aclImdb/test/${cls}")
endforeach()
smoke_run(with_test 0 "${PROGRAM}" --data "${WORK}/with_test/aclImdb" --limit 120 --epochs 1 --batch 16 --max-len 48 --no-ablation
          --nblr-buckets 0 --ngram-buckets 512 --threads 1 --out "${WORK}/with_test/run")
smoke_expect_match("${with_test_output}" "60 test reviews" "imdb data line with a test split")
smoke_expect_match("${with_test_output}" "test accuracy [0-9.]+% \\(60 reviews\\)\n[^\n]*length" "imdb test accuracy and its length table")
file(READ "${WORK}/with_test/run/summary.json" summary)
string(JSON test_buckets GET "${summary}" 0 test_bucket_accuracy)
string(JSON nbuckets LENGTH "${summary}" 0 length_buckets)
string(JSON ntest LENGTH "${test_buckets}")
if(NOT ntest EQUAL nbuckets)
  message(FATAL_ERROR "summary.json: test_bucket_accuracy ${test_buckets} has not one value per length bucket (${nbuckets})")
endif()
file(READ "${WORK}/limit_half/summary.json" summary)
foreach(field test_bucket_accuracy test_accuracy)
  string(JSON no_test TYPE "${summary}" 0 ${field})
  if(NOT no_test STREQUAL "NULL")
    message(FATAL_ERROR "summary.json without a test split: ${field} is ${no_test}, expected null")
  endif()
endforeach()
string(JSON cls_entropy TYPE "${summary}" 0 cls_entropy)
if(NOT cls_entropy STREQUAL "ARRAY")
  message(FATAL_ERROR "summary.json: cls_entropy of a [CLS] model is ${cls_entropy}, expected an array")
endif()
# A window that the classifier never sees (one layer, the [CLS] row global): refused, nothing written.
smoke_run(window1 fail "${PROGRAM}" --data "${DATA}" --epochs 1 --window 16 --out "${WORK}/window1")
smoke_expect_match("${window1_output}" "--window 16: with one layer and --pool cls" "imdb --window with one layer")
if(EXISTS "${WORK}/window1")
  message(FATAL_ERROR "imdb --window with one layer wrote ${WORK}/window1")
endif()

# --seeds: each model once per seed, all on one validation split; the per-seed table and the
# differences between the models, seed by seed; a repeated seed is refused before anything is written.
smoke_run(seeds 0 "${PROGRAM}" --data "${DATA}" --limit 120 --epochs 1 --batch 16 --max-len 48 --heads 2 --seeds 3,4 --nblr-buckets 0
          --ngram-buckets 1024 --out "${WORK}/seeds")
smoke_expect_match("${seeds_output}" "2 heads, seed 3 +[0-9.]+%" "imdb --seeds: a row per seed")
smoke_expect_match("${seeds_output}" "2 heads: mean of 2 +[0-9.]+%" "imdb --seeds: the mean row")
smoke_expect_match("${seeds_output}" "validation accuracy by seed \\(3 / 4\\), on one validation split" "imdb --seeds: the table")
smoke_expect_match("${seeds_output}" "2 heads - no attention: [-+][0-9.]+ / [-+][0-9.]+ points \\(mean [-+][0-9.]+; ahead on [0-2] of 2 seeds\\)"
                   "imdb --seeds: the differences seed by seed")
foreach(seed 3 4)
  file(READ "${WORK}/seeds/h2-s${seed}/config.json" cfg)
  string(JSON recorded GET "${cfg}" options --seed)
  string(JSON split GET "${cfg}" options --split-seed)
  if(NOT recorded EQUAL seed OR NOT split EQUAL 42)
    message(FATAL_ERROR "--seeds: h2-s${seed}/config.json records --seed ${recorded} and --split-seed ${split}, expected ${seed} and 42")
  endif()
endforeach()
smoke_expect_files_differ("${WORK}/seeds/h2-s3/model.safetensors" "${WORK}/seeds/h2-s4/model.safetensors"
                          "--seeds 3,4: both runs trained the same weights")
smoke_run(seeds_twice fail "${PROGRAM}" --data "${DATA}" --seeds 5,6,5 --out "${WORK}/seeds_twice")
smoke_expect_match("${seeds_twice_output}" "--seeds: seed 5 is given twice" "imdb --seeds 5,6,5")
if(EXISTS "${WORK}/seeds_twice")
  message(FATAL_ERROR "a refused --seeds wrote ${WORK}/seeds_twice")
endif()

smoke_run(entropy_pool fail "${PROGRAM}" --data "${DATA}" --attn-entropy 0.1 --pool mean+max --out "${WORK}/bad")
smoke_expect_match("${entropy_pool_output}" "--attn-entropy: the penalty is on the \\[CLS\\] rows' attention, but --pool is mean\\+max"
                   "imdb --attn-entropy with --pool mean+max")
# Another pooling turns the default penalty off (it is on the [CLS] rows) and records it as 0.
# (With LLaMA's block: RMS norms and a SwiGLU feed-forward, which config.json records and predict
# rebuilds from it.)
smoke_run(meanmax 0 "${PROGRAM}" --data "${DATA}" --limit 120 --epochs 1 --batch 16 --max-len 48 --heads 2 --nblr-buckets 0
          --ngram-buckets 1024 --adversarial 0 --pool mean+max --no-ablation --norm rms --gated --activation silu --out "${WORK}/meanmax")
smoke_expect_match("${meanmax_output}" "== 2 heads \\(1 x TransformerEncoderLayer<2, 128>\\)" "imdb --pool mean+max: no penalty")
file(READ "${WORK}/meanmax/report.html" report)
string(FIND "${report}" "mean attention received per token" at)
if(at LESS 0)
  message(FATAL_ERROR "meanmax/report.html: a mean+max model's heatmaps lack the mean attention each token receives")
endif()
file(READ "${WORK}/meanmax/h2/config.json" cfg)
string(JSON penalty GET "${cfg}" options --attn-entropy)
if(NOT penalty EQUAL 0)
  message(FATAL_ERROR "meanmax/h2/config.json records --attn-entropy ${penalty} for a mean+max model, expected 0")
endif()
string(JSON mm_norm GET "${cfg}" model norm)
string(JSON mm_gated GET "${cfg}" model gated)
if(NOT mm_norm STREQUAL "rms" OR NOT mm_gated)
  message(FATAL_ERROR "meanmax/h2/config.json: model.norm ${mm_norm}, model.gated ${mm_gated}, expected rms and true")
endif()
smoke_run(meanmax_predict 0 "${PROGRAM}" predict --model "${WORK}/meanmax/h2" "not good, but brilliant")
smoke_run(norm_bad fail "${PROGRAM}" --data "${DATA}" --norm batch --out "${WORK}/bad")
smoke_expect_match("${norm_bad_output}" "--norm" "imdb --norm batch")
smoke_run(target_off fail "${PROGRAM}" --data "${DATA}" --attn-entropy 0 --attn-entropy-target 0.3 --out "${WORK}/bad")
smoke_expect_match("${target_off_output}" "--attn-entropy-target: the target of a penalty that is off: --attn-entropy is 0"
                   "imdb --attn-entropy-target without the penalty")
smoke_run(target_pool fail "${PROGRAM}" --data "${DATA}" --attn-entropy-target 0.3 --pool mean+max --out "${WORK}/bad")
smoke_expect_match("${target_pool_output}" "--attn-entropy-target: the target of a penalty that is off: --attn-entropy is 0 with --pool mean\\+max"
                   "imdb --attn-entropy-target with --pool mean+max")
smoke_run(heads fail "${PROGRAM}" --data "${DATA}" --heads 3 --out "${WORK}/bad")
smoke_expect_match("${heads_output}" "--heads: unsupported value 3 \\(supported: 1, 2, 4, 8, 16\\)" "imdb --heads 3")
smoke_run(ensemble fail "${PROGRAM}" --data "${DATA}" --ensemble nblr --nblr-buckets 0 --out "${WORK}/bad")
smoke_expect_match("${ensemble_output}" "--ensemble: nblr needs NB-LR" "imdb --ensemble nblr --nblr-buckets 0")
message(STATUS "imdb smoke test passed")
