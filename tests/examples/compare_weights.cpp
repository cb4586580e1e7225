// SPDX-License-Identifier: MIT
// Compares two safetensors files tensor by tensor: the same names, shapes and dtypes, and values
// within a norm-relative tolerance (max |a - b| / max |b|). Exits 1 and names the tensors that differ.
//   compare_weights A.safetensors B.safetensors 1e-5 [--skip NAME]...
#include <attn/io/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: compare_weights A B tolerance [--skip NAME]...\n");
    return 2;
  }
  std::set<std::string> skip;
  for (int i = 4; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--skip") skip.insert(argv[i + 1]);
  try {
    const auto a = attn::io::read_safetensors(argv[1]);
    const auto b = attn::io::read_safetensors(argv[2]);
    const double tol = std::atof(argv[3]);
    int bad = 0;
    double worst = 0;
    for (const auto& [name, ra] : a.tensors) {
      const auto it = b.tensors.find(name);
      if (it == b.tensors.end()) {
        std::printf("%s: only in %s\n", name.c_str(), argv[1]);
        ++bad;
        continue;
      }
      if (ra.shape != it->second.shape || ra.dtype != it->second.dtype) {
        std::printf("%s: shape or dtype differs\n", name.c_str());
        ++bad;
        continue;
      }
      const auto va = ra.to_vector<double>(), vb = it->second.to_vector<double>();
      double num = 0, den = 1e-30;
      for (std::size_t i = 0; i < va.size(); ++i) {
        num = std::max(num, std::abs(va[i] - vb[i]));
        den = std::max(den, std::abs(vb[i]));
      }
      const double e = num / den;
      const bool skipped = skip.count(name) != 0;
      if (!skipped) worst = std::max(worst, e);
      std::printf("%-40s %.3g%s\n", name.c_str(), e, skipped ? " (skipped)" : e > tol ? "  > tolerance" : "");
      if (!skipped && !(e <= tol)) ++bad;
    }
    for (const auto& [name, rb] : b.tensors)
      if (!a.tensors.count(name)) {
        std::printf("%s: only in %s\n", name.c_str(), argv[2]);
        ++bad;
      }
    std::printf("largest norm-relative difference %.3g (tolerance %g): %s\n", worst, tol, bad ? "DIFFERENT" : "same");
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_weights: %s\n", e.what());
    return 2;
  }
}
