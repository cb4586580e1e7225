// SPDX-License-Identifier: MIT
// The examples' precompiled header is built from this file (examples/CMakeLists.txt).
