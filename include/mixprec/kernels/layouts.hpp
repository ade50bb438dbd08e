/// \file
/// \brief How the kernels' operands are laid out and what a product does with its output: `a_layout`,
/// `b_layout` and `epilogue`, the enums a product is described by (as CUTLASS names layouts and
/// epilogues) instead of `bool` arguments. Light: no Eigen, no xtensor.
#pragma once

#include <cstdint>

namespace mixprec::kernels {

/// How the left operand `a` of a product is laid out in memory (row-major in both cases).
enum class a_layout : std::uint8_t {
  m_k,  ///< a is [m, k]: a(i, p) = a[i * k + p]. NumPy's `a @ b`.
  k_m,  ///< a is [k, m]: a(i, p) = a[p * m + i]. `a.T @ b`: xᵀ·dy of a weight gradient.
};

/// How the right operand `b` of `matmul` is laid out in memory (row-major in both cases).
enum class b_layout : std::uint8_t {
  k_n,  ///< b is [k, n]: b(p, j) = b[p * n + j]. NumPy's `a @ b`; Flax's Dense kernel [in, out].
  n_k,  ///< b is [n, k]: b(p, j) = b[j * k + p]. `a @ b.T`; PyTorch Linear / llama2.c weights [out, in].
};

/// What a product does with its output y[m, n] once the float32 sums are formed.
enum class epilogue : std::uint8_t {
  store,       ///< y = op(a) · b, each value rounded once to y's type
  bias,        ///< y = op(a) · b + bias[n], the bias added in float32 before the one rounding
  accumulate,  ///< y += op(a) · b, y in float32 (the accumulator): a cotangent summed over products
};

}  // namespace mixprec::kernels
