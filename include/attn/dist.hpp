// SPDX-License-Identifier: MIT
// attn/dist: data-parallel training over MPI (host memory) and, when compiled by nvcc with
// ATTN_NCCL, NCCL (CUDA memory). Optional: link attn::mpi. Not included by attn/attn.hpp.
//   #include <attn/dist.hpp>   attn::dist::Environment env(argc, argv); attn::dist::Communicator comm;
#pragma once
#include "dist/environment.hpp"
#include "dist/communicator.hpp"
#include "dist/grad_buckets.hpp"
#include "dist/data_parallel.hpp"
#include "dist/sampler.hpp"
#if defined(__CUDACC__) && defined(ATTN_NCCL)
#include "dist/nccl.hpp"
#endif
