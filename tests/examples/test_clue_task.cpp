// SPDX-License-Identifier: MIT
// The CLUE example's task-dependent parts (examples/clue/model.hpp, data.hpp): the model's class
// count in config.json and its head, and the name of the test predictions.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "../../examples/clue/data.hpp"
#include "../../examples/clue/heads.hpp"

TEST_CASE("clue ModelConfig: classes round-trip through config.json, default to TNEWS's 15, and are range-checked") {
  clue::ModelConfig cfg{.vocab = 40, .classes = 119};  // IFLYTEK
  auto j = cfg.to_json();
  CHECK(j.at("classes") == 119);
  CHECK(clue::ModelConfig::from_json(j).classes == 119);
  j.erase("classes");  // a configuration written before other tasks were taken
  CHECK(clue::ModelConfig::from_json(j).classes == clue::kTnewsClasses);
  for (const int bad : {0, 1, int(clue::kMaxClasses) + 1}) {
    j["classes"] = bad;
    try {
      clue::ModelConfig::from_json(j);
      FAIL("no throw for " << bad);
    } catch (const examples::FieldError& e) {
      CHECK(e.field == "model.classes");
    }
  }
}

TEST_CASE("clue TnewsClassifier: the head has the configuration's classes, the logits as many columns") {
  const clue::TnewsClassifier<attn::cpu> four(clue::ModelConfig{.vocab = 40, .classes = 4}, 2);
  const clue::TnewsClassifier<attn::cpu> tnews(clue::ModelConfig{.vocab = 40}, 2);
  CHECK(four.head.weight.dims() == attn::Dims{4, clue::kDim});
  CHECK(four.head.bias.dims() == attn::Dims{4});
  CHECK(tnews.head.out_features() == 15);
  const std::vector<std::int32_t> a{1, 2, 3}, c{4, 5};
  const auto b = clue::make_batch({&a, &c}, {0, 3});
  attn::NoGrad ng;
  CHECK(four.forward(ng, b).dims() == attn::Dims{2, 4});
  CHECK(tnews.forward(ng, b).dims() == attn::Dims{2, 15});
}

TEST_CASE("clue predictions_file: CLUE's submission name for the task's directory") {
  CHECK(clue::predictions_file("/data/tnews_public") == "tnews_predict.json");
  CHECK(clue::predictions_file("/data/iflytek_public") == "iflytek_predict.json");
  CHECK(clue::predictions_file("/data/iflytek_public/") == "iflytek_predict.json");
  CHECK(clue::predictions_file("iflytek_public/.") == "iflytek_predict.json");
  CHECK(clue::predictions_file("examples/clue/sample/tnews_public") == "tnews_predict.json");
  CHECK(clue::predictions_file("mydata") == "tnews_predict.json");
}
