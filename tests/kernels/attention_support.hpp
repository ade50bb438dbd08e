// Test support for the attention kernels' tests (tests/kernels/attention_test.cpp, score_bias_test.cpp):
// numbers moved between float64 and a compute type C, so that a kernel and its float64 reference start
// from the same values; a small grouped-query problem with padding; the forward problem of a backward
// problem; and the keys and values of [batch, keys, n_kv_heads, head_dim] tensors as a kernel's key source.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "mixprec/kernels/attention.hpp"

namespace attention_support {

/// x rounded to C (through float for a 16-bit C), and such a value back to double.
template <class C>
C to_type(double x) {
  if constexpr (std::is_floating_point_v<C>) {
    return static_cast<C>(x);
  } else {
    return C(static_cast<float>(x));
  }
}
template <class C>
double to_double(C x) {
  if constexpr (std::is_floating_point_v<C>) {
    return static_cast<double>(x);
  } else {
    return static_cast<double>(static_cast<float>(x));
  }
}

/// `values` rounded to C and back: the test's operands, exactly representable in C.
template <class C>
std::vector<double> in_type(std::vector<double> values) {
  for (double& x : values) x = to_double(to_type<C>(x));
  return values;
}

/// `values` (exact in C) as C.
template <class C>
std::vector<C> as_type(const std::vector<double>& values) {
  std::vector<C> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = to_type<C>(values[i]);
  return out;
}

/// A problem (the backward's description: keys = 0 means seq); the forward's query i sits at position
/// keys - seq + i.
inline mixprec::kernels::attention_backward_problem small_problem(bool causal) {
  return {.batch = 2,
          .seq = 7,
          .n_heads = 4,
          .n_kv_heads = 2,
          .head_dim = 3,
          .query_block = 3,
          .key_block = 2,
          .causal = causal,
          .scale = 0.7};
}
/// Row 0 left-padded by two keys (under a causal mask its queries 0 and 1 see nothing), row 1 with a
/// padding key in the middle.
inline const std::vector<std::uint8_t> small_validity{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1};

/// The forward problem of a problem: the whole key source held (capacity = keys).
inline mixprec::kernels::attention_problem forward_of(const mixprec::kernels::attention_backward_problem& p) {
  return {.batch = p.batch,
          .seq = p.seq,
          .n_heads = p.n_heads,
          .n_kv_heads = p.n_kv_heads,
          .head_dim = p.head_dim,
          .keys = p.key_count(),
          .capacity = p.key_count(),
          .query_block = p.query_block,
          .key_block = p.key_block,
          .causal = p.causal,
          .scale = p.scale};
}

/// Keys and values [batch, keys, n_kv_heads, head_dim] served to kernels::attention as [keys, head_dim] per
/// batch row and kv head, with each row's validity (every key valid when none is given).
template <class T>
struct kv_source {
  std::vector<std::vector<T>> k, v;
  std::vector<std::vector<std::uint8_t>> valid;
  std::size_t groups;
  kv_source(const mixprec::kernels::attention_backward_problem& p, const std::vector<T>& keys,
            const std::vector<T>& values, const std::vector<std::uint8_t>& validity)
      : groups(p.n_kv_heads) {
    const std::size_t n = p.key_count();
    for (std::size_t b = 0; b < p.batch; ++b) {
      if (validity.empty()) {
        valid.emplace_back(n, std::uint8_t{1});
      } else {
        valid.emplace_back(validity.begin() + static_cast<std::ptrdiff_t>(b * n),
                           validity.begin() + static_cast<std::ptrdiff_t>((b + 1) * n));
      }
      for (std::size_t g = 0; g < p.n_kv_heads; ++g) {
        k.emplace_back();
        v.emplace_back();
        for (std::size_t t = 0; t < n; ++t) {
          for (std::size_t e = 0; e < p.head_dim; ++e) {
            k.back().push_back(keys[((b * n + t) * p.n_kv_heads + g) * p.head_dim + e]);
            v.back().push_back(values[((b * n + t) * p.n_kv_heads + g) * p.head_dim + e]);
          }
        }
      }
    }
  }
  [[nodiscard]] std::span<const T> keys(std::size_t b, std::size_t g) const { return k[b * groups + g]; }
  [[nodiscard]] std::span<const T> values(std::size_t b, std::size_t g) const { return v[b * groups + g]; }
  [[nodiscard]] std::span<const std::uint8_t> validity(std::size_t b) const { return valid[b]; }
};

}  // namespace attention_support
