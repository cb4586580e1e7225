# Finds attn's dependencies: all from Debian packages (scripts/install-deps.sh); nothing is downloaded.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(MPI QUIET COMPONENTS CXX)

# The GEMM library under cpu::gemm (include/attn/backend/cpu_blas.hpp). BLIS and OpenBLAS pick
# their kernels for the CPU at run time and beat Eigen's compile-time kernels on the projection
# shapes (benchmarks/README.md). Only their OpenMP builds are used (Debian's libblis-openmp-dev,
# libopenblas-openmp-dev): they share attn's OpenMP runtime and run on the calling thread inside
# attn's parallel loops, where the pthreads builds would oversubscribe the cores.
set(ATTN_BLAS auto CACHE STRING "GEMM library for the CPU backend: auto (BLIS, else OpenBLAS, else Eigen's own), blis, openblas or none")
set_property(CACHE ATTN_BLAS PROPERTY STRINGS auto blis openblas none)
set(ATTN_BLAS_VENDOR none)
set(ATTN_BLAS_LIBRARY "")
if(NOT ATTN_BLAS MATCHES "^(auto|blis|openblas|none)$")
  message(FATAL_ERROR "ATTN_BLAS is '${ATTN_BLAS}'; it must be auto, blis, openblas or none")
endif()
if(ATTN_BLAS MATCHES "^(auto|blis)$")
  find_library(ATTN_BLIS_LIBRARY NAMES blis PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/blis-openmp NO_DEFAULT_PATH
    DOC "BLIS, OpenMP build")
  if(ATTN_BLIS_LIBRARY)
    set(ATTN_BLAS_VENDOR blis)
    set(ATTN_BLAS_LIBRARY ${ATTN_BLIS_LIBRARY})
  elseif(ATTN_BLAS STREQUAL "blis")
    message(FATAL_ERROR "ATTN_BLAS=blis: the OpenMP build of BLIS was not found (apt-get install libblis-openmp-dev, or set ATTN_BLIS_LIBRARY)")
  endif()
endif()
if(ATTN_BLAS_VENDOR STREQUAL "none" AND ATTN_BLAS MATCHES "^(auto|openblas)$")
  find_library(ATTN_OPENBLAS_LIBRARY NAMES openblas PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH
    DOC "OpenBLAS, OpenMP build")
  if(ATTN_OPENBLAS_LIBRARY)
    set(ATTN_BLAS_VENDOR openblas)
    set(ATTN_BLAS_LIBRARY ${ATTN_OPENBLAS_LIBRARY})
  elseif(ATTN_BLAS STREQUAL "openblas")
    message(FATAL_ERROR "ATTN_BLAS=openblas: the OpenMP build of OpenBLAS was not found (apt-get install libopenblas-openmp-dev, or set ATTN_OPENBLAS_LIBRARY)")
  endif()
endif()
if(ATTN_BLAS_LIBRARY)
  message(STATUS "attn: cpu::gemm uses ${ATTN_BLAS_VENDOR} (${ATTN_BLAS_LIBRARY})")
else()
  message(STATUS "attn: cpu::gemm uses Eigen's product (ATTN_BLAS=${ATTN_BLAS}; no BLIS or OpenBLAS OpenMP build found)")
endif()
