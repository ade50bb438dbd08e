/// \file
/// \brief `kernels::matmul`: y = a · b on contiguous row-major data, with the operands rounded to a
/// compute type and the products summed in its accumulator (float32 for every 16-bit-or-smaller type).
///
/// What it computes, for a compute type `C` and `Acc = accumulator_t<C>`:
///
///     y[i, j] = round_to<Y>( bias_j' + sum_p a'[i, p] * b'(p, j) )      a' = Acc(C(a)), b' = Acc(C(b)), bias' =
///     Acc(C(bias))
///
/// i.e. every operand is rounded once to `C` (exactly nothing happens when it already is a `C`),
/// widened exactly to `Acc`, and the products are summed in `Acc`. For the 16-bit formats and smaller
/// a product of two rounded operands has at most 2 x 11 significant bits, so it is exact in float32:
/// the result is "operands rounded to the compute dtype, products summed in float32", what bf16/f16
/// tensor hardware with float32 accumulation computes.
///
/// Who multiplies is decided at run time (`mixprec::active_isa()`): for float32 accumulation on the
/// AVX2 level and above, the blocked GEMM of kernels/detail/gemm_engine.hpp (operands converted while
/// they are packed; the micro-kernel chosen by the level in use: AVX2+FMA, AVX-512, or VDPBF16PS for
/// bfloat16 operands on the avx512bf16 level, giving the same bits for normal operands; a row's result
/// independent of the other rows and of the threads); otherwise (portable level, float64, complex)
/// Eigen's GEMM, or GEMV when m or n is 1, on blocks converted to `Acc` in scratch buffers of at most
/// `matmul_block_elements` elements per operand (operands already in `Acc` are mapped in place).
/// Eigen never sees a half type, so it can never accumulate in one. docs/kernels.md has the details.
#pragma once

#include <algorithm>
#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

// GCC 12 reports false -W(maybe-)uninitialized warnings inside its own avx512fintrin.h (the
// _mm512_undefined_* idiom) when Eigen's AVX-512 GEMM kernels are inlined (-mavx512f / -march=native
// builds), which breaks -Werror builds of every program that calls matmul. Silenced for Eigen and this
// header (mixprec/arrays/eigen.hpp silences them around Eigen itself; this covers the kernels below).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/eigen.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/detail/gemm_engine.hpp"
#include "mixprec/kernels/layouts.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/kernels/scratch.hpp"

namespace mixprec::kernels {

/// The sizes of y[m, n] = a[m, k] · b(k, n).
struct matmul_shape {
  std::size_t m;  ///< rows of a and y
  std::size_t k;  ///< contracted dimension: columns of a, rows of b(k, n)
  std::size_t n;  ///< columns of y and of b(k, n)
};

/// Default upper bound on the elements of each scratch block (converted a rows, converted b panel,
/// y block): 2^18 accumulator values, 1 MiB of float, so that a converted panel is still in the L2
/// cache when Eigen reads it (2^20 was slower on single-row products; measured: docs/kernels.md, "Performance").
/// Blocks are cut along m and n, never along k.
inline constexpr std::size_t matmul_block_elements = std::size_t{1} << 18;

namespace detail {

template <class T>
using row_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using row_vector = Eigen::Matrix<T, 1, Eigen::Dynamic, Eigen::RowMajor>;

/// Whether values of `S` must be converted (rounded to `C`, widened) before Eigen sees them.
template <class C, class S>
inline constexpr bool needs_conversion = !(std::same_as<S, C> && std::same_as<C, accumulator_t<C>>);

template <class R>
using matmul_element_t = std::remove_cv_t<std::ranges::range_value_t<R>>;

template <class R>
concept matmul_input =
    std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && internal::kernel_scalar<matmul_element_t<R>>;
template <class R>
concept matmul_output = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                        internal::kernel_scalar<matmul_element_t<R>> && !std::integral<matmul_element_t<R>> &&
                        !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

inline std::string shape_string(std::size_t r, std::size_t c) { return internal::concat("[", r, ", ", c, "]"); }

inline void check_matmul_sizes(std::size_t a_size, std::size_t b_size, std::size_t y_size, const std::size_t* bias_size,
                               matmul_shape s, b_layout layout) {
  const std::string b_shape = layout == b_layout::k_n ? shape_string(s.k, s.n) : shape_string(s.n, s.k);
  auto fail = [&](const std::string& what, std::size_t have, std::size_t want, const std::string& shape) {
    throw std::invalid_argument(internal::concat("kernels::matmul: ", what, " has ", have, " elements but shape ",
                                                 shape, " needs ", want, " (a is ", shape_string(s.m, s.k), ", b is ",
                                                 b_shape, ", y is ", shape_string(s.m, s.n), ")"));
  };
  const auto wraps = [](std::size_t x, std::size_t y) { return x != 0 && (x * y) / x != y; };  // unsigned: defined
  if (wraps(s.m, s.k) || wraps(s.k, s.n) || wraps(s.m, s.n)) {
    throw std::invalid_argument(internal::concat("kernels::matmul: the shape (a is ", shape_string(s.m, s.k), ", b is ",
                                                 b_shape, ", y is ", shape_string(s.m, s.n),
                                                 ") has more elements than size_t counts"));
  }
  if (a_size != s.m * s.k) fail("a", a_size, s.m * s.k, shape_string(s.m, s.k));
  if (b_size != s.k * s.n) fail("b", b_size, s.k * s.n, b_shape);
  if (y_size != s.m * s.n) fail("y", y_size, s.m * s.n, shape_string(s.m, s.n));
  if (bias_size != nullptr && *bias_size != s.n) fail("bias", *bias_size, s.n, internal::concat("[", s.n, "]"));
}

inline void check_block_elements(std::size_t block_elements) {
  if (block_elements == 0) {
    throw std::invalid_argument(
        "kernels::matmul: block_elements is 0; pass a positive scratch size (default "
        "kernels::matmul_block_elements).");
  }
}

/// y[rows, cols] (row stride ldy) = a[rows, k] · b (+ bias[cols] when not null), Eigen's product in Acc:
/// b is [cols, k] (`b_layout::n_k`) or [k, cols] (`b_layout::k_n`), with row stride ldb. The Eigen half of the matmul
/// driver, on operands already rounded to the compute type and widened to Acc: one instantiation per accumulator type
/// (the compiled library holds them, kernels/compiled.hpp).
template <class Acc>
void eigen_block_product(const Acc* a, const Acc* b, b_layout layout, std::size_t ldb, const Acc* bias, Acc* y,
                         std::size_t ldy, std::size_t rows, std::size_t cols, std::size_t k) {
  using Mat = row_matrix<Acc>;
  using ConstMap = Eigen::Map<const Mat>;
  using Strided = Eigen::Map<const Mat, Eigen::Unaligned, Eigen::OuterStride<>>;
  const auto r = static_cast<Eigen::Index>(rows);
  const auto c = static_cast<Eigen::Index>(cols);
  const auto depth = static_cast<Eigen::Index>(k);
  const auto y_stride = static_cast<Eigen::Index>(ldy);
  const auto b_stride = static_cast<Eigen::Index>(ldb);
  Eigen::Map<Mat, Eigen::Unaligned, Eigen::OuterStride<>> y_blk(y, r, c, Eigen::OuterStride<>(y_stride));
  ConstMap a_map(a, r, depth);
  if (k == 0) {
    y_blk.setZero();
  } else if (layout == b_layout::n_k) {
    Strided b_map(b, c, depth, Eigen::OuterStride<>(b_stride));
    y_blk.noalias() = a_map * b_map.transpose();
  } else {
    Strided b_map(b, depth, c, Eigen::OuterStride<>(b_stride));
    y_blk.noalias() = a_map * b_map;
  }
  if (bias != nullptr) y_blk.rowwise() += Eigen::Map<const row_vector<Acc>>(bias, c);
}

/// The matmul driver; `bias` may be null.
template <class C, class A, class B, class Bias, class Y>
void matmul_impl(const A* a, const B* b, const Bias* bias, Y* y, matmul_shape s, b_layout layout,
                 std::size_t block_elements) {
  using Acc = accumulator_t<C>;
  constexpr bool convert_a = needs_conversion<C, A>;
  constexpr bool convert_b = needs_conversion<C, B>;
  constexpr bool direct_y = std::same_as<Y, Acc>;
  if (s.m == 0 || s.n == 0) return;

  if constexpr (std::same_as<Acc, float> && !internal::is_complex_v<C>) {
    if (use_blocked_gemm<C>()) {
      gemm_problem<A, Y> p{.a = a, .a_order = a_layout::m_k, .y = y, .m = s.m, .k = s.k, .n = s.n};
      if (bias != nullptr) {
        struct blocked_bias_tag;
        const std::span<float> bias_buf = internal::thread_scratch<float, blocked_bias_tag>(s.n);
        internal::round_widen_n<C>(bias, s.n, bias_buf.data());
        p.out = epilogue::bias;
        p.bias = bias_buf.data();
      }
      blocked_gemm<C>(gemm_operands_of<C>(p), b_operand_of<C>(b, layout));
      return;
    }
  }

  const internal::profile_scope region([&] {
    return internal::concat("gemm ", internal::short_type_name<C>(), " m", s.m, " k", s.k, " n", s.n, " (eigen)");
  });
  // Bias, rounded to C and widened, once. This and the conversion buffers below are per-thread buffers
  // kept across calls (kernels/scratch.hpp), so that a warm call allocates nothing of its own.
  struct bias_tag;
  struct a_tag;
  struct b_tag;
  struct y_tag;
  const std::span<Acc> bias_acc = internal::thread_scratch<Acc, bias_tag>(bias != nullptr ? s.n : 0);
  if (bias != nullptr) internal::round_widen_n<C>(bias, s.n, bias_acc.data());

  // Block sizes along m (rows of a and y) and n (columns of b and y).
  const std::size_t per_row = std::max<std::size_t>(s.k, 1);
  std::size_t mb = convert_a ? std::clamp<std::size_t>(block_elements / per_row, 1, s.m) : s.m;
  const std::size_t nb = convert_b ? std::clamp<std::size_t>(block_elements / per_row, 1, s.n) : s.n;
  if (!direct_y && mb * nb > block_elements) mb = std::max<std::size_t>(1, block_elements / nb);

  const std::span<Acc> a_buf = internal::thread_scratch<Acc, a_tag>(convert_a ? mb * s.k : 0);
  const std::span<Acc> b_buf = internal::thread_scratch<Acc, b_tag>(convert_b ? nb * s.k : 0);
  const std::span<Acc> y_buf = internal::thread_scratch<Acc, y_tag>(direct_y ? 0 : mb * nb);

  auto load_a = [&](std::size_t i0, std::size_t rows) -> const Acc* {
    if constexpr (convert_a) {
      internal::round_widen_n<C>(a + i0 * s.k, rows * s.k, a_buf.data());
      return a_buf.data();
    } else {
      return a + i0 * s.k;
    }
  };
  // The b panel for columns [j0, j0 + cols): [k, cols] for k_n, [cols, k] for n_k.
  auto load_b = [&](std::size_t j0, std::size_t cols) -> const Acc* {
    if constexpr (convert_b) {
      if (layout == b_layout::n_k) {
        internal::round_widen_n<C>(b + j0 * s.k, cols * s.k, b_buf.data());
      } else {
        for (std::size_t p = 0; p < s.k; ++p)
          internal::round_widen_n<C>(b + p * s.n + j0, cols, b_buf.data() + p * cols);
      }
      return b_buf.data();
    } else {
      return b + (layout == b_layout::n_k ? j0 * s.k : 0);
    }
  };
  auto compute = [&](const Acc* a_blk, std::size_t i0, std::size_t rows, const Acc* b_blk, std::size_t j0,
                     std::size_t cols) {
    Acc* out = nullptr;
    std::size_t out_stride = 0;
    if constexpr (direct_y) {
      out = y + i0 * s.n + j0;  // results land in y itself
      out_stride = s.n;
    } else {
      out = y_buf.data();  // results are rounded to Y below
      out_stride = cols;
    }
    const bool n_k = layout == b_layout::n_k;
    // A converted panel is contiguous [k, cols]; b itself is read in place with its row stride n.
    const Acc* b_at = n_k || convert_b ? b_blk : b_blk + j0;
    const std::size_t ldb = n_k ? s.k : (convert_b ? cols : s.n);
    eigen_block_product<Acc>(a_blk, b_at, layout, ldb, bias != nullptr ? bias_acc.data() + j0 : nullptr, out,
                             out_stride, rows, cols, s.k);
    if constexpr (!direct_y) {
      for (std::size_t i = 0; i < rows; ++i) {
        Y* dst = y + (i0 + i) * s.n + j0;
        const Acc* src = y_buf.data() + i * cols;
        for (std::size_t j = 0; j < cols; ++j) dst[j] = internal::round_out<Y>(src[j]);
      }
    }
  };

  const std::size_t a_blocks = (s.m + mb - 1) / mb;
  const std::size_t b_blocks = (s.n + nb - 1) / nb;
  // Loop order: the operand in the outer loop is converted once, the inner one once per outer block.
  // Put outside whichever makes the repeated conversions cheaper.
  const bool b_outer = (a_blocks == 1) || (b_blocks > 1 && (a_blocks - 1) * s.n * s.k >= (b_blocks - 1) * s.m * s.k);
  if (b_outer) {
    for (std::size_t j0 = 0; j0 < s.n; j0 += nb) {
      const std::size_t cols = std::min(nb, s.n - j0);
      const Acc* b_blk = load_b(j0, cols);
      for (std::size_t i0 = 0; i0 < s.m; i0 += mb) {
        const std::size_t rows = std::min(mb, s.m - i0);
        compute(load_a(i0, rows), i0, rows, b_blk, j0, cols);
      }
    }
  } else {
    for (std::size_t i0 = 0; i0 < s.m; i0 += mb) {
      const std::size_t rows = std::min(mb, s.m - i0);
      const Acc* a_blk = load_a(i0, rows);
      for (std::size_t j0 = 0; j0 < s.n; j0 += nb) {
        const std::size_t cols = std::min(nb, s.n - j0);
        compute(a_blk, i0, rows, load_b(j0, cols), j0, cols);
      }
    }
  }
}

template <class C, class... Ts>
constexpr void check_compute_type() {
  static_assert(std::same_as<C, float> || std::same_as<C, double> || small_float<C> ||
                    std::same_as<C, std::complex<float>> || std::same_as<C, std::complex<double>>,
                "kernels::matmul<Compute>: Compute must be float, double, a mixprec small float or std::complex of "
                "float/double.");
  static_assert(internal::is_complex_v<C> || (!internal::is_complex_v<Ts> && ...),
                "kernels::matmul: a complex operand would be made real; use a std::complex compute type.");
}

}  // namespace detail

/// y[m, n] = a[m, k] · b(k, n), operands rounded to `Compute`, products summed in
/// `accumulator_t<Compute>` (the blocked engine or Eigen, see the file comment), each result rounded once to y's
/// element type. `a` and `y` are row-major; `b` is [k, n] or [n, k] per `layout`. The element types
/// of `a`, `b` and `y` may differ from `Compute` and from each other (float weights with bfloat16
/// compute: the weights are rounded to bfloat16 on the fly, block by block).
///
/// `y` must not overlap `a` or `b`. The contiguous ranges may be std::span, std::vector, std::array...
/// `block_elements` bounds each scratch block of the Eigen path (converted rows of a, converted panel
/// of b, unrounded block of y; at least one row of k elements); it trades memory for speed there (the
/// blocked engine sizes its own blocks). Each output element is one reduction over all k terms
/// whatever the blocks (Eigen's summation order may vary with the block shape, within the same error
/// bound; the blocked engine's does not).
///
/// \throws std::invalid_argument when a size does not match the shape (the message gives all three
///         shapes), when the shape has more elements than std::size_t counts, or when `block_elements`
///         is 0.
///
/// **Example**:
///
///     std::vector<float> x(2 * 3), w(4 * 3), y(2 * 4);        // x [2, 3], w [out=4, in=3] (llama2.c)
///     kernels::matmul<bfloat16>(x, w, y, {.m = 2, .k = 3, .n = 4}, kernels::b_layout::n_k);
///     // y = round_bf16(x) · round_bf16(w)^T, summed in float32
template <class Compute, detail::matmul_input RA, detail::matmul_input RB, detail::matmul_output RY>
void matmul(const RA& a, const RB& b, RY&& y, matmul_shape shape, b_layout layout,
            std::size_t block_elements = matmul_block_elements) {
  using A = detail::matmul_element_t<RA>;
  using B = detail::matmul_element_t<RB>;
  using Y = detail::matmul_element_t<RY>;
  detail::check_compute_type<Compute, A, B>();
  detail::check_matmul_sizes(std::ranges::size(a), std::ranges::size(b), std::ranges::size(y), nullptr, shape, layout);
  detail::check_block_elements(block_elements);
  detail::matmul_impl<Compute, A, B, A, Y>(std::ranges::data(a), std::ranges::data(b), nullptr, std::ranges::data(y),
                                           shape, layout, block_elements);
}

/// y[m, n] = a[m, k] · b(k, n) + bias[n]: as `matmul` above, with the bias rounded to `Compute` and
/// added in the accumulator before the one rounding to y's type (CUTLASS's linear-combination epilogue).
/// \throws std::invalid_argument when a size (the bias's included) does not match the shape, or when
///         `block_elements` is 0.
template <class Compute, detail::matmul_input RA, detail::matmul_input RB, detail::matmul_input RBias,
          detail::matmul_output RY>
void matmul(const RA& a, const RB& b, const RBias& bias, RY&& y, matmul_shape shape, b_layout layout,
            std::size_t block_elements = matmul_block_elements) {
  using A = detail::matmul_element_t<RA>;
  using B = detail::matmul_element_t<RB>;
  using Bias = detail::matmul_element_t<RBias>;
  using Y = detail::matmul_element_t<RY>;
  detail::check_compute_type<Compute, A, B, Bias>();
  const std::size_t bias_size = std::ranges::size(bias);
  detail::check_matmul_sizes(std::ranges::size(a), std::ranges::size(b), std::ranges::size(y), &bias_size, shape,
                             layout);
  detail::check_block_elements(block_elements);
  detail::matmul_impl<Compute, A, B, Bias, Y>(std::ranges::data(a), std::ranges::data(b), std::ranges::data(bias),
                                              std::ranges::data(y), shape, layout, block_elements);
}

}  // namespace mixprec::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's Eigen products (kernels/compiled.hpp): float32 and float64 accumulators, real
/// and complex.
#define MIXPREC_EIGEN_PRODUCT_INSTANTIATION(E, Acc)                                                                \
  E template void mixprec::kernels::detail::eigen_block_product<Acc>(                                              \
      const Acc*, const Acc*, mixprec::kernels::b_layout, std::size_t, const Acc*, Acc*, std::size_t, std::size_t, \
      std::size_t, std::size_t);
#define MIXPREC_EIGEN_PRODUCT_INSTANTIATIONS(E) MIXPREC_FOR_ACCUMULATOR_TYPES(MIXPREC_EIGEN_PRODUCT_INSTANTIATION, E)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_EIGEN_PRODUCT_INSTANTIATIONS(extern)
#endif
