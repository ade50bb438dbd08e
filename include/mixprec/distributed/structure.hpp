/// \file
/// \brief The structure of a named tensor walk (a model's `for_each_parameter`, its gradients'
/// `for_each`: names, element sizes and shapes, in walk order) and the collective check that every
/// rank walks the same one, `distributed::check_same_structure`, which names the first difference.
/// Every collective over a tree calls it before it sends a byte: a rank whose model differs would
/// otherwise reduce its tensors into another rank's.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/distributed/communicator.hpp"

namespace mixprec::distributed {

/// One tensor of a walk: its dotted name, element size in bytes, element count and shape.
struct tensor_entry {
  std::string name;
  std::size_t element_bytes = 0;
  std::size_t elements = 0;
  std::vector<std::size_t> shape;
  bool operator==(const tensor_entry&) const = default;
};

/// "name [d0, d1] (4-byte elements)".
[[nodiscard]] inline std::string describe(const tensor_entry& e) {
  std::string s = internal::concat(e.name, " [");
  for (std::size_t i = 0; i < e.shape.size(); ++i) s += internal::concat(i == 0 ? "" : ", ", e.shape[i]);
  return internal::concat(s, "] (", e.element_bytes, "-byte elements)");
}

/// A walk: `walk(f)` calls `f(name, tensor)` on each tensor (a model's `for_each_parameter`, a
/// gradients tree's `for_each`), each tensor with `data()`, `size()` and `shape()`.
template <class Walk>
[[nodiscard]] std::vector<tensor_entry> structure_of(const Walk& walk) {
  std::vector<tensor_entry> out;
  walk([&](std::string_view name, const auto& tensor) {
    tensor_entry e;
    e.name = std::string(name);
    e.element_bytes = sizeof(std::remove_cvref_t<decltype(*tensor.data())>);
    e.elements = static_cast<std::size_t>(tensor.size());
    for (const auto d : tensor.shape()) e.shape.push_back(static_cast<std::size_t>(d));
    out.push_back(std::move(e));
  });
  return out;
}

namespace detail {

/// One line per entry (`describe`), in walk order.
[[nodiscard]] inline std::vector<std::string> lines_of(const std::vector<tensor_entry>& entries) {
  std::vector<std::string> out;
  out.reserve(entries.size());
  for (const auto& e : entries) out.push_back(describe(e));
  return out;
}

/// The lines joined by newlines (dotted names hold none).
[[nodiscard]] inline std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& line : lines) s += line + '\n';
  return s;
}

/// The lines of a `joined` text.
[[nodiscard]] inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

/// Broadcasts `text` from `root` (its length, then its bytes); other ranks' `text` is replaced.
inline void broadcast_string(const communicator& comm, std::string& text, int root) {
  unsigned long long length = text.size();
  check(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, root, comm.native()), "MPI_Bcast");
  text.resize(static_cast<std::size_t>(length));
  if (length > 0) {
    check(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, root, comm.native()), "MPI_Bcast");
  }
}

}  // namespace detail

/// Makes a check that each rank does on its own collective, so that no rank throws while the others
/// wait in a later collective: `mine` is this rank's error message (empty: none). If any rank has one,
/// every rank throws std::invalid_argument with the lowest such rank's message (prefixed with the rank
/// when there are several ranks). Collective. \throws std::invalid_argument; mpi_error.
inline void throw_if_any_rank(const communicator& comm, std::string mine) {
  int first = mine.empty() ? std::numeric_limits<int>::max() : comm.rank();
  check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm.native()), "MPI_Allreduce");
  if (first == std::numeric_limits<int>::max()) return;
  detail::broadcast_string(comm, mine, first);
  throw std::invalid_argument(comm.size() > 1 ? internal::concat("rank ", first, ": ", mine) : mine);
}

/// Every rank's walk has the same names, element sizes and shapes, in the same order, as rank 0's.
/// Collective: every rank calls it with its own entries. `what` names the walk in the message
/// ("gradients", "parameters").
/// \throws std::invalid_argument on every rank when any rank differs, with the same message on every
///         rank: the lowest differing rank and its first difference from rank 0 (a name, a shape or an
///         element size, or a tensor one side lacks); mpi_error.
inline void check_same_structure(const communicator& comm, const std::vector<tensor_entry>& mine,
                                 std::string_view what) {
  const std::vector<std::string> lines = detail::lines_of(mine);
  std::string reference = comm.rank() == 0 ? detail::joined(lines) : std::string();
  detail::broadcast_string(comm, reference, 0);
  std::string difference;
  if (comm.rank() != 0) {
    const std::vector<std::string> theirs = detail::split_lines(reference);
    std::size_t i = 0;
    while (i < lines.size() && i < theirs.size() && lines[i] == theirs[i]) ++i;
    if (i < lines.size() && i < theirs.size()) {
      difference =
          internal::concat("tensor ", i, " is ", lines[i], " on rank ", comm.rank(), " but ", theirs[i], " on rank 0");
    } else if (i < lines.size()) {
      difference = internal::concat("rank ", comm.rank(), " has ", lines.size(), " tensors and rank 0 ", theirs.size(),
                                    ": rank 0 lacks ", lines[i]);
    } else if (i < theirs.size()) {
      difference = internal::concat("rank ", comm.rank(), " has ", lines.size(), " tensors and rank 0 ", theirs.size(),
                                    ": rank ", comm.rank(), " lacks ", theirs[i]);
    }
  }
  // The lowest rank with a difference tells every rank.
  int first = difference.empty() ? std::numeric_limits<int>::max() : comm.rank();
  check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm.native()), "MPI_Allreduce");
  if (first == std::numeric_limits<int>::max()) return;
  detail::broadcast_string(comm, difference, first);
  throw std::invalid_argument(internal::concat("mixprec::distributed: the ranks' ", what, " differ: ", difference,
                                               "; every rank must build the same model"));
}

}  // namespace mixprec::distributed
