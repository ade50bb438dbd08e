/// \file
/// \brief T5's relative position bias (Raffel et al. 2020, section 2.1; mesh-tensorflow's
/// `_relative_position_bucket`): `nn::relative_position_bucket`, the bucket of a key − query distance,
/// and `nn::relative_position_bias<P>`, the learned [num_buckets, heads] table that T5 computes in its
/// first layer and shares with the others, as a relative score bias for `nn::attention`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/tree.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/kernels/score_bias.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/detail/validate.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/layer_types.hpp"

namespace mixprec::nn {

/// The hyper-parameters of a T5 relative position bias.
struct relative_position_bias_config {
  std::size_t n_heads = 0;         ///< attention heads (one bias per head and bucket)
  std::size_t num_buckets = 32;    ///< buckets of the distance (T5: 32)
  std::size_t max_distance = 128;  ///< distances at or beyond this share the last bucket (T5: 128)
  bool bidirectional = true;       ///< encoder: keys before and after the query; decoder (false): before only
};

namespace detail {
/// The checks of a bucketing: enough buckets for an exact range, and a log range beyond it.
inline void check_bucketing(const char* where, bool bidirectional, std::size_t num_buckets, std::size_t max_distance) {
  const std::size_t per_side = bidirectional ? num_buckets / 2 : num_buckets;
  const std::size_t max_exact = per_side / 2;
  if (max_exact == 0 || max_distance <= max_exact) {
    throw std::invalid_argument(internal::concat(
        where, ": num_buckets = ", num_buckets, " and max_distance = ", max_distance, " (",
        bidirectional ? "bi" : "uni", "directional) leave ", max_exact, " exact buckets below a log range ending at ",
        max_distance, "; T5 needs num_buckets >= ", bidirectional ? 4 : 2,
        " and max_distance above half the buckets of a side"));
  }
}
}  // namespace detail

/// T5's bucket of the relative position `relative_position` = key position − query position (T5's
/// memory_position − context_position), exactly as mesh-tensorflow's `_relative_position_bucket` and
/// Hugging Face's `T5Attention._relative_position_bucket` compute it:
///
/// - bidirectional: half the buckets for keys after the query (offset num_buckets / 2), half for the
///   query itself and keys before it; n = |relative_position|. Unidirectional (a causal decoder): every
///   bucket for keys at or before the query; n = max(−relative_position, 0).
/// - with B the buckets of one side and max_exact = B / 2: n < max_exact is its own bucket n; beyond,
///   max_exact + ⌊log(n / max_exact) / log(max_distance / max_exact) · (B − max_exact)⌋, at most B − 1, in
///   float32 arithmetic as both references run it (the log of the float32 quotient, divided by the log
///   ratio rounded to float32, times B − max_exact, truncated toward zero).
/// \throws std::invalid_argument when the buckets leave no exact range (num_buckets < 4 bidirectional,
///         < 2 unidirectional) or max_distance <= max_exact.
[[nodiscard]] inline std::size_t relative_position_bucket(std::ptrdiff_t relative_position, bool bidirectional,
                                                          std::size_t num_buckets, std::size_t max_distance) {
  detail::check_bucketing("nn::relative_position_bucket", bidirectional, num_buckets, max_distance);
  std::size_t bucket = 0;
  std::size_t per_side = num_buckets;
  std::uint64_t n = 0;
  if (bidirectional) {
    per_side /= 2;
    if (relative_position > 0) bucket = per_side;
    n = relative_position < 0 ? static_cast<std::uint64_t>(-(relative_position + 1)) + 1
                              : static_cast<std::uint64_t>(relative_position);
  } else {
    n = relative_position < 0 ? static_cast<std::uint64_t>(-(relative_position + 1)) + 1 : 0;
  }
  const std::size_t max_exact = per_side / 2;
  if (n < max_exact) return bucket + static_cast<std::size_t>(n);
  const auto log_ratio =
      static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float large = std::log(static_cast<float>(n) / static_cast<float>(max_exact)) / log_ratio *
                      static_cast<float>(per_side - max_exact);
  const std::size_t beyond = large >= static_cast<float>(per_side) ? per_side : static_cast<std::size_t>(large);
  return bucket + std::min(max_exact + beyond, per_side - 1);
}

/// T5's relative position bias with policy `P`: a learned table [num_buckets, n_heads] in
/// `P::param_type`, whose entry (bucket, h) is added to head h's score of every (query, key) pair whose
/// distance key − query falls in that bucket (`relative_position_bucket`). T5 holds one table per stack
/// (encoder, decoder) in its first layer and passes the bias on to the others; here the caller computes
/// the rows once per forward and hands the same `kernels::score_bias` to every layer's attention, and
/// adds every layer's bias gradient into one `d_rows` before `backward` (so the table's gradient is the
/// sum over layers, as T5's shared table gets it).
///
/// - **forward** `rows<In>(keys)`: the bias of every distance d = key − query in [−(keys − 1), keys − 1]
///   as relative rows [n_heads, 2 keys − 1] (`kernels::score_bias::relative`), each table value rounded
///   to the compute type C = `compute_t<P, In>` (jmp: parameters are cast to the compute dtype) and kept
///   in opmath A = `accumulator_t<C>`. O(heads · keys) values: the [S, S] bias is never built; the
///   attention kernel reads the row of a query per tile.
/// - **backward** `backward(keys, d_rows, grads)`: d_rows [n_heads, 2 keys − 1] in A (the attention
///   backward's `d_bias`, summed over layers) added into `grads.embedding[bucket(d), h]`, in
///   `grad_t<P>`, distance by distance in increasing order (deterministic).
/// - `for_each_parameter` walks "embedding" (Hugging Face's `relative_attention_bias.weight`, same
///   layout).
/// \throws std::invalid_argument from the constructors when the config's bucketing is invalid
///          (`relative_position_bucket`) or n_heads is 0, or a table's shape is not [num_buckets, n_heads].
template <class P>
class relative_position_bias {
 public:
  using policy_type = P;
  using param_type = typename P::param_type;
  using grad_type = grad_t<P>;                    ///< element type of the gradient
  using table_type = xt::xtensor<param_type, 2>;  ///< [num_buckets, n_heads]
  /// Opmath of the rows for inputs of element type `In`.
  template <class In>
  using opmath_type = accumulator_t<compute_t<P, In>>;

  /// The gradient of the table, [num_buckets, n_heads] in `grad_t<P>`.
  struct gradients {
    xt::xtensor<grad_type, 2> embedding;  ///< [num_buckets, n_heads]
    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`).
    static auto tree_children(auto& self) noexcept { return std::tie(self.embedding); }
    /// Sets every gradient to +0 where it is (shapes and buffers kept).
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

  /// A table of zeros.
  explicit relative_position_bias(const relative_position_bias_config& config)
      : relative_position_bias(config, zeros(config)) {}

  /// A layer holding `table` [num_buckets, n_heads], already in the param type.
  relative_position_bias(const relative_position_bias_config& config, table_type table)
      : config_(checked(config)), table_(std::move(table)) {
    if (table_.shape()[0] != config_.num_buckets || table_.shape()[1] != config_.n_heads) {
      throw std::invalid_argument(
          internal::concat("relative_position_bias: the table has shape ", detail::shape_string(table_.shape()),
                           " but [num_buckets, n_heads] = [", config_.num_buckets, ", ", config_.n_heads, "]"));
    }
  }

  /// A layer from a table [num_buckets, n_heads] of any floating type, rounded once to the param type.
  /// \throws std::invalid_argument as the constructor.
  template <class W>
  [[nodiscard]] static relative_position_bias from_table(const relative_position_bias_config& config,
                                                         const xt::xtensor<W, 2>& table) {
    return relative_position_bias(config, detail::to_param<param_type>(table));
  }

  /// Entries N(0, stddev²) (Hugging Face's T5 initialises this table with stddev d_model^−½ times its
  /// factor). Deterministic for a given `rng` state and standard library.
  /// \throws std::invalid_argument as the constructor.
  template <class Rng>
  [[nodiscard]] static relative_position_bias normal(const relative_position_bias_config& config, double stddev,
                                                     Rng& rng) {
    relative_position_bias layer(config);
    std::normal_distribution<double> dist(0.0, stddev);
    for (auto& w : layer.table_) w = internal::round_to<param_type>(dist(rng));
    return layer;
  }

  /// The config.
  [[nodiscard]] const relative_position_bias_config& config() const noexcept { return config_; }
  /// The table [num_buckets, n_heads].
  [[nodiscard]] const table_type& table() const noexcept { return table_; }
  /// The table, writable (an optimiser step, a checkpoint load). Its shape must not change.
  [[nodiscard]] table_type& table() noexcept { return table_; }

  /// Calls `f("embedding", table)`.
  template <class F>
  void for_each_parameter(F&& f) {
    f(std::string_view("embedding"), table_);
  }
  /// Const form of `for_each_parameter`.
  template <class F>
  void for_each_parameter(F&& f) const {
    f(std::string_view("embedding"), table_);
  }
  /// A zero gradient [num_buckets, n_heads].
  [[nodiscard]] gradients zero_gradients() const { return gradients{xt::zeros<grad_type>(table_.shape())}; }

  /// The bucket of each distance d = key − query for `keys` key positions, at index d + keys − 1
  /// (2 keys − 1 of them).
  [[nodiscard]] std::vector<std::uint32_t> buckets(std::size_t keys) const {
    std::vector<std::uint32_t> out(keys == 0 ? 0 : 2 * keys - 1);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto d = static_cast<std::ptrdiff_t>(i) - static_cast<std::ptrdiff_t>(keys - 1);
      out[i] = static_cast<std::uint32_t>(
          relative_position_bucket(d, config_.bidirectional, config_.num_buckets, config_.max_distance));
    }
    return out;
  }

  /// The bias rows [n_heads, 2 keys − 1] in opmath for inputs of element type `In` (see the class
  /// comment), for `kernels::score_bias<A>::relative(rows, n_heads)`.
  /// \throws std::invalid_argument when keys is 0.
  template <class In = param_type>
  [[nodiscard]] std::vector<opmath_type<In>> rows(std::size_t keys) const {
    const internal::profile_scope region("nn::relative_position_bias.forward");
    using C = compute_t<P, In>;
    using A = opmath_type<In>;
    check_keys("relative_position_bias::rows", keys);
    const std::vector<std::uint32_t> bucket = buckets(keys);
    const std::size_t width = bucket.size();
    const std::size_t heads = config_.n_heads;
    std::vector<A> out(heads * width);
    for (std::size_t h = 0; h < heads; ++h) {
      for (std::size_t i = 0; i < width; ++i) {
        out[h * width + i] = internal::round_widen<C>(static_cast<A>(table_(bucket[i], h)));
      }
    }
    return out;
  }

  /// Adds the table's gradient for `d_rows` [n_heads, 2 keys − 1] (opmath, laid out as `rows`) into
  /// `grads.embedding`: entry (bucket(d), h) receives d_rows(h, d + keys − 1) for every distance d.
  /// \throws std::invalid_argument when keys is 0, d_rows is not [n_heads, 2 keys − 1], or the gradient
  ///         is not shaped like the table (checked before anything is added).
  template <class A>
  void backward(std::size_t keys, std::span<const A> d_rows, gradients& grads) const {
    const internal::profile_scope region("nn::relative_position_bias.backward");
    check_keys("relative_position_bias::backward", keys);
    const std::size_t width = 2 * keys - 1;
    const std::size_t heads = config_.n_heads;
    if (d_rows.size() != heads * width) {
      throw std::invalid_argument(internal::concat("relative_position_bias::backward: d_rows has ", d_rows.size(),
                                                   " elements but [n_heads, 2 keys - 1] = [", heads, ", ", width,
                                                   "] needs ", heads * width));
    }
    detail::check_gradient_shape("relative_position_bias::backward", "embedding", grads.embedding.shape(),
                                 table_.shape());
    const std::vector<std::uint32_t> bucket = buckets(keys);
    for (std::size_t e = 0; e < d_rows.size(); ++e) {  // e = h · width + i, row by row
      grads.embedding(bucket[e % width], e / width) += static_cast<grad_type>(d_rows[e]);
    }
  }

 private:
  static relative_position_bias_config checked(const relative_position_bias_config& c) {
    if (c.n_heads == 0) throw std::invalid_argument("relative_position_bias: n_heads is 0; set the attention heads");
    detail::check_bucketing("relative_position_bias", c.bidirectional, c.num_buckets, c.max_distance);
    return c;
  }
  static table_type zeros(const relative_position_bias_config& c) {
    table_type t = table_type::from_shape({c.num_buckets, c.n_heads});
    t.fill(param_type{});
    return t;
  }
  static void check_keys(const char* where, std::size_t keys) {
    if (keys == 0) throw std::invalid_argument(internal::concat(where, ": keys is 0; the rows need at least one key"));
  }

  relative_position_bias_config config_;
  table_type table_;
};

namespace detail {
template <>
inline constexpr std::string_view layer_name<relative_position_bias> = "mixprec::nn::relative_position_bias";
}  // namespace detail

/// relative_position_bias, T5's relative position bias, with its policy taken from the `policy_scope` live at
/// construction: one of the listed `Ps...` (nn/from_scope.hpp). Constructed with `relative_position_bias<P>`'s
/// constructor arguments, optionally preceded by `compute_dtype(...)`, or with `from_factory`.
/// Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps>
class relative_position_bias<from_scope<Ps...>> : public detail::scoped_layer<relative_position_bias, Ps...> {
 public:
  using detail::scoped_layer<relative_position_bias, Ps...>::scoped_layer;
};

}  // namespace mixprec::nn
