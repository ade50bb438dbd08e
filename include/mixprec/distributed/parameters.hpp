/// \file
/// \brief A model's parameters across ranks: `distributed::broadcast_parameters` (rank 0's values to
/// every rank, at the start of data-parallel training, as DDP does when it wraps a module) and
/// `distributed::parameters_agree` (whether every rank holds the same bits: a checksum compared across
/// the ranks, on demand and at checkpoints).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>

#include "mixprec/arch/message.hpp"
#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/structure.hpp"

namespace mixprec::distributed {

namespace detail {
/// The parameters of `model` as a walk.
template <class Model>
auto parameter_walk(Model& model) {
  return [&model](auto&& f) { model.for_each_parameter(f); };
}
}  // namespace detail

/// Copies rank `root`'s parameter values into every rank's model (`model.for_each_parameter(f(name,
/// tensor))`; the tensors' bytes, whatever their element type). Collective.
/// \throws std::invalid_argument on every rank when the ranks' models differ (`check_same_structure`)
///         or `root` is not a rank; mpi_error.
template <class Model>
void broadcast_parameters(const communicator& comm, Model& model, int root = 0) {
  if (root < 0 || root >= comm.size()) {
    throw std::invalid_argument(internal::concat("mixprec::distributed::broadcast_parameters: root ", root,
                                                 " is not a rank of this communicator (0 to ", comm.size() - 1, ")"));
  }
  check_same_structure(comm, structure_of(detail::parameter_walk(std::as_const(model))), "parameters");
  model.for_each_parameter([&](std::string_view, auto& tensor) {
    using E = std::remove_cvref_t<decltype(*tensor.data())>;
    auto* bytes = reinterpret_cast<unsigned char*>(tensor.data());
    std::size_t left = static_cast<std::size_t>(tensor.size()) * sizeof(E);
    constexpr std::size_t max_count = 0x7FFFFFFF;  // MPI counts are int
    for (; left > 0;) {
      const std::size_t n = std::min(left, max_count);
      check(MPI_Bcast(bytes, static_cast<int>(n), MPI_UNSIGNED_CHAR, root, comm.native()), "MPI_Bcast");
      bytes += n;
      left -= n;
    }
  });
}

/// A 64-bit FNV-1a checksum of the parameters' bytes, in walk order (names included).
template <class Model>
[[nodiscard]] std::uint64_t parameter_checksum(const Model& model) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 offset basis
  const auto mix = [&h](const unsigned char* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;  // FNV-1a 64 prime
  };
  model.for_each_parameter([&](std::string_view name, const auto& tensor) {
    using E = std::remove_cvref_t<decltype(*tensor.data())>;
    mix(reinterpret_cast<const unsigned char*>(name.data()), name.size());
    mix(reinterpret_cast<const unsigned char*>(tensor.data()), static_cast<std::size_t>(tensor.size()) * sizeof(E));
  });
  return h;
}

/// True on every rank when every rank's parameters have the same checksum (`parameter_checksum`):
/// data-parallel ranks that apply the same averaged gradients stay bit-identical, and this checks it.
/// Collective. \throws mpi_error.
template <class Model>
[[nodiscard]] bool parameters_agree(const communicator& comm, const Model& model) {
  std::uint64_t low = parameter_checksum(model);
  std::uint64_t high = low;
  check(MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_UINT64_T, MPI_MIN, comm.native()), "MPI_Allreduce");
  check(MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_UINT64_T, MPI_MAX, comm.native()), "MPI_Allreduce");
  return low == high;
}

}  // namespace mixprec::distributed
