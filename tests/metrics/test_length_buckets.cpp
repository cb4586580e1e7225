// SPDX-License-Identifier: MIT
// Accuracy per input-length bucket: bucket edges, labels, empty buckets and the table.
#include <catch2/catch.hpp>

#include <attn/metrics/length_buckets.hpp>

#include <cmath>
#include <string>

using attn::metrics::LengthBucketAccuracy;
using Catch::Contains;

TEST_CASE("length buckets: edges make half-open buckets with readable labels") {
  const LengthBucketAccuracy acc({50, 100, 200});
  REQUIRE(acc.num_buckets() == 4);
  CHECK(acc.label(0) == "<50");
  CHECK(acc.label(1) == "50-100");
  CHECK(acc.label(2) == "100-200");
  CHECK(acc.label(3) == ">=200");
  CHECK(acc.bucket(0) == 0);
  CHECK(acc.bucket(49) == 0);
  CHECK(acc.bucket(50) == 1);
  CHECK(acc.bucket(99) == 1);
  CHECK(acc.bucket(100) == 2);
  CHECK(acc.bucket(200) == 3);
  CHECK(acc.bucket(100000) == 3);
}

TEST_CASE("length buckets: accuracy per bucket by hand") {
  LengthBucketAccuracy acc({50, 100, 200});
  acc.add(10, true);
  acc.add(49, false);
  acc.add(50, 1, 1);
  acc.add(99, 0, 0);
  acc.add(150, 0, 1);
  acc.add(200, true);
  acc.add(1000, true);
  CHECK(acc.count(0) == 2);
  CHECK(acc.accuracy(0) == Approx(0.5));
  CHECK(acc.accuracy(1) == Approx(1.0));
  CHECK(acc.count(2) == 1);
  CHECK(acc.accuracy(2) == 0.0);
  CHECK(acc.correct(3) == 2);
  CHECK(acc.accuracy(3) == Approx(1.0));
  CHECK(acc.table() ==
        "length    examples   accuracy\n"
        "<50              2     0.5000\n"
        "50-100           2     1.0000\n"
        "100-200          1     0.0000\n"
        ">=200            2     1.0000\n");
}

TEST_CASE("length buckets: an empty bucket has undefined accuracy, shown as '-'") {
  LengthBucketAccuracy acc({8});
  acc.add(3, true);
  CHECK(std::isnan(acc.accuracy(1)));
  CHECK_THAT(acc.table(2), Contains("\n>=8             0          -\n") && Contains("\n<8              1       1.00\n"));
  const LengthBucketAccuracy all({});
  CHECK(all.num_buckets() == 1);
  CHECK(all.label(0) == "all");
}

TEST_CASE("length buckets: edges must be positive and strictly increasing") {
  CHECK_THROWS_AS(LengthBucketAccuracy({0, 10}), attn::ArgumentError);
  CHECK_THROWS_WITH(LengthBucketAccuracy({10, 10}), Contains("strictly"));
  CHECK_THROWS_AS(LengthBucketAccuracy({20, 10}), attn::ArgumentError);
}
