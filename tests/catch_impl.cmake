# SPDX-License-Identifier: MIT
# attn_catch_impl: Catch2 v2's implementation (catch_impl.cpp), compiled once for all test programs
# rather than once per main. It is third-party code that runs no attn code, so it is built without
# attn's flags: at -O1 without debug information (a third of the time of -O3 -g), and without the
# sanitizers in ATTN_SANITIZE builds (instrumenting it takes longer than compiling it, and finds
# nothing of attn's). Link it directly into each test executable (object files do not propagate
# through another OBJECT library).
if(NOT TARGET attn_catch_impl)
  add_library(attn_catch_impl OBJECT ${CMAKE_CURRENT_LIST_DIR}/catch_impl.cpp)
  target_link_libraries(attn_catch_impl PUBLIC Catch2::Catch2)
  # StringMaker<std::byte> exists from C++17 on: the same standard as the tests (Clang 14 defaults to C++14).
  target_compile_features(attn_catch_impl PRIVATE cxx_std_20)
  target_compile_options(attn_catch_impl PRIVATE -O1 -g0)
endif()
