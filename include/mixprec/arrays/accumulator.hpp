/// \file
/// \brief `accumulator_t<T>`: the type every reduction, dot product and matrix product of `T`
/// values accumulates in. Light: no Eigen, no xtensor.
#pragma once

#include <complex>
#include <type_traits>

#include "mixprec/formats/basic_float.hpp"

namespace mixprec {

/// Accumulator of `T`: float32 for float and every 16-bit-or-smaller format (what bf16/f16 tensor
/// hardware accumulates in: "opmath" in PyTorch, ElementAccumulator in CUTLASS), double for double,
/// and the complex of matching width for complex. Specialise it for your own scalar types.
template <class T>
struct accumulator {
  static_assert(std::is_floating_point_v<T> || small_float<T>,
                "accumulator_t is defined for float, double, std::complex and mixprec's small floats; "
                "specialise mixprec::accumulator for your own scalar type.");
};
template <small_float T>
struct accumulator<T> {
  using type = float;
};
template <>
struct accumulator<float> {
  using type = float;
};
template <>
struct accumulator<double> {
  using type = double;
};
template <class T>
struct accumulator<std::complex<T>> {
  using type = std::complex<typename accumulator<T>::type>;
};

/// The accumulator type of `T` (see `accumulator`).
template <class T>
using accumulator_t = typename accumulator<std::remove_cv_t<T>>::type;

static_assert(std::is_same_v<accumulator_t<float>, float>);
static_assert(std::is_same_v<accumulator_t<double>, double>);
static_assert(std::is_same_v<accumulator_t<std::complex<float>>, std::complex<float>>);

}  // namespace mixprec
