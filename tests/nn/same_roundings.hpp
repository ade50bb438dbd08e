// Test support for the "same roundings" references of the layer tests (issue 12): float64 references
// that round to the compute type C exactly where a layer does, so that what is left between the layer
// and the reference is only the float32 arithmetic (accumulation, exp, sin/cos) and one rounding to the
// output type. Their bounds are tight: a rounding point moved, skipped or added, or an accumulator
// narrowed to C, puts the layer outside them (each test proves it with mutated references).
//
// The rounding points need one care. The layer rounds to C a value it computed in float32, within some
// e of the exact value v the reference rounds. Where v lies within e of a boundary between two C values,
// the layer may land on the neighbouring C value. Rounding to nearest is monotone, so the layer's
// rounded value lies in [round(v - e), round(v + e)]: `round_within` returns round(v) and the largest
// distance from it to either end, which is 0 unless a boundary is that close, and then one ulp of C at
// that element. That error is carried downstream, weighted by the magnitudes it meets (|w| in the next
// product, and so on), like every other error: an unlucky rounding is accounted for exactly where it
// happens, with no slack anywhere else.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <vector>

#include "mixprec/core.hpp"

namespace layer_tests {

/// The unit roundoff of the float32 accumulator, 2^-24, raised by 2^-20 of itself: the float64
/// reference's own rounding errors (n 2^-53 of the same magnitudes) are then covered too.
inline double u_f32() { return std::ldexp(1.0, -24) * (1.0 + std::ldexp(1.0, -20)); }

/// gamma_n = n u / (1 - n u) with u = `u_f32()`: a float32 sum of n terms (any order, with or without
/// FMA) is within gamma_{n-1} of the sum of their magnitudes (Higham, Accuracy and Stability, 3.1).
inline double gamma_f32(std::size_t n) {
  const double nu = static_cast<double>(n) * u_f32();
  return nu / (1.0 - nu);
}

/// `x` rounded once to T (float64: unchanged), as a double. Converting the double directly rounds once
/// (mixprec's formats never round a double to float first).
template <class T>
double round_as(double x) {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    return static_cast<double>(static_cast<T>(x));
  }
}

/// A value of the reference and a bound on how far the layer's corresponding value may be from it.
struct bounded {
  double v = 0.0;
  double e = 0.0;
};

/// The reference value `v` rounded by `round`, where the layer rounds a value within `e` of `v`: the
/// layer's result lies in [round(v - e), round(v + e)] (rounding is monotone), so it is within the
/// returned bound of round(v). The bound is 0 unless a rounding boundary lies within e of v. The
/// interval is widened by 2^-50 |v| so that v +- e, computed in double, still contains the exact ends.
inline bounded round_within(double (*round)(double), double v, double e) {
  const double r = round(v);
  const double w = e + std::ldexp(std::abs(v), -50);
  return {r, std::max(round(v + w) - r, r - round(v - w))};
}

/// Accumulation in C, the bug the tests plant: `sum + term` rounded to C after every term.
inline double add_in(double (*round)(double), double sum, double term) { return round(sum + term); }

/// How a layer's output compares with a same-roundings reference `ref` and its `bound`, per element.
struct comparison {
  std::size_t elements = 0;  ///< elements compared
  std::size_t outside = 0;   ///< elements with |y - ref| > bound
  std::size_t exact = 0;     ///< elements whose bound is 0: no rounding boundary in reach, y must equal ref
  double worst = 0.0;        ///< max |y - ref| / bound over the elements with a non-zero bound
  double separation = 0.0;   ///< see `separate`
};

/// Compares y (any contiguous container of numbers) with (ref, bound).
template <class Y>
comparison compare_with(const Y& y, const std::vector<double>& ref, const std::vector<double>& bound) {
  comparison c;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(static_cast<double>(y.data()[i]) - ref[i]);
    ++c.elements;
    if (!(d <= bound[i])) ++c.outside;
    if (bound[i] == 0.0) {
      ++c.exact;
    } else {
      c.worst = std::max(c.worst, d / bound[i]);
    }
  }
  return c;
}

/// With a planted bug: `c` compares the layer with the bugged reference (`bug_ref`, `bug_bound`), and
/// `separation` becomes max |bug_ref - ref| / (bound + bug_bound) against the correct reference. Above
/// 1, a layer with the bug (its outputs within bug_bound of bug_ref) must fail the check against the
/// correct reference at that element, whatever its float32 arithmetic; infinite when both bounds are 0
/// there (the references differ where each is exact).
inline comparison separate(comparison c, const std::vector<double>& ref, const std::vector<double>& bound,
                           const std::vector<double>& bug_ref, const std::vector<double>& bug_bound) {
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(bug_ref[i] - ref[i]), b = bound[i] + bug_bound[i];
    c.separation = std::max(c.separation, b > 0.0 ? d / b : (d > 0.0 ? std::numeric_limits<double>::infinity() : 0.0));
  }
  return c;
}

}  // namespace layer_tests
