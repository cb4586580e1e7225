# The attn::cuda target: attn plus cuBLAS and the nvcc flags that Eigen 3.4 and fmt 9 need.
find_package(CUDAToolkit REQUIRED)
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
add_library(attn_cuda INTERFACE)
add_library(attn::cuda ALIAS attn_cuda)
set_target_properties(attn_cuda PROPERTIES EXPORT_NAME cuda)
target_link_libraries(attn_cuda INTERFACE attn CUDA::cudart CUDA::cublas)
target_compile_definitions(attn_cuda INTERFACE ATTN_CUDA=1)
target_compile_options(attn_cuda INTERFACE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -diag-suppress=20012,20013,20015 -DFMT_USE_CONSTEXPR=1>)
