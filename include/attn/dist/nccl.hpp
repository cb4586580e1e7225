// SPDX-License-Identifier: MIT
// dist::NcclCommunicator: DataParallel's collectives on CUDA memory with NCCL, on attn's stream, with a
// watchdog. nvcc with ATTN_NCCL only (attn/dist.hpp then includes it); link attn::cuda, attn::mpi, NCCL.
//   attn::dist::NcclCommunicator nccl(mpi);  attn::dist::DataParallel<float, attn::cuda, attn::dist::NcclCommunicator> ddp(model, nccl);
#pragma once
#if !defined(__CUDACC__)
#error "attn/dist/nccl.hpp must be compiled by nvcc as CUDA: name the source .cu and link attn::cuda and NCCL"
#endif
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "../backend/cuda.hpp"
#include "../core/error.hpp"
#include "../core/tensor.hpp"
#include "communicator.hpp"
#include "environment.hpp"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 10, 0)
#error "attn/dist/nccl.hpp needs NCCL 2.10 or newer (ncclAvg)"
#endif

namespace attn::dist {

namespace detail {

inline void check_nccl(ncclResult_t r, std::string_view what) {
  if (r == ncclSuccess) return;
  std::string msg = "attn::dist: " + std::string(what) + " failed: " + ncclGetErrorString(r);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (const char* last = ncclGetLastError(nullptr); last && *last) msg += std::string(" (") + last + ")";
#endif
  throw Error(msg);
}

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return ncclUint64;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return ncclUint8;
  else static_assert(sizeof(T) == 0, "attn::dist: no NCCL datatype for this element type");
}

}  // namespace detail

class NcclCommunicator;

/// NCCL operations enqueued on attn's stream since this batch was made. wait() returns once they
/// have run on the device; the watchdog aborts the communicator and the job if that takes longer
/// than the timeout. Destroying an unwaited batch waits for it.
class NcclPending {
 public:
  NcclPending(const NcclCommunicator& comm, std::string what) : comm_(&comm), what_(std::move(what)) {}
  NcclPending(NcclPending&& o) noexcept : comm_(o.comm_), what_(std::move(o.what_)), ops_(o.ops_), bytes_(o.bytes_) { o.ops_ = 0; }
  NcclPending(const NcclPending&) = delete;
  NcclPending& operator=(const NcclPending&) = delete;
  NcclPending& operator=(NcclPending&&) = delete;
  ~NcclPending() {
    if (ops_ > 0) wait_impl(false);
  }

  void wait() { wait_impl(true); }
  bool empty() const noexcept { return ops_ == 0; }
  std::size_t size() const noexcept { return ops_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  friend class NcclCommunicator;
  void wait_impl(bool may_throw);

  const NcclCommunicator* comm_;
  std::string what_;
  std::size_t ops_ = 0;
  std::size_t bytes_ = 0;
};

/// An NCCL communicator over the same ranks as an MPI one, on the calling thread's current CUDA
/// device (choose it first, one device per rank: cudaSetDevice(node_local_rank(mpi) % devices)).
/// NCCL refuses two ranks on one device. Every rank must issue the same collectives in order.
class NcclCommunicator {
 public:
  static constexpr bool device_memory = true;
  using pending_type = NcclPending;

  /// Rank 0 makes the NCCL id, MPI carries it to the others; timeout as for `mpi`.
  explicit NcclCommunicator(const Communicator& mpi) : timeout_(mpi.timeout()) {
    ncclUniqueId id{};
    if (mpi.rank() == 0) detail::check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<std::uint8_t> bytes(sizeof id);
    std::memcpy(bytes.data(), &id, sizeof id);
    mpi.broadcast(std::span<std::uint8_t>(bytes), 0);
    std::memcpy(&id, bytes.data(), sizeof id);
    mpi.barrier();  // every rank is here: ncclCommInitRank, which blocks until all join, will not wait on a dead one
    init(id, mpi.size(), mpi.rank());
  }
  /// Without MPI: the caller moves `id` (from ncclGetUniqueId on one rank) to all `size` ranks.
  NcclCommunicator(const ncclUniqueId& id, int size, int rank, std::chrono::milliseconds timeout = std::chrono::milliseconds(0))
      : timeout_(timeout.count() > 0 ? timeout : detail::default_timeout()) {
    if (size < 1 || rank < 0 || rank >= size)
      throw ArgumentError("attn::dist::NcclCommunicator: rank " + std::to_string(rank) + " is not in a job of " + std::to_string(size));
    init(id, size, rank);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() {
    if (comm_) ncclCommDestroy(comm_);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  bool is_main() const noexcept { return rank_ == 0; }
  int device() const noexcept { return device_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  ncclComm_t native() const noexcept { return comm_; }

  NcclPending pending(std::string what) const { return NcclPending(*this, std::move(what)); }

  /// In-place all-reduce of device memory data[0, n) on attn's stream; mean is NCCL's ncclAvg.
  template <class T>
  void start_all_reduce(T* data, std::size_t n, ReduceOp op, NcclPending& into) const {
    enter("start_all_reduce");
    detail::check_nccl(ncclAllReduce(data, data, n, detail::nccl_type<T>(), op == ReduceOp::mean ? ncclAvg : op == ReduceOp::max ? ncclMax : ncclSum, comm_, cuda::stream()),
                       "ncclAllReduce");
    ++into.ops_;
    into.bytes_ += n * sizeof(T);
  }
  /// In-place broadcast of device memory data[0, n) from rank root.
  template <class T>
  void start_broadcast(T* data, std::size_t n, int root, NcclPending& into) const {
    enter("start_broadcast");
    if (root < 0 || root >= size_)
      throw ArgumentError("attn::dist::NcclCommunicator::broadcast: root " + std::to_string(root) + " is not a rank of a job of " +
                          std::to_string(size_));
    detail::check_nccl(ncclBroadcast(data, data, n, detail::nccl_type<T>(), root, comm_, cuda::stream()), "ncclBroadcast");
    ++into.ops_;
    into.bytes_ += n * sizeof(T);
  }
  /// One host value from every rank, in rank order (through a small device buffer).
  template <class T>
  std::vector<T> all_gather(T value) const {
    enter("all_gather");
    const std::size_t n = static_cast<std::size_t>(size_);
    Tensor<T, AnyShape, cuda> buf(Dims{n + 1});
    cuda::from_host<T>(buf.data() + n, &value, 1);
    auto p = pending("all_gather");
    detail::check_nccl(ncclAllGather(buf.data() + n, buf.data(), 1, detail::nccl_type<T>(), comm_, cuda::stream()), "ncclAllGather");
    ++p.ops_;
    p.wait();
    std::vector<T> out(n);
    cuda::to_host<T>(out.data(), buf.data(), n);
    return out;
  }

 private:
  friend class NcclPending;

  void init(const ncclUniqueId& id, int size, int rank) {
    cuda_detail::check(cudaGetDevice(&device_), "attn::dist::NcclCommunicator: cudaGetDevice");
    (void)cuda::stream();  // attn's stream on this device exists before NCCL enqueues on it
    detail::check_nccl(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
    size_ = size;
    rank_ = rank;
  }
  /// NCCL's communicator is bound to one device: calls from another current device are errors.
  void enter(const char* op) const {
    int d = -1;
    cuda_detail::check(cudaGetDevice(&d), "attn::dist::NcclCommunicator: cudaGetDevice");
    if (d != device_)
      throw ArgumentError(std::string("attn::dist::NcclCommunicator::") + op + ": called with device " + std::to_string(d) +
                          " current; the communicator belongs to device " + std::to_string(device_));
  }

  ncclComm_t comm_ = nullptr;
  int size_ = 1;
  int rank_ = 0;
  int device_ = 0;
  std::chrono::milliseconds timeout_;
};

/// Records an event after the batch's operations on attn's stream and polls it. While polling it
/// also asks NCCL for asynchronous errors (a peer's failure seen by the transport). Past the
/// timeout, or on such an error, the NCCL communicator is aborted (ncclCommAbort returns from
/// kernels stuck on a dead peer) and then the job (abort_job).
inline void NcclPending::wait_impl(bool may_throw) {
  using clock = std::chrono::steady_clock;
  const std::size_t ops = ops_;
  ops_ = 0;
  if (ops == 0) return;
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(ev, cuda::stream());
  if (e != cudaSuccess) {
    if (ev) cudaEventDestroy(ev);
    if (!may_throw) abort_job(what_ + ": cudaEventRecord failed while unwinding; aborting the job", 1);
    cuda_detail::fail(e, "attn::dist: " + what_ + ": cudaEventRecord");
  }
  const auto start = clock::now();
  const auto deadline = start + comm_->timeout();
  for (;;) {
    e = cudaEventQuery(ev);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      cudaEventDestroy(ev);
      if (!may_throw) abort_job(what_ + ": " + cuda_detail::error_text(e) + " while unwinding; aborting the job", 1);
      cuda_detail::fail(e, "attn::dist: " + what_);
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_->native(), &async);
    const auto now = clock::now();
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(comm_->native());
      abort_job(what_ + ": NCCL reports " + ncclGetErrorString(async) + "; aborting the job", 3);
    }
    if (now > deadline) {
      ncclCommAbort(comm_->native());
      abort_job(what_ + " did not complete within " + std::to_string(comm_->timeout().count() / 1000.0) +
                    " s (watchdog: a peer rank has failed or stopped issuing this collective); aborting the job",
                3);
    }
    if (now - start < std::chrono::milliseconds(5)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  cudaEventDestroy(ev);
}

/// This process's rank among the ranks on its machine (MPI_COMM_TYPE_SHARED), for picking a device.
inline int node_local_rank(const Communicator& mpi) {
  MPI_Comm node = MPI_COMM_NULL;
  detail::check_mpi(MPI_Comm_split_type(mpi.native(), MPI_COMM_TYPE_SHARED, mpi.rank(), MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int r = 0;
  const int rc = MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  detail::check_mpi(rc, "MPI_Comm_rank");
  return r;
}

}  // namespace attn::dist
