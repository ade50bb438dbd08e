// Test support for the layers' backward tests: support/gradcheck.hpp (float64 central differences,
// random data) with the xtensor helpers the layer tests share, and the check of a norm layer's
// gradients. Written independently of the layers: it only moves numbers and calls the layer's walks.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "support/gradcheck.hpp"

namespace gradcheck {

/// A tensor of shape `shape` holding the values `v` (row-major), each converted to T.
template <class T, std::size_t N>
xt::xtensor<T, N> tensor_from(const std::vector<double>& v, const std::array<std::size_t, N>& shape) {
  xt::xtensor<T, N> t = xt::xtensor<T, N>::from_shape(shape);
  for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = static_cast<T>(v[i]);
  return t;
}

/// The elements of a float64 container (row-major), for `require_close` and `relative_l2`.
template <class A>
std::span<const double> flat_values(const A& a) {
  return std::span<const double>(a.data(), a.size());
}

/// The values of `v`, each rounded to C (through float) and back: inputs a layer computing in C takes
/// exactly, so that a low-precision run and its float64 reference start from the same numbers.
template <class C>
std::vector<double> rounded_to(std::vector<double> v) {
  for (auto& e : v) e = static_cast<double>(static_cast<float>(C(static_cast<float>(e))));
  return v;
}

/// Sets every parameter of `layer` (its `for_each_parameter` walk) to `uniform(size, seed, lo, hi)`:
/// the same seed for each, so parameters of one size get the same values.
template <class Layer>
void fill_parameters(Layer& layer, unsigned seed, double lo, double hi) {
  layer.for_each_parameter([&](std::string_view, auto& p) {
    const auto v = uniform(p.size(), seed, lo, hi);
    for (std::size_t i = 0; i < p.size(); ++i) p.data()[i] = v[i];
  });
}

/// Requires the gradients of a float64 norm layer with features [f] to match central differences of
/// `loss()`: dx with respect to x ("dx"), and the scale's and the bias's gradients in `g` ("dscale",
/// "dbias") where `scale` and `bias` say the layer has them.
template <class Layer, class X, class DX, class Grads, class Loss>
void require_norm_gradients(Layer& layer, X& x, const DX& dx, const Grads& g, Loss&& loss, bool scale, bool bias) {
  const std::size_t f = layer.features();
  require_close("dx", flat_values(dx), numeric_gradient(x.data(), x.size(), loss));
  if (scale) require_close("dscale", flat_values(*g.scale), numeric_gradient(layer.scale()->data(), f, loss));
  if (bias) require_close("dbias", flat_values(*g.bias), numeric_gradient(layer.bias()->data(), f, loss));
}

}  // namespace gradcheck
