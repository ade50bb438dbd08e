/// \file
/// \brief `nn::embedding<P>`: a lookup table [vocab, features] in `P::param_type`, mapping integer ids
/// to rows (Flax `nn.Embed`), and `attend` for tied output classifiers (llama2.c shares its token
/// embedding with the classifier).
#pragma once

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/formats/intn.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/packed_b.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/detail/packed_weights.hpp"
#include "mixprec/nn/detail/validate.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/layer_types.hpp"

namespace mixprec::nn {

namespace detail {
template <class T>
inline constexpr bool is_intn_v = false;
template <int Bits, class U>
inline constexpr bool is_intn_v<intn<Bits, U>> = true;

/// Element types accepted as ids: the standard integers (not bool, not the character types) and
/// mixprec's int4/uint4/int2/uint2.
template <class I>
concept id_type = (std::integral<I> && !std::same_as<I, bool> && !std::same_as<I, char> && !std::same_as<I, wchar_t> &&
                   !std::same_as<I, char8_t> && !std::same_as<I, char16_t> && !std::same_as<I, char32_t>) ||
                  is_intn_v<I>;

/// Whether `id` is a valid row of a table of `vocab` rows, and its decimal text (for messages).
template <class I>
[[nodiscard]] std::pair<bool, std::string> checked_id(I id, std::size_t vocab) {
  if constexpr (is_intn_v<I>) {
    const int v = id;
    return {v >= 0 && static_cast<std::size_t>(v) < vocab, std::to_string(v)};
  } else if constexpr (std::is_signed_v<I>) {
    return {id >= 0 && static_cast<unsigned long long>(id) < vocab, std::to_string(id)};
  } else {
    return {static_cast<unsigned long long>(id) < vocab, std::to_string(id)};
  }
}

/// "[1, 2]": the multi-index of flat position `flat` in a row-major array of shape `shape`.
template <class Shape>
[[nodiscard]] std::string index_string(const Shape& shape, std::size_t flat) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_string(index);
}
}  // namespace detail

/// A table of `vocab` embedding vectors of `features` elements.
///
/// - **Parameter**: `table` [vocab, features] in `P::param_type`.
/// - **Lookup** `e(ids)`: ids of any integer type (standard integers, int4/uint4...) in an
///   `xt::xtensor<I, N>` (any N >= 0) or `xt::xarray<I>` give [..ids shape.., features]. Ids carry no
///   floating type, so the policy is applied with the table's type as input: each value is rounded to
///   `compute_t<P, param_type>` and returned as `output_t<P, param_type>` (Flax's Embed casts the table
///   to `dtype` and takes rows).
/// - **attend** `e.attend(x)`: x [..., features] · table^T -> [..., vocab] (Flax `Embed.attend`), the
///   logits of a tied classifier: x and the table rounded to `compute_t<P, T>`, products summed in
///   float32 (`kernels::matmul` with the table as an [n, k] operand), result in `output_t<P, T>`.
/// - **Errors**: an id < 0 or >= vocab throws `std::out_of_range` naming the id, its position and the
///   vocabulary size; `attend` throws `std::invalid_argument` when the last axis of x is not `features`.
/// - **Training** (docs/training.md, "Backward passes"): `forward(ids, ctx)` / `backward(ctx, dy, grads)` for the
///   lookup (`grads.embedding[id] += dy` row by row, in a fixed order: deterministic), `attend_forward<Y>(h, ctx)`
///   / `attend_backward(ctx, dlogits, grads)` for the tied classifier (dh = dlogits · table, and
///   `grads.embedding += dlogitsᵀ · h`). Both add into the **same** `grads.embedding` (nanoGPT ties
///   `wte.weight = lm_head.weight`; llm.c sums both into `grads.wte`). Gradients are `grad_t<P>`
///   (float32; float64 for float64 parameters). `for_each_parameter` walks "embedding".
///
/// **Example**:
///
///     nn::embedding<mixprec::policy<float>> tok = nn::embedding<mixprec::policy<float>>::from_table(table);
///     xt::xtensor<std::int32_t, 2> ids = {{1, 5, 2}};
///     auto h = tok(ids);            // [1, 3, features]
///     auto logits = tok.attend(h);  // [1, 3, vocab]
template <class P>
class embedding {
 public:
  using policy_type = P;
  using param_type = typename P::param_type;
  using table_type = xt::xtensor<param_type, 2>;  ///< [vocab, features]
  using grad_type = grad_t<P>;                    ///< element type of the gradients

  /// The gradient of the table, [vocab, features] in `grad_t<P>`: the lookup and attend add into it.
  struct gradients {
    xt::xtensor<grad_type, 2> embedding;  ///< [vocab, features]
    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`), in the order of `for_each`: so
    /// `all_finite`, `unscale_in_place`, `clip_grad_norm`, `tree_map` and `tree_zero` take these gradients.
    static auto tree_children(auto& self) noexcept { return std::tie(self.embedding); }
    /// Sets every gradient to +0 where it is (shapes and buffers kept, nothing allocated): the
    /// accumulate-then-zero pattern of PyTorch's `zero_grad(set_to_none=False)`.
    void zero() noexcept { mixprec::tree_zero(*this); }
    /// Calls `f("embedding", embedding)`, the order of `for_each_parameter`.
    template <class F>
    void for_each(F&& f) {
      f(std::string_view("embedding"), embedding);
    }
    /// Const form of `for_each`.
    template <class F>
    void for_each(F&& f) const {
      f(std::string_view("embedding"), embedding);
    }
  };

  /// What the lookup's `backward` needs: the ids, in order (flattened).
  struct saved {
    std::vector<std::size_t> ids;
  };

  /// What `attend_backward` needs for inputs of element type T: h rounded to the compute type,
  /// [rows, features] row-major.
  template <class T>
  struct attend_saved {
    std::vector<compute_t<P, T>> h;  ///< the input rounded to the compute type
    std::size_t rows = 0;            ///< leading axes of h flattened
  };

  /// A table of zeros [vocab, features].
  embedding(std::size_t vocab, std::size_t features) : table_(table_type::from_shape({vocab, features})) {
    table_.fill(param_type{});
  }

  /// A layer holding `table` [vocab, features], already in the param type.
  explicit embedding(table_type table) : table_(std::move(table)) {}

  /// A layer from a table [vocab, features] of any floating type, rounded once to the param type.
  template <class W>
  [[nodiscard]] static embedding from_table(const xt::xtensor<W, 2>& table) {
    return embedding(detail::to_param<param_type>(table));
  }

  /// Flax's default embedding initialisation (`default_embed_init = variance_scaling(1.0, "fan_in",
  /// "normal", out_axis=0)`): entries N(0, 1/features). Deterministic for a given `rng` state and
  /// standard library (`std::normal_distribution` is implementation-defined).
  template <class Rng>
  [[nodiscard]] static embedding normal(std::size_t vocab, std::size_t features, Rng& rng) {
    embedding layer(vocab, features);
    // (features == 0: an empty table, nothing is drawn; the distribution still needs a positive stddev.)
    std::normal_distribution<double> dist(0.0, features == 0 ? 1.0 : std::sqrt(1.0 / static_cast<double>(features)));
    for (auto& w : layer.table_) w = internal::round_to<param_type>(dist(rng));
    return layer;
  }

  /// Number of rows of the table (valid ids are 0 .. vocab - 1).
  [[nodiscard]] std::size_t vocab_size() const noexcept { return table_.shape()[0]; }
  /// Length of each embedding vector.
  [[nodiscard]] std::size_t features() const noexcept { return table_.shape()[1]; }
  /// The table [vocab, features] in the param type.
  [[nodiscard]] const table_type& table() const noexcept { return table_; }
  /// The table, writable (an optimiser step, a checkpoint load). Its shape must not change.
  [[nodiscard]] table_type& table() noexcept {
    packed_.invalidate();
    return table_;
  }
  /// Tells the layer that its table was written through a reference obtained before the last call:
  /// the tied classifier (`attend_*`) keeps the table rounded and packed for the matrix products, and
  /// drops that copy on every non-const access (`table()`, `for_each_parameter`, assignment).
  void parameters_changed() noexcept { packed_.invalidate(); }

  /// Calls `f("embedding", table)`.
  template <class F>
  void for_each_parameter(F&& f) {
    packed_.invalidate();
    f(std::string_view("embedding"), table_);
  }
  /// Const form of `for_each_parameter`.
  template <class F>
  void for_each_parameter(F&& f) const {
    f(std::string_view("embedding"), table_);
  }

  /// A zero gradient [vocab, features].
  [[nodiscard]] gradients zero_gradients() const { return gradients{xt::zeros<grad_type>(table_.shape())}; }

  /// The lookup `operator()(ids)`, saving the ids in `ctx` for `backward`. Same result, bit for bit.
  /// \throws std::out_of_range as `operator()`.
  template <class Ids>
  [[nodiscard]] auto forward(const Ids& ids_in, saved& ctx) const {
    const auto& ids = detail::as_array(ids_in);
    auto y = (*this)(ids);
    ctx.ids.resize(ids.size());
    for (std::size_t n = 0; n < ids.size(); ++n) ctx.ids[n] = static_cast<std::size_t>(ids.data()[n]);
    return y;
  }

  /// The lookup's VJP: `grads.embedding[ids[n]] += dy[n]` for every id n in order (float32 sums, float64
  /// for float64 parameters). Ids get no gradient.
  /// \throws std::invalid_argument if dy [..., features] does not hold one row per saved id, the
  /// gradients are not shaped like the table, or a saved id is not in this layer's vocabulary (a
  /// context from another layer).
  template <detail::layer_input DY>
  void backward(const saved& ctx, const DY& dy_in, gradients& grads) const {
    const internal::profile_scope region("nn::embedding.lookup_backward");
    const auto& dy = detail::as_array(dy_in);
    detail::check_features("embedding::backward", dy, features(), "table features");
    detail::check_backward_rows("embedding::backward", detail::leading_size(dy), ctx.ids.size());
    detail::check_gradient_shape("embedding::backward", "embedding", grads.embedding.shape(), table_.shape());
    for (const std::size_t id : ctx.ids) {
      if (id >= vocab_size()) {
        throw std::invalid_argument(internal::concat("embedding::backward: the saved context holds id ", id,
                                                     " but the vocabulary has ", vocab_size(),
                                                     " ids; pass the context filled by this layer's forward()"));
      }
    }
    const std::size_t f = features();
    const auto* src = dy.data();
    grad_type* dst = grads.embedding.data();
    for (std::size_t n = 0; n < ctx.ids.size(); ++n) {
      grad_type* row = dst + ctx.ids[n] * f;
      for (std::size_t j = 0; j < f; ++j) row[j] += static_cast<grad_type>(static_cast<float>(src[n * f + j]));
    }
  }

  /// `attend(x)` with logits returned in `Y` instead of `output_t<P, T>` (float32 logits for a fused
  /// cross-entropy, which keeps logits in float32, never rounded to the compute type:
  /// docs/training.md, "Gradient formulas").
  /// \throws std::invalid_argument if the last axis of x is not `features()`.
  template <class Y, detail::layer_input X>
  [[nodiscard]] auto attend_logits(const X& x_in) const {
    const auto& x = detail::as_array(x_in);
    using C = compute_t<P, detail::value_t<X>>;
    check_attend(x);
    auto y = detail::make_like<Y>(x, vocab_size());
    logits<C>(detail::flat(x), detail::flat(y), detail::leading_size(x));
    return y;
  }

  /// `attend_logits<Y>(x)`, saving x rounded to the compute type in `ctx`. Same result, bit for bit.
  /// \throws std::invalid_argument if the last axis of x is not `features()`.
  template <class Y, detail::layer_input X>
  [[nodiscard]] auto attend_forward(const X& x_in, attend_saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    using C = compute_t<P, detail::value_t<X>>;
    check_attend(x);
    ctx.rows = detail::leading_size(x);
    ctx.h.resize(x.size());
    internal::round_n<C>(x.data(), x.size(), ctx.h.data());
    auto y = detail::make_like<Y>(x, vocab_size());
    logits<C>(ctx.h, detail::flat(y), ctx.rows);
    return y;
  }

  /// The tied classifier's VJP: returns dh [..., features] = dlogits · table in T (operands rounded to
  /// C, float32 sums) and adds `grads.embedding += dlogitsᵀ · h` (float32).
  /// \throws std::invalid_argument if dlogits' last axis is not vocab, its rows are not the saved ones,
  /// or the gradients are not shaped like the table.
  template <class T, detail::layer_input DZ>
  [[nodiscard]] auto attend_backward(const attend_saved<T>& ctx, const DZ& dlogits_in, gradients& grads) const {
    const internal::profile_scope region("nn::embedding.attend_backward");
    const auto& dlogits = detail::as_array(dlogits_in);
    using C = compute_t<P, T>;
    detail::check_features("embedding::attend_backward", dlogits, vocab_size(), "vocab");
    detail::check_backward_rows("embedding::attend_backward", detail::leading_size(dlogits), ctx.rows);
    detail::check_gradient_shape("embedding::attend_backward", "embedding", grads.embedding.shape(), table_.shape());
    std::vector<C> dz(dlogits.size());
    internal::round_n<C>(dlogits.data(), dlogits.size(), dz.data());
    auto dh = detail::make_like<T>(dlogits, features());
    bool packed_done = false;
    if constexpr (detail::packable_compute<C>) {
      if (detail::use_packed<C>()) {
        kernels::matmul<C>(
            dz, *packed_.template get<C>(detail::flat(table_), vocab_size(), features(), kernels::b_layout::k_n),
            detail::flat(dh), ctx.rows);
        packed_done = true;
      }
    }
    if (!packed_done) {
      kernels::matmul<C>(dz, detail::flat(table_), detail::flat(dh), {ctx.rows, vocab_size(), features()},
                         kernels::b_layout::k_n);
    }
    if constexpr (std::is_same_v<accumulator_t<C>, grad_type>) {
      kernels::matmul_accumulate<C>(dz, kernels::a_layout::k_m, ctx.h, kernels::b_layout::k_n,
                                    detail::flat(grads.embedding), {vocab_size(), ctx.rows, features()});
    } else {
      std::vector<accumulator_t<C>> tmp(grads.embedding.size(), accumulator_t<C>{});
      kernels::matmul_accumulate<C>(dz, kernels::a_layout::k_m, ctx.h, kernels::b_layout::k_n, tmp,
                                    {vocab_size(), ctx.rows, features()});
      for (std::size_t i = 0; i < tmp.size(); ++i) grads.embedding.data()[i] += static_cast<grad_type>(tmp[i]);
    }
    return dh;
  }

  /// The rows of the table for `ids`: shape [..ids.., features], element type
  /// `output_t<P, param_type>` (each value rounded to the compute type, then to the output type).
  /// \throws std::out_of_range if an id is negative or >= vocab_size().
  template <class I, std::size_t N>
  requires detail::id_type<I>
  [[nodiscard]] xt::xtensor<output_t<P, param_type>, N + 1> operator()(const xt::xtensor<I, N>& ids) const {
    using O = output_t<P, param_type>;
    std::array<std::size_t, N + 1> shape{};
    for (std::size_t d = 0; d < N; ++d) shape[d] = ids.shape()[d];
    shape[N] = features();
    auto y = xt::xtensor<O, N + 1>::from_shape(shape);
    lookup(ids, y.data());
    return y;
  }

  /// As above for an `xt::xarray` of ids: [..ids.., features] as an `xt::xarray`.
  /// \throws std::out_of_range if an id is negative or >= vocab_size().
  template <class I>
  requires detail::id_type<I>
  [[nodiscard]] xt::xarray<output_t<P, param_type>> operator()(const xt::xarray<I>& ids) const {
    using O = output_t<P, param_type>;
    std::vector<std::size_t> shape(ids.shape().begin(), ids.shape().end());
    shape.push_back(features());
    auto y = xt::xarray<O>::from_shape(shape);
    lookup(ids, y.data());
    return y;
  }

  /// As above for ids in any other array a layer takes (`xt::adapt` over a buffer, a view,
  /// `xt::xtensor_fixed`, an Eigen matrix or map: read in place when contiguous row-major, see
  /// `as_row_major`): [..ids.., features] as an `xt::xtensor` (an `xt::xarray` for a shape whose rank is
  /// known only at run time).
  /// \throws std::out_of_range if an id is negative or >= vocab_size().
  template <detail::layer_input Ids>
  requires detail::id_type<detail::value_t<Ids>>
  [[nodiscard]] auto operator()(const Ids& ids_in) const {
    const auto& ids = detail::as_array(ids_in);
    using View = std::remove_cvref_t<decltype(ids)>;
    using Y = detail::rebind_t<View, output_t<P, param_type>, 1>;
    auto shape = [&] {
      if constexpr (View::rank == dynamic_rank) {
        typename Y::shape_type s(ids.dimension() + 1);
        return s;
      } else {
        return std::array<std::size_t, View::rank + 1>{};
      }
    }();
    std::copy(ids.shape().begin(), ids.shape().end(), shape.begin());
    shape[ids.dimension()] = features();
    auto y = Y::from_shape(shape);
    lookup(ids, y.data());
    return y;
  }

  /// Logits of a tied classifier: x [..., features] · table^T -> [..., vocab], in
  /// `output_t<P, T>`, computed in `compute_t<P, T>` with float32 accumulation.
  /// \throws std::invalid_argument if the last axis of x is not `features()`.
  template <detail::layer_input X>
  [[nodiscard]] auto attend(const X& x_in) const {
    const auto& x = detail::as_array(x_in);
    return attend_logits<output_t<P, detail::value_t<X>>>(x);
  }

  /// The lookup `operator()(ids)` written into `out` [..ids.., features] (element type
  /// `output_t<P, param_type>`; a caller's buffer, reused across calls). Allocates nothing.
  /// \throws std::out_of_range as `operator()`; std::invalid_argument if out's shape is not ids' shape
  ///   with `features()` appended.
  template <detail::layer_output YOut, detail::layer_input Ids>
  requires detail::id_type<detail::value_t<Ids>>
  void forward_into(YOut& out_in, const Ids& ids_in) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
    const auto& ids = detail::as_array(ids_in);
    static_assert(std::is_same_v<detail::value_t<Y>, output_t<P, param_type>>,
                  "embedding::forward_into: out's element type must be output_t<P, param_type> of the layer's "
                  "policy P; make out with that type, or use the value-returning call.");
    const auto& is = ids.shape();
    const auto& os = out.shape();
    if (os.size() != is.size() + 1 || !std::equal(is.begin(), is.end(), os.begin()) || os[is.size()] != features()) {
      throw std::invalid_argument(internal::concat("embedding::forward_into: out has shape ", detail::shape_string(os),
                                                   " but ids have shape ", detail::shape_string(is),
                                                   "; make out with ids' shape and ", features(),
                                                   " (features) appended (it is written, not resized)"));
    }
    lookup(ids, out.data());
  }

  /// `attend(x)` written into `out` [..., vocab] (x's leading axes; element type `output_t<P, T>`, or
  /// float32 logits as `attend_logits<float>`): the same bits, and no allocation once the packed table
  /// is kept.
  /// \throws std::invalid_argument if the last axis of x is not `features()` or out's shape is not x's
  ///   with `vocab_size()` on the last axis.
  template <detail::layer_output YOut, detail::layer_input X>
  void attend_into(YOut& out_in, const X& x_in) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    using O = detail::value_t<Y>;
    static_assert(std::is_same_v<O, output_t<P, T>> || std::is_same_v<O, float>,
                  "embedding::attend_into: out's element type must be output_t<P, T> of the layer's policy P for "
                  "x's element type T, or float; make out with one of them, or use the value-returning call.");
    check_attend(x);
    detail::check_output_features("embedding::attend_into", out, x, vocab_size());
    logits<compute_t<P, T>>(detail::flat(x), detail::flat(out), detail::leading_size(x));
  }

 private:
  /// y [rows, vocab] = x [rows, features] · tableᵀ in C: through the kept packed table for
  /// float32-accumulating C.
  template <class C, class XR, class YR>
  void logits(const XR& x, YR&& y, std::size_t rows) const {
    const internal::profile_scope region("nn::embedding.attend");
    bool packed_done = false;
    if constexpr (detail::packable_compute<C>) {
      if (detail::use_packed<C>()) {
        kernels::matmul<C>(
            x, *packed_.template get<C>(detail::flat(table_), features(), vocab_size(), kernels::b_layout::n_k), y,
            rows);
        packed_done = true;
      }
    }
    if (!packed_done) {
      kernels::matmul<C>(x, detail::flat(table_), y, {rows, features(), vocab_size()}, kernels::b_layout::n_k);
    }
  }

  template <class X>
  void check_attend(const X& x) const {
    detail::check_features("embedding::attend", x, features(), [&] {
      return internal::concat("table shape ", detail::shape_string(table_.shape()), " = [vocab, features]");
    });
  }

  template <class Ids, class O>
  void lookup(const Ids& ids, O* out) const {
    const internal::profile_scope region("nn::embedding.lookup");
    using C = compute_t<P, param_type>;
    const std::size_t f = features();
    const std::size_t vocab = vocab_size();
    const auto* id_data = ids.data();
    for (std::size_t n = 0; n < ids.size(); ++n) {
      const auto [in_range, id] = detail::checked_id(id_data[n], vocab);
      if (!in_range) {
        throw std::out_of_range(
            internal::concat("embedding: id ", id, " at index ", detail::index_string(ids.shape(), n),
                             " is out of range for a vocabulary of ", vocab, " ids (valid ids are 0 to ",
                             vocab == 0 ? std::string("none") : std::to_string(vocab - 1), ")"));
      }
      const param_type* row = table_.data() + static_cast<std::size_t>(static_cast<long long>(id_data[n])) * f;
      if constexpr (std::is_same_v<O, accumulator_t<C>> && !internal::is_complex_v<C>) {
        internal::round_widen_n<C>(row, f, out + n * f);  // the same rounding, in bulk (F16C, AVX-512)
      } else {
        for (std::size_t j = 0; j < f; ++j) {
          out[n * f + j] = internal::round_to<O>(internal::round_to<C>(row[j]));
        }
      }
    }
  }

  table_type table_;
  detail::packed_weight_cache packed_;  ///< table_ packed per compute type and orientation (tied classifier)
};

namespace detail {
template <>
inline constexpr std::string_view layer_name<embedding> = "mixprec::nn::embedding";
}  // namespace detail

/// embedding, the token embedding, with its policy taken from the `policy_scope` live at construction: one of the
/// listed `Ps...` (nn/from_scope.hpp, `detail::scoped_layer` for the members). Constructed with `embedding<P>`'s
/// constructor arguments, optionally preceded by `compute_dtype(...)`, or with `from_factory`.
/// Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps>
class embedding<from_scope<Ps...>> : public detail::scoped_layer<embedding, Ps...> {
 public:
  using detail::scoped_layer<embedding, Ps...>::scoped_layer;
};

}  // namespace mixprec::nn
