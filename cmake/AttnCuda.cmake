# SPDX-License-Identifier: MIT
# The attn::cuda target: attn plus the CUDA runtime and the nvcc flags that Eigen 3.4 and fmt 9 need.
# cuBLAS is not linked: attn opens it on first use (dlopen, include/attn/backend/cuda/runtime.cuh),
# so that a program built with the backend starts without loading it and runs on the CPU without it.
# The GPUs the kernels are built for: CMAKE_CUDA_ARCHITECTURES (or the CUDAARCHS environment
# variable) where given, else nvcc's default, which enable_language(CUDA) has set by now (with
# CUDA 13, sm_75 and its PTX: Turing's machine code, which the driver compiles for any newer GPU at
# a kernel's first use). scripts/test.sh passes the GPU's own architecture where there is one, and
# benchmarks/gpu-check.sh the one it measures.
find_package(CUDAToolkit REQUIRED)
add_library(attn_cuda INTERFACE)
add_library(attn::cuda ALIAS attn_cuda)
set_target_properties(attn_cuda PROPERTIES EXPORT_NAME cuda)
target_link_libraries(attn_cuda INTERFACE attn CUDA::cudart ${CMAKE_DL_LIBS})
if("cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
  target_compile_features(attn_cuda INTERFACE cuda_std_20)
else()
  # CMake 3.25 does not know nvcc's C++20 flag (cuda_std_20 is an unknown feature there).
  target_compile_options(attn_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
endif()
target_compile_definitions(attn_cuda INTERFACE ATTN_CUDA=1)
# --extended-lambda: `[] __device__ (float x) { ... }` functors for attn::cuda::map.
# -Xcompiler=-fopenmp: the host pass sees the same OpenMP code in attn's CPU headers as g++ does.
target_compile_options(attn_cuda INTERFACE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --extended-lambda -diag-suppress=20012,20013,20015 -DFMT_USE_CONSTEXPR=1 -Xcompiler=-fopenmp>)
