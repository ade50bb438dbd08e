/// \file
/// \brief `distributed::gather_checkpoint`: every rank's part of a state (a ZeRO-1 rank's optimiser
/// state, `train::checkpoint`) merged into one rank's checkpoint, so that the file written is the one a
/// single process writes and a run can be resumed with any rank count (PyTorch's
/// `ZeroRedundancyOptimizer.consolidate_state_dict(to=0)`).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/shard_plan.hpp"
#include "mixprec/distributed/structure.hpp"
#include "mixprec/train/safetensors.hpp"

namespace mixprec::distributed {

/// Merges every rank's `ck` into rank `root`'s: each tensor and metadata entry of another rank is
/// added to root's `ck`; a name that several ranks hold (a step counter, a loss scale) must hold the
/// same dtype, shape and bytes (the same value) on each. The other ranks' `ck` are left as they were.
/// The parts travel as safetensors images (one `MPI_Gatherv`). Collective.
/// \throws std::invalid_argument on every rank when two ranks hold different values under one name
///         (naming it and the ranks; root's `ck` may then hold some of the parts), `root` is not a rank,
///         or any rank fails on its own (a tensor name safetensors refuses, memory); mpi_error.
inline void gather_checkpoint(const communicator& comm, train::checkpoint& ck, int root = 0) {
  if (root < 0 || root >= comm.size()) {
    throw std::invalid_argument(internal::concat("mixprec::distributed::gather_checkpoint: root ", root,
                                                 " is not a rank of this communicator (0 to ", comm.size() - 1, ")"));
  }
  // A rank that fails on its own (a name to_bytes refuses, memory) tells the others before they wait.
  std::vector<std::uint8_t> image;
  std::string failure;
  try {
    if (comm.rank() != root) image = ck.to_bytes();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  throw_if_any_rank(comm, failure);
  std::vector<int> counts, displs;
  std::string layout = detail::gather_layout(comm, image.size(), counts, displs);
  if (!layout.empty()) layout = "mixprec::distributed::gather_checkpoint: " + layout;
  throw_if_any_rank(comm, layout);
  // Each part: its byte length, then the image padded to whole units.
  std::vector<unsigned long long> lengths(static_cast<std::size_t>(comm.size()));
  const unsigned long long length = image.size();
  check(MPI_Gather(&length, 1, MPI_UNSIGNED_LONG_LONG, lengths.data(), 1, MPI_UNSIGNED_LONG_LONG, root, comm.native()),
        "MPI_Gather");
  const std::size_t my_units = detail::units_of(image.size());
  std::unique_ptr<std::byte[]> send, received;
  try {
    send.reset(new std::byte[std::max<std::size_t>(my_units, 1) * detail::gather_unit]);
    if (comm.rank() == root) {
      const std::size_t units = static_cast<std::size_t>(displs.back()) + static_cast<std::size_t>(counts.back());
      received.reset(new std::byte[std::max<std::size_t>(units, 1) * detail::gather_unit]);
    }
  } catch (const std::bad_alloc&) {
    failure = "mixprec::distributed::gather_checkpoint: out of memory for the gathered state";
  }
  throw_if_any_rank(comm, failure);
  if (!image.empty()) std::memcpy(send.get(), image.data(), image.size());
  const detail::gather_unit_type unit;
  check(MPI_Gatherv(send.get(), static_cast<int>(my_units), unit.native(), received.get(), counts.data(), displs.data(),
                    unit.native(), root, comm.native()),
        "MPI_Gatherv");
  std::string error;
  if (comm.rank() == root) {
    for (int r = 0; r < comm.size() && error.empty(); ++r) {
      if (r == root) continue;
      const auto* first = reinterpret_cast<const std::uint8_t*>(received.get()) +
                          static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]) * detail::gather_unit;
      train::checkpoint part;
      try {  // an image this build wrote: a failure here is a fault of the transfer, agreed below
        part = train::checkpoint::from_bytes(
            std::span<const std::uint8_t>(first, static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])),
            internal::concat("rank ", r, "'s part"));
      } catch (const std::exception& e) {
        error = e.what();
        break;
      }
      for (const auto& [name, tensor] : part.tensors()) {
        if (!ck.contains(name)) {
          ck.put_bytes(name, tensor.type, tensor.shape, tensor.bytes);
          continue;
        }
        const train::stored_tensor& here = ck.at(name);
        if (here.type != tensor.type || here.shape != tensor.shape || here.bytes != tensor.bytes) {
          error = internal::concat("mixprec::distributed::gather_checkpoint: tensor \"", name, "\" differs on rank ", r,
                                   " and rank ", root, "; a name several ranks save must hold one value");
          break;
        }
      }
      for (const auto& [key, value] : part.metadata) {
        const auto [it, added] = ck.metadata.emplace(key, value);
        if (!added && it->second != value && error.empty()) {
          error = internal::concat("mixprec::distributed::gather_checkpoint: metadata \"", key, "\" is \"", value,
                                   "\" on rank ", r, " and \"", it->second, "\" on rank ", root);
        }
      }
    }
  }
  throw_if_any_rank(comm, error);
}

}  // namespace mixprec::distributed
