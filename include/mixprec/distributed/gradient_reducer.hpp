/// \file
/// \brief `distributed::gradient_reducer`: the gradients of every rank averaged into every rank, as
/// PyTorch's DistributedDataParallel does it — the gradient tensors (walked with the gradients'
/// `for_each(f(name, tensor))`) packed into buckets of about `bucket_bytes` (DDP's `bucket_cap_mb`,
/// 25 MiB by default) in reverse walk order (the order in which a backward pass finishes them), each
/// bucket summed across ranks by one `MPI_Allreduce` and divided by the rank count. The buckets are
/// laid out once, when the reducer is made (after a collective check that every rank has the same
/// tree), and their buffers are reused by every step. Optionally float32 gradients cross the wire as
/// bfloat16 (PyTorch's `bf16_compress_hook`), summed in float32 on arrival, with optional error
/// feedback (each rank adds its last rounding residual to its next gradient: 1-bit Adam, PowerSGD).
/// During the backward pass, `ready(grads, prefix)` (DDP's autograd hooks; `nn::gradients_ready`)
/// starts each bucket's sum (`MPI_Iallreduce`) as soon as its gradients are final, and `average` then
/// waits for them: the reduction overlaps the rest of the backward pass.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/structure.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/convert.hpp"

namespace mixprec::distributed {

/// The format of float32 gradients on the wire (float64 gradients always travel as float64).
enum class wire_format : std::uint8_t {
  /// float32: one `MPI_Allreduce` (`MPI_SUM`) per bucket, then the sum divided by the rank count.
  float32,
  /// bfloat16 (PyTorch's `bf16_compress_hook`, but never adding in bfloat16): each rank rounds its
  /// bucket to bfloat16 (nearest even); rank k receives every rank's bfloat16 values of its k-th
  /// share of the bucket (`MPI_Alltoallv`), widens them and adds them in float32 in rank order,
  /// divides by the rank count and rounds the mean to bfloat16; every rank gathers the means
  /// (`MPI_Allgatherv`) and widens them. Half the float32 wire's bytes; two roundings to bfloat16.
  bfloat16,
};

/// Options of `gradient_reducer`.
struct reducer_options {
  /// Bytes of gradient per bucket (PyTorch DDP's default `bucket_cap_mb` = 25): a bucket closes once it
  /// holds at least this many; a tensor is never split. Must be > 0.
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// The first bucket (the last tensors of the walk, the first a backward pass finishes) closes at this
  /// many bytes (PyTorch DDP's `_DEFAULT_FIRST_BUCKET_BYTES`, 1 MiB), so that its sum can start early
  /// (`ready`); at most `bucket_bytes`.
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
  /// The wire format of float32 gradients.
  wire_format wire = wire_format::float32;
  /// bfloat16 wire only: error feedback. Each rank sends bfloat16(g + e) and keeps e = (g + e) -
  /// bfloat16(g + e) for its next step (e starts at 0), so that its rounding errors do not accumulate
  /// over the steps (1-bit Adam's and PowerSGD's error feedback; the rounding of the mean is not fed back).
  bool error_feedback = false;
};

/// Averages gradients across the ranks of a communicator: after `average(grads)`, every rank's gradient
/// element is (Σ over ranks of that element) / size, summed by MPI_Allreduce (MPI_SUM) in the gradient's
/// own type (float32 or float64) and divided once, or through the bfloat16 wire (`wire_format`). The
/// same ranks and inputs give the same bits on every run; every rank receives the same bits.
///
/// The gradients type G offers `for_each(f(name, tensor))` (every nn layer's and model's gradients
/// do), its tensors contiguous float or double. Collective: every rank makes the reducer and calls
/// `ready` and `average` at the same points, with gradients of the same structure, on the thread that
/// made the MPI environment (`MPI_THREAD_FUNNELED`); every error is agreed by all ranks, which then all
/// throw it. The communicator must outlive the reducer (it keeps its address). Overlap (`ready`) keeps
/// one copy of the gradients in per-bucket buffers (made at the first `ready`).
/// \throws std::invalid_argument from the constructor when `bucket_bytes` is 0, error feedback is asked
///         for the float32 wire, the ranks' options differ, a bucket holds 2^31 elements or more (MPI's
///         int counts), or the ranks'
///         gradient trees differ (on every rank, naming the first difference: `check_same_structure`), or a tensor
///         is neither float nor double; from `average` when the tree given differs from the one the
///         reducer was made for; mpi_error.
class gradient_reducer {
 public:
  /// Lays out the buckets for gradients shaped as `grads` (their values are not read).
  template <class G>
  gradient_reducer(const communicator& comm, const G& grads, reducer_options options = {})
      : comm_(&comm), options_(options) {
    // Every check is agreed by all ranks before anything throws: a rank that threw alone would leave the
    // others waiting in the next collective.
    std::string error;
    if (options_.bucket_bytes == 0) {
      error =
          "mixprec::distributed::gradient_reducer: bucket_bytes is 0; give a positive size (PyTorch DDP's "
          "default is 25 MiB)";
    } else if (options_.error_feedback && options_.wire != wire_format::bfloat16) {
      error =
          "mixprec::distributed::gradient_reducer: error_feedback compensates the bfloat16 wire's rounding; set "
          "wire = wire_format::bfloat16 or leave error_feedback off";
    }
    throw_if_any_rank(comm, error);
    {
      // The ranks must lay out the same buckets: every option the layout depends on, compared by its
      // maximum and the maximum of its complement (the minimum) over the ranks. Every rank takes part.
      unsigned long long v[8] = {options_.bucket_bytes, options_.first_bucket_bytes,
                                 static_cast<unsigned long long>(options_.wire),
                                 static_cast<unsigned long long>(options_.error_feedback)};
      for (int i = 0; i < 4; ++i) v[4 + i] = ~v[i];
      check(MPI_Allreduce(MPI_IN_PLACE, v, 8, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm.native()), "MPI_Allreduce");
      for (int i = 0; i < 4; ++i) {
        if (v[i] != ~v[4 + i]) {
          error =
              "mixprec::distributed::gradient_reducer: the ranks' options differ (bucket_bytes, first_bucket_bytes, "
              "wire or error_feedback); give every rank the same";
        }
      }
    }
    throw_if_any_rank(comm, error);
    entries_ = structure_of([&](auto&& f) { grads.for_each(f); });
    check_same_structure(comm, entries_, "gradients");
    // The same tree on every rank: the checks below fail on every rank alike.
    for (const auto& e : entries_) {
      if (e.element_bytes != sizeof(float) && e.element_bytes != sizeof(double)) {
        throw std::invalid_argument(internal::concat("mixprec::distributed::gradient_reducer: gradient ", describe(e),
                                                     " is not float32 or float64; gradients live in grad_t<P>"));
      }
    }
    // Buckets in reverse walk order; a bucket holds one element size and closes at bucket_bytes (the
    // first at first_bucket_bytes).
    bucket_of_.resize(entries_.size());
    for (std::size_t k = entries_.size(); k-- > 0;) {
      const auto& e = entries_[k];
      const std::size_t cap =
          buckets_.size() == 1 ? std::min(options_.first_bucket_bytes, options_.bucket_bytes) : options_.bucket_bytes;
      if (buckets_.empty() || buckets_.back().element_bytes != e.element_bytes || buckets_.back().bytes >= cap) {
        buckets_.push_back(bucket{e.element_bytes, 0, {}});
      }
      buckets_.back().tensors.push_back(k);
      buckets_.back().bytes += e.elements * e.element_bytes;
      bucket_of_[k] = buckets_.size() - 1;
    }
    std::size_t largest = 0;
    std::size_t floats = 0;
    for (const auto& b : buckets_) {
      largest = std::max(largest, b.bytes);
      if (b.bytes / b.element_bytes > std::size_t{0x7FFFFFFF}) {
        throw std::invalid_argument(internal::concat("mixprec::distributed::gradient_reducer: a bucket of ",
                                                     b.bytes / b.element_bytes,
                                                     " elements exceeds MPI's int counts; split the tensor"));
      }
      if (b.element_bytes == sizeof(float)) floats += b.bytes / sizeof(float);
    }
    buffer_.resize((largest + sizeof(double) - 1) / sizeof(double));
    if (options_.wire == wire_format::bfloat16) {
      const std::size_t n = largest / sizeof(float) + 1;
      wire_.resize(n);
      gathered_.resize(n);
      received_.resize(n + static_cast<std::size_t>(comm.size()));
      if (options_.error_feedback) residual_.assign(floats, 0.0F);
    }
  }

  gradient_reducer(const gradient_reducer&) = delete;
  gradient_reducer& operator=(const gradient_reducer&) = delete;
  gradient_reducer(gradient_reducer&&) noexcept = default;
  gradient_reducer& operator=(gradient_reducer&&) noexcept = default;
  /// Waits for the sums `ready` started, if an `average` did not (their buffers are freed here).
  ~gradient_reducer() {
    if (overlapping_) MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }

  /// Abandons a step after `ready` calls (a step skipped before its `average`): waits for the sums in
  /// flight and forgets them, so that the next step starts afresh. Collective when sums are in flight
  /// (every rank made the same `ready` calls). \throws mpi_error.
  void discard() {
    if (!overlapping_) return;
    overlapping_ = false;
    check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }

  /// The buckets whose sums `ready` has started since the last `average` (0 after it).
  [[nodiscard]] std::size_t buckets_started() const noexcept {
    std::size_t n = 0;
    if (overlapping_)
      for (const auto started : started_) n += started;
    return n;
  }
  /// The number of buckets (each one MPI_Allreduce per step).
  [[nodiscard]] std::size_t buckets() const noexcept { return buckets_.size(); }
  /// Bytes of gradient per `average` (the gradients' own bytes).
  [[nodiscard]] std::size_t bytes_per_step() const noexcept {
    std::size_t total = 0;
    for (const auto& b : buckets_) total += b.bytes;
    return total;
  }
  /// Bytes each rank sends per `average` in a bandwidth-optimal all-reduce of its buckets in the wire
  /// format (a reduce-scatter and an all-gather: 2 (R - 1) / R of the bucket, R ranks): what the
  /// bfloat16 wire sends, and the cost of the float32 wire's all-reduce for that algorithm (MPI
  /// chooses its own).
  [[nodiscard]] std::size_t wire_bytes_per_step() const noexcept {
    const auto r = static_cast<std::size_t>(comm_->size());
    std::size_t total = 0;
    for (const auto& b : buckets_) {
      const std::size_t elements = b.bytes / b.element_bytes;
      const std::size_t wire_bytes =
          b.element_bytes == sizeof(float) && options_.wire == wire_format::bfloat16 ? 2 : b.element_bytes;
      total += 2 * (r - 1) * elements * wire_bytes / r;
    }
    return total;
  }

  /// Multiplies the error-feedback residuals by `factor` (no-op without error feedback): they are in
  /// the units of the gradients given to `average`, so a caller that averages loss-scaled gradients
  /// passes new_scale / old_scale when the loss scale changes.
  void scale_residuals(float factor) noexcept {
    for (float& e : residual_) e *= factor;
  }

  /// Overlap with the backward pass (PyTorch DDP's autograd hooks): during the backward pass that
  /// computes `grads`, says that every gradient named `prefix` or `prefix.<...>` is final
  /// (`nn::gradients_ready`). Each bucket whose tensors are then all final is copied out and its sum
  /// started (`MPI_Iallreduce`; the float32 wire and float64 buckets: the bfloat16 wire's two
  /// collectives wait for `average`), and MPI is let progress the sums in flight (`MPI_Testall`: Open
  /// MPI has no progress thread, so a sum advances when some MPI call is made). The `average(grads)`
  /// that follows starts the other buckets, waits for all and writes the means. Every rank must make
  /// the same `ready` calls in the same order (the same backward pass), with the same `grads` as that
  /// `average`; a prefix that names no gradient does nothing, and a tree that is not the reducer's
  /// starts nothing (`average` reports it). With gradient accumulation, report only in the last
  /// micro-batch's backward pass (DDP's `no_sync` for the others).
  /// \throws std::logic_error on every rank when `prefix` names a gradient already reported final since
  ///         the last `average` (after waiting for the sums in flight, which are dropped); mpi_error.
  template <class G>
  void ready(const G& grads, std::string_view prefix) {
    const internal::profile_scope region("distributed::ready");
    if (!overlapping_) {
      ready_.assign(entries_.size(), 0);
      pending_.resize(buckets_.size());
      for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].tensors.size();
      requests_.assign(buckets_.size(), MPI_REQUEST_NULL);
      started_.assign(buckets_.size(), 0);
      if (sums_.size() != buckets_.size()) {
        sums_.resize(buckets_.size());
        for (std::size_t b = 0; b < buckets_.size(); ++b)
          sums_[b].resize((buckets_[b].bytes + sizeof(double) - 1) / sizeof(double));
      }
      overlapping_ = true;
    }
    std::vector<const std::byte*> data;
    if (!tensors_of(grads, data).empty()) return;  // not the reducer's tree: `average` reports it
    for (std::size_t k = 0; k < entries_.size(); ++k) {
      const std::string_view name = entries_[k].name;
      const bool under = name.starts_with(prefix) && (name.size() == prefix.size() || name[prefix.size()] == '.');
      if (!under) continue;
      if (ready_[k] != 0) {
        discard();
        throw std::logic_error(
            internal::concat("mixprec::distributed::gradient_reducer::ready: gradient \"", name,
                             "\" was already reported final in this step; report each part once per step, in the last "
                             "micro-batch's backward pass (the sums started are dropped)"));
      }
      ready_[k] = 1;
      const std::size_t b = bucket_of_[k];
      if (--pending_[b] == 0 && !(buckets_[b].element_bytes == sizeof(float) && options_.wire == wire_format::bfloat16))
        start(b, data);
    }
    check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &tested_, MPI_STATUSES_IGNORE),
          "MPI_Testall");
  }

  /// Replaces every gradient element by its mean over the ranks. Collective. After `ready` calls, waits
  /// for the sums they started (the same bits as without them when two ranks add: a + b = b + a; with
  /// more ranks Open MPI may add the non-blocking sums in another order, fixed for a run).
  /// \throws std::invalid_argument when grads' tree is not the one the reducer was made for; mpi_error.
  template <class G>
  void average(G& grads) {
    const internal::profile_scope region("distributed::average_gradients");
    std::vector<std::byte*> data;
    const std::string error = tensors_of(grads, data);  // agreed by every rank before any reduction
    try {
      throw_if_any_rank(*comm_, error);
    } catch (const std::invalid_argument&) {
      if (overlapping_) {  // the sums `ready` started end (unused) before every rank throws
        overlapping_ = false;
        check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      }
      throw;
    }
    std::size_t residual_at = 0;  // error feedback: the residuals of the float buckets, in bucket order
    for (std::size_t index = 0; index < buckets_.size(); ++index) {
      const bucket& b = buckets_[index];
      if (overlapping_ && started_[index] != 0) continue;  // summing since `ready`: finished below
      if (b.element_bytes == sizeof(float) && options_.wire == wire_format::bfloat16) {
        reduce_bfloat16(b, data, residual_at);
        residual_at += b.bytes / sizeof(float);
      } else if (b.element_bytes == sizeof(float)) {
        reduce<float>(b, data);
      } else {
        reduce<double>(b, data);
      }
    }
    if (overlapping_) {
      const internal::profile_scope wait_region("distributed::wait_for_started_sums");
      check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      for (std::size_t index = 0; index < buckets_.size(); ++index) {
        if (started_[index] == 0) continue;
        if (buckets_[index].element_bytes == sizeof(float))
          unpack<float>(buckets_[index], reinterpret_cast<const float*>(sums_[index].data()), data);
        else
          unpack<double>(buckets_[index], sums_[index].data(), data);
      }
      overlapping_ = false;
    }
  }

 private:
  struct bucket {
    std::size_t element_bytes;
    std::size_t bytes;
    std::vector<std::size_t> tensors;  // indices into entries_, in reverse walk order
  };

  /// The data of `grads`' tensors in walk order, into `data`; an error message (empty: none) when the
  /// tree is not the one the reducer was made for (names, element sizes and counts, in order).
  template <class G, class Pointer>
  std::string tensors_of(G& grads, std::vector<Pointer>& data) const {
    data.reserve(entries_.size());
    std::string error;
    grads.for_each([&](std::string_view name, auto& tensor) {
      using E = std::remove_cvref_t<decltype(*tensor.data())>;
      const std::size_t k = data.size();
      if (error.empty() &&
          (k >= entries_.size() || name != entries_[k].name || sizeof(E) != entries_[k].element_bytes ||
           static_cast<std::size_t>(tensor.size()) != entries_[k].elements)) {
        error = internal::concat("mixprec::distributed::gradient_reducer::average: gradient ", k, " (\"", name,
                                 "\") is not the tensor the reducer was made for (",
                                 k < entries_.size() ? describe(entries_[k]) : std::string("none"),
                                 "); make the reducer for these gradients");
      }
      data.push_back(reinterpret_cast<Pointer>(tensor.data()));
    });
    if (error.empty() && data.size() != entries_.size()) {
      error = internal::concat("mixprec::distributed::gradient_reducer::average: the gradients have ", data.size(),
                               " tensors but the reducer was made for ", entries_.size());
    }
    return error;
  }

  /// Copies bucket `b`'s gradients (`data`, by tensor index) one after another into `dst`; returns
  /// the bucket's element count.
  template <class Pointer>
  std::size_t pack(const bucket& b, const std::vector<Pointer>& data, std::byte* dst) const {
    std::size_t at = 0;
    for (const std::size_t k : b.tensors) {
      std::memcpy(dst + at, data[k], entries_[k].elements * b.element_bytes);
      at += entries_[k].elements * b.element_bytes;
    }
    return at / b.element_bytes;
  }

  template <class T>
  void reduce(const bucket& b, const std::vector<std::byte*>& data) {
    T* buf = reinterpret_cast<T*>(buffer_.data());
    const std::size_t at = pack(b, data, reinterpret_cast<std::byte*>(buf));
    const MPI_Datatype type = std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
    // The constructor refused buckets of 2^31 elements or more (MPI's int counts).
    check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(at), type, MPI_SUM, comm_->native()), "MPI_Allreduce");
    unpack<T>(b, buf, data);
  }

  /// The means of bucket `b` from its sums `buf`, into the gradients.
  template <class T>
  void unpack(const bucket& b, const T* buf, const std::vector<std::byte*>& data) const {
    const T ranks = static_cast<T>(comm_->size());
    std::size_t at = 0;
    for (const std::size_t k : b.tensors) {
      T* dst = reinterpret_cast<T*>(data[k]);
      for (std::size_t i = 0; i < entries_[k].elements; ++i) dst[i] = buf[at + i] / ranks;
      at += entries_[k].elements;
    }
  }

  /// `ready`: copies bucket `index` out of the gradients and starts its sum.
  void start(std::size_t index, const std::vector<const std::byte*>& data) {
    const bucket& b = buckets_[index];
    auto* buf = reinterpret_cast<std::byte*>(sums_[index].data());
    const std::size_t n = pack(b, data, buf);
    const MPI_Datatype type = b.element_bytes == sizeof(float) ? MPI_FLOAT : MPI_DOUBLE;
    check(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(n), type, MPI_SUM, comm_->native(), &requests_[index]),
          "MPI_Iallreduce");
    started_[index] = 1;
  }

  /// The bfloat16 wire (`wire_format::bfloat16`) for one float bucket; `residual_at`: its first residual.
  void reduce_bfloat16(const bucket& b, const std::vector<std::byte*>& data, std::size_t residual_at) {
    float* v = reinterpret_cast<float*>(buffer_.data());
    const std::size_t n = pack(b, data, reinterpret_cast<std::byte*>(v));
    float* e = options_.error_feedback ? residual_.data() + residual_at : nullptr;
    if (e != nullptr) {
      for (std::size_t i = 0; i < n; ++i) v[i] += e[i];
    }
    mixprec::convert(std::span<const float>(v, n), std::span<bfloat16>(wire_.data(), n));
    if (e != nullptr) {
      // A non-finite value (an overflowed step under loss scaling) leaves no residual: Inf - Inf would
      // make it NaN for every later step.
      for (std::size_t i = 0; i < n; ++i) {
        const float sent = static_cast<float>(wire_[i]);
        e[i] = std::isfinite(v[i]) && std::isfinite(sent) ? v[i] - sent : 0.0F;
      }
    }
    // Rank k owns elements [n k / R, n (k + 1) / R).
    const int ranks = comm_->size();
    const auto me = static_cast<std::size_t>(comm_->rank());
    const auto r = static_cast<std::size_t>(ranks);
    const auto begin = [&](std::size_t k) { return n * k / r; };
    const std::size_t mine = begin(me + 1) - begin(me);
    counts_.resize(4 * r);
    int* send_counts = counts_.data();
    int* send_displs = send_counts + r;
    int* recv_counts = send_displs + r;
    int* recv_displs = recv_counts + r;
    for (std::size_t k = 0; k < r; ++k) {
      send_counts[k] = static_cast<int>(begin(k + 1) - begin(k));
      send_displs[k] = static_cast<int>(begin(k));
      recv_counts[k] = static_cast<int>(mine);
      recv_displs[k] = static_cast<int>(k * mine);
    }
    static_assert(sizeof(bfloat16) == sizeof(std::uint16_t));
    check(MPI_Alltoallv(wire_.data(), send_counts, send_displs, MPI_UINT16_T, received_.data(), recv_counts,
                        recv_displs, MPI_UINT16_T, comm_->native()),
          "MPI_Alltoallv");
    // The owner's share: the ranks' values widened and added in float32, in rank order, then the mean.
    const auto count = static_cast<float>(ranks);
    for (std::size_t i = 0; i < mine; ++i) {
      float sum = static_cast<float>(received_[i]);
      for (std::size_t k = 1; k < r; ++k) sum += static_cast<float>(received_[k * mine + i]);
      v[i] = sum / count;
    }
    mixprec::convert(std::span<const float>(v, mine), std::span<bfloat16>(wire_.data(), mine));
    for (std::size_t k = 0; k < r; ++k) recv_counts[k] = send_counts[k];
    check(MPI_Allgatherv(wire_.data(), static_cast<int>(mine), MPI_UINT16_T, gathered_.data(), recv_counts, send_displs,
                         MPI_UINT16_T, comm_->native()),
          "MPI_Allgatherv");
    mixprec::convert(std::span<const bfloat16>(gathered_.data(), n), std::span<float>(v, n));
    std::size_t at = 0;
    for (const std::size_t k : b.tensors) {
      std::memcpy(data[k], v + at, entries_[k].elements * sizeof(float));
      at += entries_[k].elements;
    }
  }

  const communicator* comm_;
  reducer_options options_;
  std::vector<tensor_entry> entries_;
  std::vector<bucket> buckets_;
  std::vector<double> buffer_;                        // the largest bucket, aligned for double
  std::vector<bfloat16> wire_, received_, gathered_;  // the bfloat16 wire's buffers
  std::vector<float> residual_;                       // error feedback: one per float gradient element
  std::vector<int> counts_;                           // MPI's counts and displacements
  // Overlap (`ready`): per tensor, final in this backward pass; per bucket, tensors not yet final, its
  // request, whether its sum started, and its own buffer (several sums in flight at once).
  std::vector<std::size_t> bucket_of_;
  bool overlapping_ = false;
  std::vector<unsigned char> ready_, started_;
  std::vector<std::size_t> pending_;
  std::vector<MPI_Request> requests_;
  std::vector<std::vector<double>> sums_;
  int tested_ = 0;
};

}  // namespace mixprec::distributed
