/// \file
/// \brief Internal API (namespace `mixprec::internal`, docs/kernels.md, "Internal API"):
/// `thread_scratch<T, Tag>(n)`, a per-thread buffer of at least n elements of T, grown
/// on demand and kept for the thread's lifetime, for the temporaries of a hot call (a layer's float32
/// copies of its operands, quantised operands). A call that allocated its temporaries afresh paid for
/// fresh pages every time (glibc maps large blocks and returns them on free: page faults and zeroing
/// were a quarter of a float8 layer step); a long-lived thread pays once. The contents are left from
/// the previous use: the caller writes before it reads. `Tag` names the call site, so that buffers
/// alive at the same time differ; a call site must not be re-entered on the same thread while its
/// buffer is in use. Memory: each thread keeps, per Tag (a local class: per instantiation of the
/// calling template), the largest size it asked for, until the thread ends.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace mixprec::internal {

template <class T, class Tag>
[[nodiscard]] std::span<T> thread_scratch(std::size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return {buffer.data(), n};
}

}  // namespace mixprec::internal
