/// \file
/// \brief ZeRO stage 1's division of the parameters among the ranks: `distributed::shard_plan` (which
/// rank steps which parameter tensor, whole tensors, largest first to the least-loaded rank, as
/// PyTorch's `ZeroRedundancyOptimizer.partition_parameters` assigns them) and
/// `distributed::all_gather_parameters` (after each rank has stepped its own tensors, every rank receives
/// the others' new values: one `MPI_Allgatherv`).
///
/// Whole tensors, not DeepSpeed's flat slices: each tensor is stepped by one rank exactly as a
/// single-process optimiser steps it (the same calls, the same stochastic-rounding streams), so a sharded
/// run gives the unsharded run's bits.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/structure.hpp"

namespace mixprec::distributed {

/// Which rank steps which parameter tensor under ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory
/// Optimizations Toward Training Trillion Parameter Models", P_os). The rule is PyTorch's
/// `ZeroRedundancyOptimizer.partition_parameters`: tensors taken largest first (ties in walk order),
/// each given to the rank holding the fewest elements so far (ties to the lower rank). The same walk
/// gives the same plan on every rank and in every run.
class shard_plan {
 public:
  /// Plans the tensors of `walk` (`walk(f)` calls `f(name, tensor)`: a model's `for_each_parameter`)
  /// over the ranks of `comm`. Names are `prefix + "." + name` (or `name` when `prefix` is empty), the
  /// names an optimiser's `step(lr, model, grads, prefix)` uses. Collective: checks that every rank walks
  /// the same tensors first. \throws std::invalid_argument on every rank when the ranks' walks differ
  /// (`check_same_structure`) or a name comes twice; mpi_error.
  template <class Walk>
  shard_plan(const communicator& comm, const Walk& walk, std::string_view prefix = {})
      : shard_plan(comm, structure_of(walk), prefix) {}

  /// The same from the walk's structure (`structure_of`).
  shard_plan(const communicator& comm, std::vector<tensor_entry> entries, std::string_view prefix = {})
      : entries_(std::move(entries)), loads_(static_cast<std::size_t>(comm.size()), 0) {
    check_same_structure(comm, entries_, "parameters");
    std::vector<std::size_t> order(entries_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return entries_[a].elements > entries_[b].elements; });
    owners_.resize(entries_.size());
    for (const std::size_t k : order) {
      const auto least = std::min_element(loads_.begin(), loads_.end());  // the first of equals: the lower rank
      owners_[k] = static_cast<int>(least - loads_.begin());
      *least += entries_[k].elements;
    }
    for (std::size_t k = 0; k < entries_.size(); ++k) {
      const std::string full =
          prefix.empty() ? entries_[k].name : internal::concat(prefix, ".", std::string_view(entries_[k].name));
      if (!by_name_.emplace(full, owners_[k]).second) {  // the same walk on every rank: every rank throws
        throw std::invalid_argument(internal::concat("mixprec::distributed::shard_plan: the walk names \"", full,
                                                     "\" twice; parameter names must be unique"));
      }
    }
  }

  /// The number of ranks planned for.
  [[nodiscard]] int ranks() const noexcept { return static_cast<int>(loads_.size()); }
  /// The tensors, in walk order.
  [[nodiscard]] const std::vector<tensor_entry>& entries() const noexcept { return entries_; }
  /// The rank that steps tensor `index` (walk order).
  [[nodiscard]] int owner(std::size_t index) const { return owners_.at(index); }
  /// The rank that steps the tensor of full name `name`, or -1 when the plan has no such tensor.
  [[nodiscard]] int owner(std::string_view name) const {
    const auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? -1 : it->second;
  }
  /// Whether `rank` steps the tensor of full name `name`.
  [[nodiscard]] bool owns(int rank, std::string_view name) const { return owner(name) == rank; }
  /// The elements of the tensors `rank` steps.
  [[nodiscard]] std::size_t elements_of(int rank) const { return loads_.at(static_cast<std::size_t>(rank)); }

 private:
  std::vector<tensor_entry> entries_;
  std::vector<std::size_t> loads_;
  std::vector<int> owners_;
  std::unordered_map<std::string, int> by_name_;
};

namespace detail {

/// Bytes per element of the MPI datatype the parameter and state gathers move: MPI's counts and
/// displacements are `int`, so a gather counts 64-byte units and may move up to 2^31 · 64 bytes (128
/// GiB) in all.
inline constexpr std::size_t gather_unit = 64;

/// A committed `MPI_Type_contiguous(gather_unit, MPI_BYTE)`, freed on destruction.
class gather_unit_type {
 public:
  gather_unit_type() {
    check(MPI_Type_contiguous(static_cast<int>(gather_unit), MPI_BYTE, &type_), "MPI_Type_contiguous");
    check(MPI_Type_commit(&type_), "MPI_Type_commit");
  }
  gather_unit_type(const gather_unit_type&) = delete;
  gather_unit_type& operator=(const gather_unit_type&) = delete;
  ~gather_unit_type() { MPI_Type_free(&type_); }
  [[nodiscard]] MPI_Datatype native() const noexcept { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

/// The number of 64-byte units that hold `bytes`.
[[nodiscard]] constexpr std::size_t units_of(std::size_t bytes) noexcept {
  return (bytes + gather_unit - 1) / gather_unit;
}

/// The counts and displacements, in 64-byte units, of parts of `bytes[r]` bytes laid one after another
/// (rank order); an error message when a count or displacement exceeds MPI's `int`.
inline std::string unit_layout(const std::vector<std::size_t>& bytes, std::vector<int>& counts,
                               std::vector<int>& displs) {
  constexpr auto max = static_cast<std::size_t>(std::numeric_limits<int>::max());
  counts.assign(bytes.size(), 0);
  displs.assign(bytes.size(), 0);
  std::size_t at = 0;
  for (std::size_t r = 0; r < bytes.size(); ++r) {
    const std::size_t units = units_of(bytes[r]);
    if (units > max || at > max) {
      return internal::concat("a gather of ", (at + units) * gather_unit,
                              " bytes or more exceeds the 128 GiB that MPI's int displacements address in 64-byte "
                              "units");
    }
    counts[r] = static_cast<int>(units);
    displs[r] = static_cast<int>(at);
    at += units;
  }
  return {};
}

/// `unit_layout` of every rank's `mine` bytes (one `MPI_Allgather`).
inline std::string gather_layout(const communicator& comm, std::size_t mine, std::vector<int>& counts,
                                 std::vector<int>& displs) {
  std::vector<unsigned long long> all(static_cast<std::size_t>(comm.size()));
  unsigned long long bytes = mine;
  check(MPI_Allgather(&bytes, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, comm.native()),
        "MPI_Allgather");
  return unit_layout(std::vector<std::size_t>(all.begin(), all.end()), counts, displs);
}

}  // namespace detail

namespace detail {

/// A contiguous parameter tensor as bytes.
struct tensor_bytes {
  std::byte* data;
  std::size_t bytes;
};

/// The tensors of `model`'s walk as bytes, and an error message when the walk is not the one `plan`
/// was made for (names, element counts and sizes, in order) or the plan is for another rank count.
template <class Model>
std::string plan_walk(const communicator& comm, const shard_plan& plan, Model& model,
                      std::vector<tensor_bytes>& tensors) {
  std::string error;
  if (plan.ranks() != comm.size()) {
    error = internal::concat("mixprec::distributed: the shard plan is for ", plan.ranks(),
                             " ranks, the communicator has ", comm.size());
  }
  model.for_each_parameter([&](std::string_view name, auto& tensor) {
    using E = std::remove_cvref_t<decltype(*tensor.data())>;
    const std::size_t k = tensors.size();
    const auto n = static_cast<std::size_t>(tensor.size());
    if (error.empty() && (k >= plan.entries().size() || plan.entries()[k].name != name ||
                          plan.entries()[k].elements != n || plan.entries()[k].element_bytes != sizeof(E))) {
      error = internal::concat(
          "mixprec::distributed: tensor ", k, " is \"", name, "\", ", n, " elements of ", sizeof(E),
          " bytes, not what the shard plan was made for",
          k < plan.entries().size() ? internal::concat(" (", describe(plan.entries()[k]), ")") : std::string());
    }
    tensors.push_back({reinterpret_cast<std::byte*>(tensor.data()), n * sizeof(E)});
  });
  if (error.empty() && tensors.size() != plan.entries().size()) {
    error = internal::concat("mixprec::distributed: the model has ", tensors.size(), " tensors, the shard plan ",
                             plan.entries().size());
  }
  return error;
}

}  // namespace detail

/// After every rank has stepped the tensors `plan` gives it, copies each tensor's new value from the rank
/// that stepped it into every other rank's `model` (`model.for_each_parameter(f(name, tensor))`: the
/// tensors' bytes, whatever their element type). One `MPI_Allgatherv` (each rank contributes its own
/// tensors in walk order; the layout follows from the plan) after one small `MPI_Allreduce` that agrees
/// on errors; a buffer of the parameters' bytes is allocated per call. Collective; every rank's walk
/// matches `plan`. \throws std::invalid_argument on every rank when a rank's walk has other names,
/// element counts or element sizes than the plan, the plan is for another rank count, or the gather
/// exceeds 128 GiB; mpi_error.
template <class Model>
void all_gather_parameters(const communicator& comm, const shard_plan& plan, Model& model) {
  const internal::profile_scope region("distributed::all_gather_parameters");
  std::vector<detail::tensor_bytes> tensors;
  std::string error = detail::plan_walk(comm, plan, model, tensors);
  // Every rank's part, from the plan (the same on every rank whose walk matches it).
  std::vector<int> counts(static_cast<std::size_t>(comm.size()), 0), displs(counts.size(), 0);
  std::unique_ptr<std::byte[]> buffer;
  if (error.empty()) {
    std::vector<std::size_t> part(counts.size(), 0);
    for (std::size_t k = 0; k < tensors.size(); ++k) part[static_cast<std::size_t>(plan.owner(k))] += tensors[k].bytes;
    error = detail::unit_layout(part, counts, displs);
    if (!error.empty()) error = "mixprec::distributed::all_gather_parameters: " + error;
    if (error.empty()) {
      const std::size_t units = static_cast<std::size_t>(displs.back()) + static_cast<std::size_t>(counts.back());
      try {
        buffer.reset(new std::byte[std::max<std::size_t>(units, 1) * detail::gather_unit]);
      } catch (const std::bad_alloc&) {
        error = "mixprec::distributed::all_gather_parameters: out of memory for the gathered parameters";
      }
    }
  }
  throw_if_any_rank(comm, error);

  // Each rank's tensors in walk order from the start of its part; this rank packs its own.
  std::vector<std::size_t> at(counts.size());
  for (std::size_t r = 0; r < at.size(); ++r) at[r] = static_cast<std::size_t>(displs[r]) * detail::gather_unit;
  const auto me = static_cast<std::size_t>(comm.rank());
  std::byte* const mine = buffer.get() + at[me];
  for (std::size_t k = 0, o = 0; k < tensors.size(); ++k) {
    if (plan.owner(k) != comm.rank()) continue;
    std::memcpy(mine + o, tensors[k].data, tensors[k].bytes);
    o += tensors[k].bytes;
  }
  const detail::gather_unit_type unit;
  check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer.get(), counts.data(), displs.data(), unit.native(),
                       comm.native()),
        "MPI_Allgatherv");
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const auto r = static_cast<std::size_t>(plan.owner(k));
    if (r != me) std::memcpy(tensors[k].data, buffer.get() + at[r], tensors[k].bytes);
    at[r] += tensors[k].bytes;
  }
}

}  // namespace mixprec::distributed
