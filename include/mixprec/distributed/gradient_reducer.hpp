/// \file
/// \brief `distributed::gradient_reducer`: the gradients of every rank averaged into every rank, as
/// PyTorch's DistributedDataParallel does it — the gradient tensors (walked with the gradients'
/// `for_each(f(name, tensor))`) packed into buckets of about `bucket_bytes` (DDP's `bucket_cap_mb`,
/// 25 MiB by default) in reverse walk order (the order in which a backward pass finishes them), each
/// bucket summed across ranks by one `MPI_Allreduce` and divided by the rank count. The buckets are
/// laid out once, when the reducer is made (after a collective check that every rank has the same
/// tree), and their buffers are reused by every step.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/structure.hpp"

namespace mixprec::distributed {

/// Options of `gradient_reducer`.
struct reducer_options {
  /// Bytes of gradient per bucket (PyTorch DDP's default `bucket_cap_mb` = 25): a bucket closes once it
  /// holds at least this many; a tensor is never split. Must be > 0.
  std::size_t bucket_bytes = std::size_t{25} << 20;
};

/// Averages gradients across the ranks of a communicator: after `average(grads)`, every rank's gradient
/// element is (Σ over ranks of that element) / size, summed by MPI_Allreduce (MPI_SUM) in the gradient's
/// own type (float32 or float64) and divided once. The same ranks and inputs give the same bits on every
/// run; every rank receives the same bits.
///
/// The gradients type G offers `for_each(f(name, tensor))` (every nn layer's and model's gradients
/// do), its tensors contiguous float or double. Collective: every rank makes the reducer and calls
/// `average` at the same points, with gradients of the same structure.
/// \throws std::invalid_argument from the constructor when `bucket_bytes` is 0 or the ranks' gradient
///         trees differ (on every rank, naming the first difference: `check_same_structure`), or a tensor
///         is neither float nor double; from `average` when the tree given differs from the one the
///         reducer was made for; mpi_error.
class gradient_reducer {
 public:
  /// Lays out the buckets for gradients shaped as `grads` (their values are not read).
  template <class G>
  gradient_reducer(const communicator& comm, const G& grads, reducer_options options = {})
      : comm_(&comm), options_(options) {
    if (options_.bucket_bytes == 0) {
      throw std::invalid_argument(
          "mixprec::distributed::gradient_reducer: bucket_bytes is 0; give a positive size "
          "(PyTorch DDP's default is 25 MiB)");
    }
    entries_ = structure_of([&](auto&& f) { grads.for_each(f); });
    for (const auto& e : entries_) {
      if (e.element_bytes != sizeof(float) && e.element_bytes != sizeof(double)) {
        throw std::invalid_argument(internal::concat("mixprec::distributed::gradient_reducer: gradient ", describe(e),
                                                     " is not float32 or float64; gradients live in grad_t<P>"));
      }
    }
    check_same_structure(comm, entries_, "gradients");
    // Buckets in reverse walk order; a bucket holds one element size and closes at bucket_bytes.
    for (std::size_t k = entries_.size(); k-- > 0;) {
      const auto& e = entries_[k];
      if (buckets_.empty() || buckets_.back().element_bytes != e.element_bytes ||
          buckets_.back().bytes >= options_.bucket_bytes) {
        buckets_.push_back(bucket{e.element_bytes, 0, {}});
      }
      buckets_.back().tensors.push_back(k);
      buckets_.back().bytes += e.elements * e.element_bytes;
    }
    std::size_t largest = 0;
    for (const auto& b : buckets_) largest = std::max(largest, b.bytes);
    buffer_.resize((largest + sizeof(double) - 1) / sizeof(double));
  }

  /// The number of buckets (each one MPI_Allreduce per step).
  [[nodiscard]] std::size_t buckets() const noexcept { return buckets_.size(); }
  /// Bytes each rank sends into the reductions per `average` (the gradients' own bytes).
  [[nodiscard]] std::size_t bytes_per_step() const noexcept {
    std::size_t total = 0;
    for (const auto& b : buckets_) total += b.bytes;
    return total;
  }

  /// Replaces every gradient element by its mean over the ranks. Collective.
  /// \throws std::invalid_argument when grads' tree is not the one the reducer was made for; mpi_error.
  template <class G>
  void average(G& grads) {
    const internal::profile_scope region("distributed::average_gradients");
    std::vector<std::byte*> data;
    data.reserve(entries_.size());
    std::size_t k = 0;
    grads.for_each([&](std::string_view name, auto& tensor) {
      using E = std::remove_cvref_t<decltype(*tensor.data())>;
      if (k >= entries_.size() || name != entries_[k].name || sizeof(E) != entries_[k].element_bytes ||
          static_cast<std::size_t>(tensor.size()) != entries_[k].elements) {
        throw std::invalid_argument(internal::concat("mixprec::distributed::gradient_reducer::average: gradient ", k,
                                                     " (\"", name, "\") is not the tensor the reducer was made for (",
                                                     k < entries_.size() ? describe(entries_[k]) : std::string("none"),
                                                     "); make the reducer for these gradients"));
      }
      data.push_back(reinterpret_cast<std::byte*>(tensor.data()));
      ++k;
    });
    if (k != entries_.size()) {
      throw std::invalid_argument(
          internal::concat("mixprec::distributed::gradient_reducer::average: the gradients have ", k,
                           " tensors but the reducer was made for ", entries_.size()));
    }
    for (const auto& b : buckets_) {
      if (b.element_bytes == sizeof(float)) {
        reduce<float>(b, data);
      } else {
        reduce<double>(b, data);
      }
    }
  }

 private:
  struct bucket {
    std::size_t element_bytes;
    std::size_t bytes;
    std::vector<std::size_t> tensors;  // indices into entries_, in reverse walk order
  };

  template <class T>
  void reduce(const bucket& b, const std::vector<std::byte*>& data) {
    T* buf = reinterpret_cast<T*>(buffer_.data());
    std::size_t at = 0;
    for (const std::size_t k : b.tensors) {
      std::memcpy(buf + at, data[k], entries_[k].elements * sizeof(T));
      at += entries_[k].elements;
    }
    const MPI_Datatype type = std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
    // MPI counts are int: a bucket larger than 2^31 - 1 elements goes in parts.
    constexpr std::size_t max_count = 0x7FFFFFFF;
    for (std::size_t done = 0; done < at; done += max_count) {
      const int count = static_cast<int>(std::min(max_count, at - done));
      check(MPI_Allreduce(MPI_IN_PLACE, buf + done, count, type, MPI_SUM, comm_->native()), "MPI_Allreduce");
    }
    const T ranks = static_cast<T>(comm_->size());
    at = 0;
    for (const std::size_t k : b.tensors) {
      T* dst = reinterpret_cast<T*>(data[k]);
      for (std::size_t i = 0; i < entries_[k].elements; ++i) dst[i] = buf[at + i] / ranks;
      at += entries_[k].elements;
    }
  }

  const communicator* comm_;
  reducer_options options_;
  std::vector<tensor_entry> entries_;
  std::vector<bucket> buckets_;
  std::vector<double> buffer_;  // the largest bucket, aligned for double
};

}  // namespace mixprec::distributed
