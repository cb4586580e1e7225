// SPDX-License-Identifier: MIT
// The CLUE example's task-dependent parts (examples/clue/model.hpp, data.hpp): the model's class
// count in config.json and its head, its recurrent layer (BiLSTM or BiGRU), and the name of the
// test predictions.
#include <catch2/catch.hpp>

#include <algorithm>
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

TEST_CASE("clue ModelConfig: the recurrent layer round-trips through config.json, defaults to the LSTM, and is checked") {
  clue::ModelConfig cfg{.vocab = 40, .rnn = "gru"};
  auto j = cfg.to_json();
  CHECK(j.at("rnn") == "gru");
  CHECK(clue::ModelConfig::from_json(j).rnn == "gru");
  j.erase("rnn");  // a configuration written before the GRU was offered
  CHECK(clue::ModelConfig::from_json(j).rnn == "lstm");
  for (const nlohmann::json& bad : {nlohmann::json("rnn"), nlohmann::json(3)}) {
    j["rnn"] = bad;
    try {
      clue::ModelConfig::from_json(j);
      FAIL("no throw for " << bad.dump());
    } catch (const examples::FieldError& e) {
      CHECK(e.field == "model.rnn");
    }
  }
}

TEST_CASE("clue TnewsClassifier with a BiGRU: torch's GRU names under gru., and the folded embedding gives the same logits") {
  clue::TnewsClassifier<attn::cpu> m(clue::ModelConfig{.vocab = 40, .rnn = "gru"}, 2);
  REQUIRE(!m.lstm);
  REQUIRE(m.gru);
  std::vector<std::string> names;
  for (const auto& [n, p] : m.named_parameters()) names.push_back(n);
  CHECK(std::find(names.begin(), names.end(), "gru.weight_ih_l0_reverse") != names.end());
  CHECK(std::none_of(names.begin(), names.end(), [](const std::string& n) { return n.starts_with("lstm."); }));
  const clue::TnewsClassifier<attn::cpu> lstm(clue::ModelConfig{.vocab = 40}, 2);
  CHECK(lstm.parameter_count() - m.parameter_count() == 2 * (128 * (128 + 128) + 2 * 128));  // one gate fewer per direction
  const std::vector<std::int32_t> a{1, 2, 3, 39}, c{4, 5};
  const auto b = clue::make_batch({&a, &c}, {0, 3});
  m.eval();
  attn::NoGrad ng;
  const auto plain = m.forward(ng, b).value().to_vector();
  m.fold_embedding();
  REQUIRE(m.folded);
  const auto folded = m.forward(ng, b).value().to_vector();
  REQUIRE(folded.size() == plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(folded[i] == Approx(plain[i]).margin(1e-5));
}

TEST_CASE("clue predictions_file: CLUE's submission name for the task's directory") {
  CHECK(clue::predictions_file("/data/tnews_public") == "tnews_predict.json");
  CHECK(clue::predictions_file("/data/iflytek_public") == "iflytek_predict.json");
  CHECK(clue::predictions_file("/data/iflytek_public/") == "iflytek_predict.json");
  CHECK(clue::predictions_file("iflytek_public/.") == "iflytek_predict.json");
  CHECK(clue::predictions_file("examples/clue/sample/tnews_public") == "tnews_predict.json");
  CHECK(clue::predictions_file("mydata") == "tnews_predict.json");
}
