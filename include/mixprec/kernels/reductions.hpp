/// \file
/// \brief Reductions that accumulate in `accumulator_t<T>` (float32 for every 16-bit-or-smaller
/// format): compensated sum, mean, two-pass mean/variance, mean square (plain and rescaled by a power
/// of two so that it cannot overflow), absmax.
///
/// All take a contiguous range (`std::span`, `std::vector`, `std::array`, or `std::span(x.data(), x.size())`
/// over an xtensor buffer) of float, double, a small float or std::complex. Light: no Eigen, no xtensor.
///
/// **Accuracy**: sums use Neumaier's compensated summation (Neumaier 1974, the improved Kahan–Babuška
/// algorithm): the error is about 2u|sum| + O(n u^2) sum|x_i| instead of the (n - 1) u sum|x_i| of a
/// plain loop (u = unit roundoff of the accumulator). Variance uses the corrected two-pass algorithm
/// (Chan, Golub & LeVeque 1983, "Algorithms for computing the sample variance"), accurate when the
/// data sit on a large common offset (values ~1e6 with unit spread), where E[x^2] - E[x]^2 is not.
/// Do not compile these with -ffast-math: it deletes the compensation.
#pragma once

#include <bit>
#include <cmath>
#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <ranges>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "mixprec/arch/isa.hpp"
#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/kernels/detail/absmax_avx2.hpp"
#include "mixprec/kernels/rounding.hpp"

namespace mixprec::kernels {

namespace detail {

/// Neumaier's compensated sum of real values of type `R` (float or double).
template <class R>
class compensated_sum {
 public:
  void add(R x) noexcept {
    const R t = sum_ + x;
    // The rounding error of sum_ + x, exact when the larger operand is subtracted first.
    if (std::abs(sum_) >= std::abs(x)) {
      compensation_ += (sum_ - t) + x;
    } else {
      compensation_ += (x - t) + sum_;
    }
    sum_ = t;
  }
  /// The compensated total. When the plain sum is Inf or NaN it is returned as is (the compensation
  /// would turn Inf into NaN: Inf - Inf).
  [[nodiscard]] R value() const noexcept {
    if (!std::isfinite(sum_)) return sum_;
    return sum_ + compensation_;
  }

 private:
  R sum_{0};
  R compensation_{0};
};

/// Compensated sum for real or complex accumulators (complex: real and imaginary parts separately).
template <class A>
class accumulating_sum {
 public:
  void add(const A& x) noexcept {
    if constexpr (internal::is_complex_v<A>) {
      re_.add(x.real());
      im_.add(x.imag());
    } else {
      re_.add(x);
    }
  }
  [[nodiscard]] A value() const noexcept {
    if constexpr (internal::is_complex_v<A>) {
      return A(re_.value(), im_.value());
    } else {
      return re_.value();
    }
  }

 private:
  compensated_sum<internal::real_of_t<A>> re_;
  compensated_sum<internal::real_of_t<A>> im_;
};

/// |x|^2 in the real type of `A` (x*x for reals; re^2 + im^2 for complex, no square root).
template <class A>
[[nodiscard]] constexpr internal::real_of_t<A> abs2(const A& x) noexcept {
  if constexpr (internal::is_complex_v<A>) {
    return x.real() * x.real() + x.imag() * x.imag();
  } else {
    return x * x;
  }
}

/// The element type of a contiguous range.
template <class R>
using element_t = std::remove_cv_t<std::ranges::range_value_t<R>>;

template <class R>
concept reducible_range = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    internal::kernel_scalar<element_t<R>> && !std::integral<element_t<R>>;

inline void require_non_empty(std::size_t n, const char* what) {
  if (n == 0) {
    throw std::invalid_argument(
        internal::concat("kernels::", what,
                         ": the range is empty; the statistic of zero values is undefined (pass at least one value)."));
  }
}

/// `rescaling_exponent` of n finite values whose largest magnitude is `m` (the rule is stated there).
template <std::floating_point Real>
[[nodiscard]] int rescaling_exponent_of_max(Real m, std::size_t n) noexcept {
  using limits = std::numeric_limits<Real>;
  if (m == Real{0}) return 0;
  int e = 0;
  static_cast<void>(std::frexp(m, &e));  // m = f 2^e, f in [0.5, 1)
  const int hi = (limits::max_exponent - static_cast<int>(std::bit_width(n))) / 2 - 1;
  const int lo = (limits::min_exponent - 1 + limits::digits) / 2 + 1;
  return (e - 1 >= lo && e <= hi) ? 0 : e;
}

}  // namespace detail

/// Mean and (population, ddof = 0) variance of a range: what layer normalisation needs.
/// `variance` is real also for complex data: mean(|x - mean|^2), as Flax's LayerNorm defines it.
///
/// `mean` is the mean rounded to the accumulator type; `mean_correction` is what that rounding lost
/// (the mean of the deviations x_i - mean, from the second pass). Deviations computed as
/// `(x_i - mean) - mean_correction` are accurate to about one rounding of the deviation itself, even on
/// a large offset: at 1e6 in float32 `mean` alone can be off by half a float spacing, 0.03, which is 3%
/// of a unit deviation; with the correction the error is of the order of u times the spread (~1e-7).
template <class A>
struct mean_and_variance {
  A mean;                           ///< mean, rounded to the accumulator type (complex for complex data)
  A mean_correction;                ///< true mean - mean, to about u times the spread of the data
  internal::real_of_t<A> variance;  ///< mean squared deviation, real, >= 0 (or NaN)
};

/// Sum of `x`, compensated, in `accumulator_t` of the element type (float32 for bfloat16/float16/float8).
/// Empty ranges sum to 0. Inf and NaN propagate as in a plain sum.
///
/// **Example**:
///
///     std::vector<bfloat16> v(4096, bfloat16(1.0f));
///     kernels::sum(v);   // 4096.0f exactly; a bfloat16 accumulator would stop at 256
template <detail::reducible_range R>
[[nodiscard]] accumulator_t<detail::element_t<R>> sum(const R& x) noexcept {
  using A = accumulator_t<detail::element_t<R>>;
  detail::accumulating_sum<A> s;
  for (const auto& v : x) s.add(internal::widen(v));
  return s.value();
}

/// Mean of `x` (compensated sum / size) in the accumulator type.
/// \throws std::invalid_argument when `x` is empty.
template <detail::reducible_range R>
[[nodiscard]] accumulator_t<detail::element_t<R>> mean(const R& x) {
  using A = accumulator_t<detail::element_t<R>>;
  const auto n = std::ranges::size(x);
  detail::require_non_empty(n, "mean");
  return sum(x) / static_cast<internal::real_of_t<A>>(n);
}

/// Mean and population variance by the corrected two-pass algorithm, in the accumulator type:
///
///     mean = sum(x) / n;   d_i = x_i - mean
///     variance = (sum |d_i|^2 - |sum d_i|^2 / n) / n        (both sums compensated)
///     mean_correction = sum d_i / n
///
/// The second term removes the error of the rounded mean, so the result is accurate to a few ulps of
/// the accumulator even for values ~1e6 with unit spread (float32), where E[x^2] - E[x]^2 loses every
/// digit. A negative result of rounding is clamped to 0; NaN propagates.
/// \throws std::invalid_argument when `x` is empty.
template <detail::reducible_range R>
[[nodiscard]] mean_and_variance<accumulator_t<detail::element_t<R>>> mean_variance(const R& x) {
  using A = accumulator_t<detail::element_t<R>>;
  using Real = internal::real_of_t<A>;
  const auto n = std::ranges::size(x);
  detail::require_non_empty(n, "mean_variance");
  const A mu = mean(x);
  detail::accumulating_sum<A> deviations;
  detail::compensated_sum<Real> squares;
  for (const auto& v : x) {
    const A d = internal::widen(v) - mu;
    deviations.add(d);
    squares.add(detail::abs2(d));
  }
  const Real count = static_cast<Real>(n);
  const A deviation_sum = deviations.value();
  Real variance = (squares.value() - detail::abs2(deviation_sum) / count) / count;
  if (variance < Real{0}) variance = Real{0};
  return {mu, deviation_sum / count, variance};
}

/// Mean of |x|^2 (compensated) in the real accumulator type: the statistic of RMSNorm.
/// \throws std::invalid_argument when `x` is empty.
template <detail::reducible_range R>
[[nodiscard]] internal::real_of_t<accumulator_t<detail::element_t<R>>> mean_square(const R& x) {
  using Real = internal::real_of_t<accumulator_t<detail::element_t<R>>>;
  const auto n = std::ranges::size(x);
  detail::require_non_empty(n, "mean_square");
  detail::compensated_sum<Real> s;
  for (const auto& v : x) s.add(detail::abs2(internal::widen(v)));
  return s.value() / static_cast<Real>(n);
}

/// The power-of-two exponent k that `scaled_mean_square` divides `x` by before squaring, so that the
/// squares of its elements can be summed in the real accumulator type `Real` without overflow, and
/// without an underflow that would cost accuracy (LAPACK's nrm2 scales by the largest magnitude for
/// the same reason; a power of two keeps the scaling exact):
///
/// - 0 for ordinary data: max|x_i| in [2^lo, 2^hi), hi = (max_exponent - bit_width(n)) / 2 - 1 and
///   lo = (min_exponent - 1 + digits) / 2 + 1 (float: [2^-50, 2^60) for 48 values; double: about
///   [2^-483, 2^508)). Then nothing is rescaled and the statistics are those of the plain formula.
/// - otherwise the exponent e of max|x_i| = m 2^e, m in [0.5, 1) (`std::frexp`), so that every
///   |x_i| 2^-e < 1 and the largest square is in [1/4, 1).
/// - 0 for an empty range, an all-zero range, or one holding Inf or NaN (they propagate as usual).
template <detail::reducible_range R>
[[nodiscard]] int rescaling_exponent(const R& x) noexcept {
  using Real = internal::real_of_t<accumulator_t<detail::element_t<R>>>;
  using limits = std::numeric_limits<Real>;
  Real m{0};
  for (const auto& v : x) {
    const Real a = std::abs(internal::widen(v));
    if (!(a <= limits::max())) return 0;  // Inf or NaN
    if (a > m) m = a;
  }
  return detail::rescaling_exponent_of_max(m, static_cast<std::size_t>(std::ranges::size(x)));
}

/// Mean of |x|^2 with a power-of-two rescaling: mean(|x_i|^2) = value * 2^(2 exponent), where `value`
/// is the mean of |x_i 2^-exponent|^2.
template <class Real>
struct scaled_square_mean {
  Real value;    ///< mean of |x_i 2^-exponent|^2 (compensated), in [1/(4n), 1) when exponent != 0
  int exponent;  ///< `rescaling_exponent(x)`: 0 for ordinary data
};

/// `mean_square` that cannot overflow or underflow: x is divided by 2^k, k = `rescaling_exponent(x)`,
/// before squaring, so a float32 row of 3e19 (squares 9e38, above float's max) or of values near
/// float's max has a finite, accurate mean square (`value * 4^k`), and a row of 1e-30 (squares below
/// float's smallest normal) keeps its digits. For ordinary data k = 0 and `value` is `mean_square(x)`,
/// bit for bit. Callers normalise with `x_i 2^-k / sqrt(value + eps 2^-2k)` (exact rescaling).
/// \throws std::invalid_argument when `x` is empty.
template <detail::reducible_range R>
[[nodiscard]] scaled_square_mean<internal::real_of_t<accumulator_t<detail::element_t<R>>>> scaled_mean_square(
    const R& x) {
  using Real = internal::real_of_t<accumulator_t<detail::element_t<R>>>;
  const auto n = std::ranges::size(x);
  detail::require_non_empty(n, "scaled_mean_square");
  const int k = rescaling_exponent(x);
  if (k == 0) return {mean_square(x), 0};
  detail::compensated_sum<Real> s;
  for (const auto& v : x) s.add(detail::abs2(internal::scale_pow2(internal::widen(v), -k)));
  return {s.value() / static_cast<Real>(n), k};
}

/// Largest |x_i| (exact: no rounding happens), in the real accumulator type. NaN if any element is
/// NaN (a NaN must not hide behind a max, since absmax feeds scaling decisions); 0 for an empty range.
///
/// Contiguous float ranges take an AVX2 loop chosen at run time (kernels/detail/absmax_avx2.hpp: an
/// integer maximum of the patterns of |x|): the same value, except that a NaN result is the canonical
/// quiet NaN, and that under denormals-are-zero (DAZ) it still returns the exact largest subnormal
/// where the portable comparisons see zero.
template <detail::reducible_range R>
[[nodiscard]] internal::real_of_t<accumulator_t<detail::element_t<R>>> absmax(const R& x) noexcept {
  using Real = internal::real_of_t<accumulator_t<detail::element_t<R>>>;
#if MIXPREC_X86_DISPATCH
  if constexpr (std::ranges::contiguous_range<R> && std::same_as<detail::element_t<R>, float>) {
    if (active_isa() >= isa::avx2) {
      const std::uint32_t bits = mixprec::detail::absmax_avx2::absmax_bits(std::ranges::data(x), std::ranges::size(x));
      return bits > 0x7F800000U ? std::numeric_limits<float>::quiet_NaN() : std::bit_cast<float>(bits);
    }
  }
#endif
  Real m{0};
  for (const auto& v : x) {
    const Real a = std::abs(internal::widen(v));
    if (std::isnan(a)) return a;
    if (a > m) m = a;
  }
  return m;
}

}  // namespace mixprec::kernels
