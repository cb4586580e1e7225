// SPDX-License-Identifier: MIT
// The tests' precompiled header is built from this file (tests/CMakeLists.txt).
