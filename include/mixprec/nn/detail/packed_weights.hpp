/// \file
/// \brief Private: a layer's packed copies of one weight matrix (kernels::packed_b), one per compute
/// type and orientation, made on first use and dropped whenever the weights may have changed.
///
/// The layer calls `invalidate()` from every non-const path to its parameters (the accessors,
/// `for_each_parameter`, assignment), so an optimizer step or a checkpoint load is followed; a
/// write through a reference kept from before a forward call is not seen until the layer's
/// `parameters_changed()` is called (documented on the layers). Thread-safe: forward passes of one
/// layer may run on several threads at once (examples/train's data-parallel workers); the first to
/// need a packing makes it, the others wait for it and share it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "mixprec/kernels/packed_b.hpp"
#include "mixprec/nn/weight_cache.hpp"

namespace mixprec::nn::detail {

/// Whether products in compute type C can use packed weights: float32-accumulating real types.
template <class C>
inline constexpr bool packable_compute = std::same_as<accumulator_t<C>, float> && !internal::is_complex_v<C>;

/// Whether a layer multiplies through its packed weights now: a packable C, the cache on
/// (`nn::set_weight_cache`) and the blocked engine active (AVX2 level and above). At the portable
/// level layers keep Eigen's products, which are faster there than the engine's portable kernel.
template <class C>
[[nodiscard]] inline bool use_packed() noexcept {
  if constexpr (packable_compute<C>) {
    return weight_cache_enabled() && kernels::packed_products_active<C>();
  } else {
    return false;
  }
}

class packed_weight_cache {
 public:
  packed_weight_cache() = default;
  /// A copy starts empty (the copy's weights are its own from then on).
  packed_weight_cache(const packed_weight_cache&) noexcept {}
  packed_weight_cache(packed_weight_cache&&) noexcept {}
  packed_weight_cache& operator=(const packed_weight_cache&) noexcept {
    invalidate();
    return *this;
  }
  packed_weight_cache& operator=(packed_weight_cache&&) noexcept {
    invalidate();
    return *this;
  }
  ~packed_weight_cache() = default;

  /// Drops every packed copy.
  void invalidate() noexcept {
    const std::lock_guard lock(mutex_);
    entries_.clear();
  }

  /// The weights w, read as b(k, n) in `layout`, packed for compute type C: the kept copy, or a new
  /// one made now and kept.
  template <class C, class W>
  [[nodiscard]] std::shared_ptr<const kernels::packed_b> get(const W& w, std::size_t k, std::size_t n,
                                                             kernels::b_layout layout) const {
    const std::lock_guard lock(mutex_);
    const void* tag = &type_tag<C>;
    for (const entry& e : entries_) {
      if (e.tag == tag && e.layout == layout) return e.packed;
    }
    auto packed = std::make_shared<const kernels::packed_b>(kernels::pack_b<C>(w, k, n, layout));
    entries_.push_back({tag, layout, packed});
    return packed;
  }

 private:
  template <class C>
  static constexpr char type_tag = 0;
  struct entry {
    const void* tag;
    kernels::b_layout layout;
    std::shared_ptr<const kernels::packed_b> packed;
  };
  mutable std::mutex mutex_;
  mutable std::vector<entry> entries_;
};

}  // namespace mixprec::nn::detail
