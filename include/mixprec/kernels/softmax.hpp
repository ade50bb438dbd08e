/// \file
/// \brief Softmax in "opmath" (float32 for float and every 16-bit-or-smaller format, float64 for
/// double): the direct two-pass form over a whole range, and the online (streaming, tiled) form that
/// keeps a running maximum and a running sum and rescales what was accumulated before, so attention
/// never holds more than one block of scores per query.
///
/// Definitions (x real, n values, in opmath; each result rounded once to the output type):
///
///     m = max_j x_j,   e_j = exp(x_j - m),   l = sum_j e_j,   softmax(x)_j = e_j / l
///
/// Subtracting the maximum keeps every exponent <= 0, so nothing overflows (the "safe softmax" of
/// every framework). The online form (Milakov & Gimelshein 2018, "Online normalizer calculation for
/// softmax"; the FlashAttention papers, Dao et al. 2022/2023, apply it to attention) reads the scores
/// in blocks B_1, B_2, ... and keeps (m, l) of what it has seen: for a new block with maximum m_B,
///
///     m' = max(m, m_B),   alpha = exp(m - m'),   l' = alpha l + sum_{j in B} exp(x_j - m')
///
/// and anything accumulated with weights exp(x_j - m) (the attention numerator sum_j e_j v_j) is
/// multiplied by alpha. After the last block (m, l) equal the direct form's, up to rounding.
///
/// Conventions (documented choices, the same in both forms):
///  - -Inf is a masked position: its weight is exactly 0.
///  - A range whose every value is -Inf (a fully masked row) gives all zeros, not NaN: the direct
///    formula would compute (-Inf) - (-Inf) = NaN; JAX and PyTorch return NaN there. Zero weights make
///    a fully masked attention row output zeros.
///  - NaN anywhere gives NaN everywhere (a NaN must not hide behind a max); +Inf gives NaN
///    (Inf - Inf), as the direct formula does.
///
/// Light: no Eigen, no xtensor.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/detail/norm_rows.hpp"
#include "mixprec/kernels/detail/softmax_rows.hpp"
#include "mixprec/kernels/reductions.hpp"
#include "mixprec/kernels/rounding.hpp"

namespace mixprec::kernels {

/// Real element types the softmax accepts: float, double and every small float.
template <class T>
concept softmax_scalar = std::same_as<T, float> || std::same_as<T, double> || small_float<T>;

/// The type a softmax of `T` values is evaluated in: float for float and the small floats, double for
/// double (PyTorch's `opmath_type`; the same rule as `opmath_t` of the activations).
template <softmax_scalar T>
using softmax_opmath_t = accumulator_t<T>;

/// Where the softmax of an attention layer is evaluated (the layer's option; the kernels below always
/// compute in opmath and round their outputs once).
enum class softmax_precision : std::uint8_t {
  /// Default. Scores are kept in opmath (float32 for half compute types, float64 for double), the
  /// softmax runs there, and the probabilities multiply the values in opmath: no half-precision
  /// rounding between q·k and the weighted sum (Flax's `force_fp32_for_softmax`, and more: the
  /// probabilities are not rounded back to the compute type either).
  opmath,
  /// Follow the compute dtype, as frameworks do in pure-half mode: the scores are rounded to the
  /// compute type before the softmax and the (unnormalised) weights are rounded to it before they
  /// multiply the values. The exponentials and sums themselves still run in opmath, as PyTorch's
  /// softmax of a float16 tensor does. Identical to `opmath` for float32 and float64 compute. Scores
  /// beyond the compute type's range become Inf (float16: |score| > 65504), as they do in frameworks.
  compute,
};

/// Running state of an online softmax over real opmath values `A` (float or double): the maximum
/// and the sum of exp(x - maximum) over every block seen so far. See the file comment for the
/// recurrence and the conventions (-Inf masked, all -Inf gives zeros, NaN propagates).
///
/// **Example** (the attention numerator of one query, in blocks):
///
///     kernels::online_softmax<float> state;
///     for (auto block : blocks_of_scores) {                // std::span<float>, -Inf where masked
///       const float alpha = state.update(block);           // block now holds exp(x - state.max())
///       for (auto& a : acc) a *= alpha;                    // rescale what earlier blocks added
///       acc += sum_j block[j] * v_j;
///     }
///     output = acc / state.sum();                          // state.normalize(acc_i) also handles sum 0
template <std::floating_point A>
class online_softmax {
 public:
  /// Folds a block of scores into the state. On return `scores[j]` holds the block's unnormalised
  /// weights exp(scores[j] - max()) relative to the new running maximum (exactly 0 for -Inf). Returns
  /// alpha = exp(old max - new max) in [0, 1], the factor by which anything accumulated with earlier
  /// weights must be multiplied (1 while everything seen is masked; NaN once a NaN was seen).
  A update(std::span<A> scores) noexcept {
    constexpr A neg_inf = -std::numeric_limits<A>::infinity();
    A block_max = neg_inf;
    bool has_nan = std::isnan(max_);
    [[maybe_unused]] const bool simd = std::is_same_v<A, float> && detail::simd_rows_active();
    [[maybe_unused]] const bool wide = simd && detail::avx512_rows_active();  // the same bits, 16 lanes
#if MIXPREC_X86_DISPATCH
    if constexpr (std::is_same_v<A, float>) {
      if (simd) {
        const auto block = wide ? mixprec::detail::simd_avx512::softmax::max_of<float>(scores.data(), scores.size())
                                : mixprec::detail::simd_avx2::softmax::max_of<float>(scores.data(), scores.size());
        block_max = block.max;
        has_nan = has_nan || block.nan;
      }
    }
#endif
    if (!simd) {
      for (const A s : scores) {
        if (std::isnan(s)) has_nan = true;
        if (s > block_max) block_max = s;
      }
    }
    if (has_nan) {
      max_ = sum_ = std::numeric_limits<A>::quiet_NaN();
      for (A& s : scores) s = max_;
      return max_;
    }
    const A new_max = block_max > max_ ? block_max : max_;
    if (new_max == neg_inf) {  // everything so far is masked: no weight, nothing to rescale
      for (A& s : scores) s = A{0};
      return A{1};
    }
    // max_ == -Inf: the sum so far is 0 and nothing was accumulated; exp(-Inf) = 0 says so.
    const A alpha = std::exp(max_ - new_max);
    A block_sum{0};
#if MIXPREC_X86_DISPATCH
    if constexpr (std::is_same_v<A, float>) {
      if (simd) {
        block_sum = static_cast<A>(
            wide ? mixprec::detail::simd_avx512::softmax::exp_shift_in_place(scores.data(), scores.size(), new_max)
                 : mixprec::detail::simd_avx2::softmax::exp_shift_in_place(scores.data(), scores.size(), new_max));
      }
    }
#endif
    if (!simd) {
      for (A& s : scores) {
        s = std::exp(s - new_max);  // exp(-Inf - m) = 0 for masked positions
        block_sum += s;
      }
    }
    sum_ = sum_ * alpha + block_sum;
    max_ = new_max;
    return alpha;
  }

  /// The running maximum (-Inf before any unmasked value; NaN after a NaN).
  [[nodiscard]] A max() const noexcept { return max_; }
  /// The running sum of exp(x - max()) (0 while everything seen is masked).
  [[nodiscard]] A sum() const noexcept { return sum_; }
  /// `numerator / sum()`, or 0 when the sum is 0 (every position masked): the final normalisation.
  [[nodiscard]] A normalize(A numerator) const noexcept { return sum_ == A{0} ? A{0} : numerator / sum_; }
  /// Back to the empty state (max -Inf, sum 0).
  void reset() noexcept { *this = online_softmax{}; }

 private:
  A max_ = -std::numeric_limits<A>::infinity();
  A sum_ = A{0};
};

namespace detail {

template <class R>
using softmax_element_t = std::remove_cv_t<std::ranges::range_value_t<R>>;

template <class R>
concept softmax_input =
    std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && softmax_scalar<softmax_element_t<R>>;
template <class R>
concept softmax_output =
    std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && softmax_scalar<softmax_element_t<R>> &&
    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

/// The direct softmax of n values at `src` into `dst`, in opmath `A` (two passes over the input, the
/// sum compensated); the SIMD rows prefetch `next` (the following row, or null). Float opmath with
/// float/bfloat16/float16 ends takes the vectorised row of detail/softmax_rows.hpp when the CPU has AVX2
/// (exp within 1 ulp, float32 lane sums of 4 values added in float64, a product by 1/sum: within 10u of
/// float of the exact softmax of the rounded differences x_j - m, for normal results), at 16 lanes from
/// the avx512 level (the same bits).
template <class A, class I, class O>
void softmax_row(const I* src, O* dst, std::size_t n, const I* next = nullptr) {
#if MIXPREC_X86_DISPATCH
  if constexpr (std::is_same_v<A, float> && simd_norm_types<I, float, O>) {
    if (simd_rows_active()) {
      float* scratch = nullptr;
      if constexpr (!std::is_same_v<O, float>) {
        thread_local std::vector<float> row;  // grows to the longest row, then is reused
        if (row.size() < n) row.resize(n);
        scratch = row.data();
      }
      if (avx512_rows_active()) {
        mixprec::detail::simd_avx512::softmax::row<I, O>(src, dst, n, scratch, next);
      } else {
        mixprec::detail::simd_avx2::softmax::row<I, O>(src, dst, n, scratch, next);
      }
      return;
    }
  }
#endif
  constexpr A neg_inf = -std::numeric_limits<A>::infinity();
  A m = neg_inf;
  bool has_nan = false;
  for (std::size_t j = 0; j < n; ++j) {
    const A x = internal::widen(src[j]);
    if (std::isnan(x)) has_nan = true;
    if (x > m) m = x;
  }
  if (has_nan || m == neg_inf) {
    const A fill = has_nan ? std::numeric_limits<A>::quiet_NaN() : A{0};
    for (std::size_t j = 0; j < n; ++j) dst[j] = internal::round_out<O>(fill);
    return;
  }
  compensated_sum<A> l;
  for (std::size_t j = 0; j < n; ++j) l.add(std::exp(internal::widen(src[j]) - m));
  const A total = l.value();
  // exp is recomputed rather than stored: no scratch, and the same value (exp is deterministic).
  for (std::size_t j = 0; j < n; ++j) dst[j] = internal::round_out<O>(std::exp(internal::widen(src[j]) - m) / total);
}

inline void check_softmax_sizes(const char* name, std::size_t in, std::size_t out) {
  if (in != out) {
    throw std::invalid_argument(std::string("kernels::") + name + ": the output has " + std::to_string(out) +
                                " elements but the input has " + std::to_string(in) +
                                "; pass an output of the same size.");
  }
}

}  // namespace detail

/// Softmax of the whole range `x` into `y` (same size): computed in `softmax_opmath_t` of x's element
/// type (max, exp(x - max), their sum, division: in float32 opmath within 10u, u = 2^-24, of the
/// exact softmax of the rounded differences x_j - max for normal results, at every SIMD level), each
/// probability rounded once to y's element type. -Inf entries get probability 0; all -Inf gives all
/// zeros; NaN gives all NaN.
/// \throws std::invalid_argument if the sizes differ.
///
/// **Example**:
///
///     std::vector<bfloat16> x{bfloat16(1.0f), bfloat16(2.0f), bfloat16(3.0f)};
///     std::vector<float> p(3);
///     kernels::softmax(x, p);   // {0.09003057, 0.24472847, 0.66524096}: computed and returned in float32
template <detail::softmax_input In, detail::softmax_output Out>
void softmax(const In& x, Out&& y) {
  using A = softmax_opmath_t<detail::softmax_element_t<In>>;
  const std::size_t n = std::ranges::size(x);
  detail::check_softmax_sizes("softmax", n, std::ranges::size(y));
  detail::softmax_row<A>(std::ranges::data(x), std::ranges::data(y), n);
}

/// Softmax of each row of a row-major [rows, row_length] range `x` into `y` (same size): `softmax`
/// applied to every consecutive run of `row_length` values (the last axis of an attention score matrix),
/// rows split over `mixprec::num_threads()` threads (no bit depends on them).
/// \throws std::invalid_argument if the sizes differ, or if `row_length` is 0 or does not divide the size.
template <detail::softmax_input In, detail::softmax_output Out>
void softmax_rows(const In& x, Out&& y, std::size_t row_length) {
  using A = softmax_opmath_t<detail::softmax_element_t<In>>;
  const std::size_t n = std::ranges::size(x);
  detail::check_softmax_sizes("softmax_rows", n, std::ranges::size(y));
  if (row_length == 0 || n % row_length != 0) {
    throw std::invalid_argument("kernels::softmax_rows: row_length " + std::to_string(row_length) +
                                " does not divide the input's " + std::to_string(n) +
                                " elements; pass the length of the last axis of a [rows, row_length] array.");
  }
  const auto* src = std::ranges::data(x);
  auto* dst = std::ranges::data(y);
  // Rows over the kernels' threads (mixprec::num_threads); each row is computed alike on any thread.
  detail::for_row_blocks(n / row_length, row_length, [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      detail::softmax_row<A>(src + r * row_length, dst + r * row_length, row_length,
                             r + 1 < end ? src + (r + 1) * row_length : nullptr);
    }
  });
}

}  // namespace mixprec::kernels

// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's softmax rows (kernels/compiled.hpp): float opmath with each end in float32,
/// bfloat16 or float16.
#define MIXPREC_SOFTMAX_ROW_INSTANTIATION(E, I, O) \
  E template void mixprec::kernels::detail::softmax_row<float, I, O>(const I*, O*, std::size_t, const I*);
#define MIXPREC_SOFTMAX_ROWS_FOR(E, I)                         \
  MIXPREC_SOFTMAX_ROW_INSTANTIATION(E, I, float)               \
  MIXPREC_SOFTMAX_ROW_INSTANTIATION(E, I, ::mixprec::bfloat16) \
  MIXPREC_SOFTMAX_ROW_INSTANTIATION(E, I, ::mixprec::float16)
#define MIXPREC_SOFTMAX_ROW_INSTANTIATIONS(E) MIXPREC_FOR_ROW_TYPES(MIXPREC_SOFTMAX_ROWS_FOR, E)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_SOFTMAX_ROW_INSTANTIATIONS(extern)
#endif
