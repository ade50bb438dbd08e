/// \file
/// \brief Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer: Enhanced Transformer with
/// Rotary Position Embedding"): each pair of coordinates of a query or key head is rotated by an angle
/// proportional to the token's position, so that q·k depends on positions only through their
/// difference.
///
/// For a head of even dimension d, pair i (0 <= i < d/2) has the inverse frequency
///
///     f_i = theta^(-2i / d)          (theta = 10000 by default)
///
/// and at position p the pair (x_a, x_b) becomes
///
///     x_a' = x_a cos(p f_i) - x_b sin(p f_i),    x_b' = x_a sin(p f_i) + x_b cos(p f_i)
///
/// Two conventions pick the pairs (the same frequencies, different coordinates):
///  - `rope_layout::adjacent_pairs`: (a, b) = (2i, 2i + 1). RoFormer, Meta's LLaMA reference code,
///    llama2.c (run.c rotates `vec[i], vec[i+1]` with `freq = 1 / 10000^(i / head_size)` for even i).
///  - `rope_layout::half_split`: (a, b) = (i, i + d/2). GPT-NeoX, Hugging Face Llama (`rotate_half`).
///    A checkpoint converted from one convention to the other has its q/k projection rows permuted.
///
/// Precision: f_i, the angle p f_i and its cosine and sine are computed in double, the angle within
/// about one double ulp of the exact p f_i (ulp(1e5) = 1.5e-11): at position 100000 the angle, its
/// cosine and its sine are within 2e-11 of their exact values, and the cosine and sine rounded to
/// float32 within 2^-25 + 2e-11 (tests/nn/documented_errors_test.cpp checks both against long double
/// at positions 65535 and 100000); the rotation itself runs in opmath (float32 for
/// float and every 16-bit format, float64 for double) and each result is rounded once to the element
/// type. (llama2.c computes the angle in float, Hugging Face in float32 and applies it in the compute
/// dtype; the differences are below a float32 ulp of the angle for the positions of small models.)
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/formats/convert.hpp"
#include "mixprec/kernels/rounding.hpp"

namespace mixprec::nn {

/// Which coordinates of a head form the rotated pairs (see the file comment).
enum class rope_layout : std::uint8_t {
  adjacent_pairs,  ///< (2i, 2i + 1): RoFormer, Meta LLaMA, llama2.c
  half_split,      ///< (i, i + d/2): GPT-NeoX, Hugging Face Llama (`rotate_half`)
};

/// The settings of a rotary embedding (the head dimension comes from the attention layer).
struct rotary_config {
  rope_layout layout = rope_layout::adjacent_pairs;  ///< which coordinates are paired
  double theta = 10000.0;                            ///< base of the frequencies (`rope_theta`); > 1
};

/// Rotary position embedding for heads of dimension `head_dim` (even): rotates the pairs of every
/// head of a vector by position-dependent angles (formulas in the file comment).
///
/// **Example** (llama2.c, head_size 8):
///
///     nn::rotary_embedding rope(8, {.layout = nn::rope_layout::adjacent_pairs, .theta = 10000.0});
///     std::vector<float> q(n_heads * 8);     // one token's queries, heads back to back
///     rope.apply(std::span(q), /*position=*/5);
class rotary_embedding {
 public:
  /// \throws std::invalid_argument if `head_dim` is 0 or odd, or `theta` is not finite and > 1.
  explicit rotary_embedding(std::size_t head_dim, rotary_config config = {}) : head_dim_(head_dim), config_(config) {
    if (head_dim == 0 || head_dim % 2 != 0) {
      throw std::invalid_argument("rotary_embedding: head_dim is " + std::to_string(head_dim) +
                                  " but rotary embeddings rotate pairs of coordinates; use an even, positive head "
                                  "dimension (or no rotary embedding).");
    }
    if (!(std::isfinite(config.theta) && config.theta > 1.0)) {
      throw std::invalid_argument("rotary_embedding: theta is " + std::to_string(config.theta) +
                                  " but must be a finite number > 1 (the usual base is 10000).");
    }
  }

  /// Dimension of one head (the rotated vectors are made of heads of this size).
  [[nodiscard]] std::size_t head_dim() const noexcept { return head_dim_; }
  /// The layout and base given at construction.
  [[nodiscard]] const rotary_config& config() const noexcept { return config_; }

  /// Inverse frequency of pair `i` (0 <= i < head_dim / 2), in radians per position, computed in
  /// double: theta^(-2i / head_dim).
  [[nodiscard]] double inverse_frequency(std::size_t i) const noexcept {
    return std::pow(config_.theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim_));
  }

  /// The two coordinates of a head forming pair `i`: (2i, 2i + 1) or (i, i + head_dim / 2).
  [[nodiscard]] std::size_t first_of_pair(std::size_t i) const noexcept {
    return config_.layout == rope_layout::adjacent_pairs ? 2 * i : i;
  }
  /// See `first_of_pair`.
  [[nodiscard]] std::size_t second_of_pair(std::size_t i) const noexcept {
    return config_.layout == rope_layout::adjacent_pairs ? 2 * i + 1 : i + head_dim_ / 2;
  }

  /// Rotates, in place, every head of `x` (heads of `head_dim` values back to back, e.g. one token's
  /// n_heads * head_dim queries) for a token at `position`. The angle, cosine and sine are computed in
  /// double, rounded to opmath (`accumulator_t<T>`), the rotation runs in opmath and each coordinate is
  /// rounded once to `T`. Element types: float, double, the small floats.
  /// \throws std::invalid_argument if the size of `x` is not a multiple of `head_dim`.
  template <class T>
  requires(std::same_as<T, float> || std::same_as<T, double> || small_float<T>) void apply(std::span<T> x,
                                                                                           std::size_t position) const {
    rotate(x, position, false);
  }

  /// The inverse rotation (by −θ), which is also the VJP of `apply`: a rotation is orthogonal, so the
  /// cotangent of the rotated pair (a', b') maps back as `da = c·da' + s·db'`, `db = −s·da' + c·db'`
  /// (docs/training.md, "Gradient formulas"; llm.c `rope_backward_inplace`). Same layouts, types and
  /// rounding as `apply`.
  /// \throws std::invalid_argument if the size of `x` is not a multiple of `head_dim`.
  template <class T>
  requires(std::same_as<T, float> || std::same_as<T, double> ||
           small_float<T>) void apply_inverse(std::span<T> x, std::size_t position) const {
    rotate(x, position, true);
  }

 private:
  template <class T>
  void rotate(std::span<T> x, std::size_t position, bool inverse) const {
    if (x.size() % head_dim_ != 0) {
      throw std::invalid_argument("rotary_embedding::apply: the vector has " + std::to_string(x.size()) +
                                  " elements, not a whole number of heads of dimension " + std::to_string(head_dim_) +
                                  "; pass n_heads * head_dim values.");
    }
    using A = accumulator_t<T>;
    if constexpr (small_float<T>) {
      // Through a float buffer of whole heads: `convert` widens exactly and rounds each result once to
      // T, the bits of the element loop below at a fraction of the scalar conversions' time (float16's
      // scalar codec is slow; docs/performance.md,
      // "Whole programs, before and after the run-time dispatch (same binary, same run)"); no allocation.
      static_assert(std::same_as<A, float>, "small floats compute in float");
      constexpr std::size_t buffer_size = 512;
      if (head_dim_ <= buffer_size) {
        float buffer[buffer_size];
        const std::size_t step = buffer_size / head_dim_ * head_dim_;
        for (std::size_t start = 0; start < x.size(); start += step) {
          const std::span<T> part = x.subspan(start, std::min(step, x.size() - start));
          const std::span<float> values(buffer, part.size());
          mixprec::convert(std::span<const T>(part), values);
          rotate_values<A>(values, position, inverse);
          mixprec::convert(std::span<const float>(values), part);
        }
        return;
      }
    }
    rotate_values<A>(x, position, inverse);
  }

  /// The rotation of every head of x (a whole number of heads) in opmath A, each coordinate rounded
  /// once to U.
  template <class A, class U>
  void rotate_values(std::span<U> x, std::size_t position, bool inverse) const {
    const std::size_t heads = x.size() / head_dim_;
    const double p = static_cast<double>(position);
    for (std::size_t i = 0; i < head_dim_ / 2; ++i) {
      const double angle = p * inverse_frequency(i);
      const A c = static_cast<A>(std::cos(angle));
      const A s = inverse ? static_cast<A>(-std::sin(angle)) : static_cast<A>(std::sin(angle));
      const std::size_t a = first_of_pair(i);
      const std::size_t b = second_of_pair(i);
      for (std::size_t h = 0; h < heads; ++h) {
        U& xa = x[h * head_dim_ + a];
        U& xb = x[h * head_dim_ + b];
        const A va = internal::widen(xa);
        const A vb = internal::widen(xb);
        xa = internal::round_out<U>(va * c - vb * s);
        xb = internal::round_out<U>(va * s + vb * c);
      }
    }
  }

  std::size_t head_dim_;
  rotary_config config_;
};

}  // namespace mixprec::nn
