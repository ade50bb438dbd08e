/// \file
/// \brief Whether layers keep their weights packed for the matrix products across calls (on by
/// default): `nn::set_weight_cache(false)` makes every call convert and pack the weights again, as
/// kernels::matmul does for operands it is handed, trading speed for the memory of the packed copies
/// (the weights' size in the compute type — float32, or 16 bits for bfloat16, float16 and float8
/// compute — per orientation used: forward, and the transpose for the backward pass).
#pragma once

#include <atomic>

namespace mixprec::nn {

namespace detail {
[[nodiscard]] inline std::atomic<bool>& weight_cache_storage() noexcept {
  static std::atomic<bool> enabled{true};
  return enabled;
}
}  // namespace detail

/// True when layers keep packed weights across calls (the default).
[[nodiscard]] inline bool weight_cache_enabled() noexcept {
  return detail::weight_cache_storage().load(std::memory_order_relaxed);
}

/// Turns the layers' packed-weight cache on or off, process-wide, and returns the previous setting.
/// Turning it off does not free the copies layers already hold: each layer drops its copy at its next
/// parameter write (or `parameters_changed()`); calls made while it is off neither use nor make one.
inline bool set_weight_cache(bool enabled) noexcept {
  return detail::weight_cache_storage().exchange(enabled, std::memory_order_relaxed);
}

}  // namespace mixprec::nn
