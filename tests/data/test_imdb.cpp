// SPDX-License-Identifier: MIT
// aclImdb reader: layout, order, labels, and missing/empty/oversized/non-UTF-8/stray files.
#include <catch2/catch.hpp>

#include <attn/data/imdb.hpp>

#include <string>

#include "../temp_dir.hpp"

using namespace attn::data;
using Catch::Contains;

TEST_CASE("imdb: reads neg then pos, sorted by file name, with labels and paths") {
  const ImdbSplit s = read_imdb(fixture("imdb/ok"), "train");
  REQUIRE(s.reviews.size() == 5);
  CHECK(s.stats.files == 5);
  CHECK(s.reviews[0].path.filename() == "1_2.txt");
  CHECK(s.reviews[0].label == 0);
  CHECK(s.reviews[0].text == "Boring. Two hours I won't get back.");
  CHECK(s.reviews[1].path.filename() == "3_1.txt");
  CHECK(s.reviews[2].path.filename() == "0_9.txt");  // byte order: "0_9" < "10_8" < "2_7"
  CHECK(s.reviews[3].path.filename() == "10_8.txt");
  CHECK(s.reviews[4].path.filename() == "2_7.txt");
  for (std::size_t i = 2; i < 5; ++i) CHECK(s.reviews[i].label == 1);
  CHECK(s.reviews[4].text == "Caf\u00E9 scenes were lovely \u2014 worth it.");
  const ImdbSplit t = read_imdb(fixture("imdb/ok"), "test");
  CHECK(t.reviews.size() == 2);
  CHECK(t.stats.skipped == 0);
}

TEST_CASE("imdb: stray non-.txt files are skipped and counted") {
  const ImdbSplit s = read_imdb(fixture("imdb/ok"), "train");
  CHECK(s.stats.skipped == 1);  // pos/notes.md
  for (const auto& r : s.reviews) CHECK(r.path.extension() == ".txt");
  TempDir tmp;
  write_bytes(tmp.path() / "train/pos/1_7.txt", "fine");
  write_bytes(tmp.path() / "train/neg/2_2.txt", "bad");
  write_bytes(tmp.path() / "train/neg/.DS_Store", "x");
  std::filesystem::create_directories(tmp.path() / "train/neg/subdir.txt");  // a directory named *.txt
  const ImdbSplit t = read_imdb(tmp.path(), "train");
  CHECK(t.reviews.size() == 2);
  CHECK(t.stats.skipped == 2);
}

TEST_CASE("imdb: a dangling link named *.txt is an IoError naming it, not a review left out") {
  TempDir tmp;
  write_bytes(tmp.path() / "train/pos/1_7.txt", "fine");
  write_bytes(tmp.path() / "train/neg/2_2.txt", "bad");
  std::filesystem::create_symlink(tmp.path() / "nowhere.txt", tmp.path() / "train/neg/3_1.txt");
  CHECK_THROWS_WITH(read_imdb(tmp.path(), "train"), Contains("3_1.txt") && Contains("cannot read the review file"));
}

TEST_CASE("imdb: invalid UTF-8 is replaced and counted, not fatal") {
  const ImdbSplit s = read_imdb(fixture("imdb/ok"), "train");
  CHECK(s.stats.invalid_utf8 == 3);  // FF, FE, truncated E2 82
  REQUIRE(s.stats.invalid_utf8_files.size() == 1);
  CHECK(s.stats.invalid_utf8_files[0].filename() == "3_1.txt");
  CHECK(s.reviews[1].text == "Bad bytes \uFFFD\uFFFD here and a truncated \uFFFD sequence.");
  CHECK(is_valid_utf8(s.reviews[1].text));
}

TEST_CASE("imdb: a missing directory is an IoError naming it") {
  CHECK_THROWS_AS(read_imdb(fixture("imdb/nope"), "train"), attn::IoError);
  CHECK_THROWS_WITH(read_imdb(fixture("imdb/nope"), "train"), Contains("imdb/nope") && Contains("not found"));
  CHECK_THROWS_WITH(read_imdb(fixture("imdb/ok"), "valid"), Contains("ok/valid") && Contains("not found"));
  CHECK_THROWS_WITH(read_imdb(fixture("imdb/missing_neg"), "train"),
                    Contains("missing_neg/train/neg") && Contains("directory not found"));
  CHECK_THROWS_WITH(read_imdb_dir(fixture("imdb/ok/train/pos/0_9.txt")), Contains("not a directory"));
}

TEST_CASE("imdb: an empty review file is a FormatError naming the file") {
  CHECK_THROWS_AS(read_imdb(fixture("imdb/empty_file"), "train"), attn::FormatError);
  CHECK_THROWS_WITH(read_imdb(fixture("imdb/empty_file"), "train"),
                    Contains("empty_file/train/neg/1_2.txt") && Contains("empty review file"));
}

TEST_CASE("imdb: a file over the size limit is an IoError naming the file") {
  TempDir tmp;
  write_bytes(tmp.path() / "train/pos/0_9.txt", "ok");
  write_bytes(tmp.path() / "train/neg/1_1.txt", std::string((std::size_t(1) << 20) + 1, 'a'));  // 1 MiB + 1
  CHECK_THROWS_AS(read_imdb(tmp.path(), "train"), attn::IoError);
  CHECK_THROWS_WITH(read_imdb(tmp.path(), "train"), Contains("1_1.txt") && Contains("larger than the limit of 1048576"));
  // Exactly at the limit is fine; the limit is configurable.
  write_bytes(tmp.path() / "train/neg/1_1.txt", std::string(std::size_t(1) << 20, 'a'));
  CHECK(read_imdb(tmp.path(), "train").reviews.size() == 2);
  CHECK_THROWS_WITH(read_imdb(tmp.path(), "train", {.max_file_bytes = 1000}), Contains("1_1.txt"));
}

TEST_CASE("imdb: an unreadable file is an IoError naming the file") {
  TempDir tmp;
  write_bytes(tmp.path() / "train/pos/0_9.txt", "ok");
  const auto bad = tmp.path() / "train/neg/1_1.txt";
  write_bytes(bad, "secret");
  std::filesystem::permissions(bad, std::filesystem::perms::none);
  if (::access(bad.c_str(), R_OK) != 0) {
    CHECK_THROWS_WITH(read_imdb(tmp.path(), "train"), Contains("1_1.txt") && Contains("cannot open"));
  } else {
    // Running as root, permissions do not stop reads. /proc/self/mem is a regular file that
    // opens but fails to read at offset 0 (EIO), so it stands in for a failing disk.
    std::filesystem::remove(bad);
    std::filesystem::create_symlink("/proc/self/mem", bad);
    CHECK_THROWS_WITH(read_imdb(tmp.path(), "train"), Contains("1_1.txt") && Contains("read failed"));
  }
}
