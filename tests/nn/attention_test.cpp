// Tests of nn/attention.hpp against a float64 reference attention written here with plain loops
// (projections, RoPE, scores q·k / sqrt(d), masks, softmax over all keys at once, weighted sum, output
// projection), which also propagates magnitudes to give each output a first-order error scale.
#include <catch2/catch.hpp>
#include <xtensor/xview.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention_reference.hpp"
#include "mixprec/arch/isa.hpp"
#include "mixprec/core.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/nn/alibi.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/error_bound.hpp"
#include "mixprec/nn/relative_position_bias.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"
#include "support/allocation_counter.hpp"
#include "support/gradcheck.hpp"

namespace attention_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;
using mixprec::promote;
namespace nn = mixprec::nn;
namespace kernels = mixprec::kernels;
using Catch::Matchers::Contains;

namespace {

using namespace layer_tests;  // NOLINT(google-build-using-namespace): test support

/// `x` rounded to the real type C, as a double.
template <class C>
double round_to(double x) {
  if constexpr (std::is_same_v<C, double>) {
    return x;
  } else if constexpr (std::is_same_v<C, float>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(static_cast<C>(x));
  }
}

// ---------------------------------------------------------------------------------------------
// Building layers and inputs.
// ---------------------------------------------------------------------------------------------

template <class P>
nn::dense<P> random_projection(std::size_t in, std::size_t out, double gain, bool bias, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, gain / std::sqrt(static_cast<double>(in)));
  auto wt = xt::xtensor<double, 2>::from_shape({in, out});
  for (auto& e : wt) e = normal(rng);
  if (!bias) return nn::dense<P>::from_weights(wt, nn::weight_layout::in_out);
  std::normal_distribution<double> small(0.0, 0.2);
  auto b = xt::xtensor<double, 1>::from_shape({out});
  for (auto& e : b) e = small(rng);
  return nn::dense<P>::from_weights(wt, b, nn::weight_layout::in_out);
}

/// A layer with random weights (q weights with gain 2 for a sharper softmax) and, optionally, biases.
template <class P>
nn::attention<P> random_layer(const nn::attention_config& cfg, unsigned seed, bool biases) {
  std::mt19937 rng(seed);
  const std::size_t H = cfg.n_heads, KV = cfg.n_kv_heads == 0 ? H : cfg.n_kv_heads;
  const std::size_t hd = cfg.head_dim == 0 ? cfg.d_model / H : cfg.head_dim;
  auto wq = random_projection<P>(cfg.d_model, H * hd, 2.0, biases, rng);
  auto wk = random_projection<P>(cfg.d_model, KV * hd, 1.0, biases, rng);
  auto wv = random_projection<P>(cfg.d_model, KV * hd, 1.0, biases, rng);
  auto wo = random_projection<P>(H * hd, cfg.d_model, 1.0, biases, rng);
  return nn::attention<P>(cfg, std::move(wq), std::move(wk), std::move(wv), std::move(wo));
}

template <class Param>
std::vector<double> to_doubles(const xt::xtensor<Param, 2>& a) {
  return std::vector<double>(a.begin(), a.end());
}
template <class Param>
std::vector<double> to_doubles(const std::optional<xt::xtensor<Param, 1>>& a) {
  return a ? std::vector<double>(a->begin(), a->end()) : std::vector<double>{};
}

/// The layer's stored parameters (exact values in the param type) as doubles.
template <class P>
weights64 read_weights(const nn::attention<P>& a) {
  return {to_doubles(a.wq().kernel()), to_doubles(a.wk().kernel()), to_doubles(a.wv().kernel()),
          to_doubles(a.wo().kernel()), to_doubles(a.wq().bias()),   to_doubles(a.wk().bias()),
          to_doubles(a.wv().bias()),   to_doubles(a.wo().bias())};
}

template <class T>
xt::xtensor<T, 3> random_input(std::size_t batch, std::size_t seq, std::size_t d, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto x = xt::xtensor<T, 3>::from_shape({batch, seq, d});
  for (auto& v : x) v = static_cast<T>(normal(rng));
  return x;
}

template <class T>
std::vector<double> to_doubles(const xt::xtensor<T, 3>& x) {
  std::vector<double> out;
  for (const auto& v : x) out.push_back(static_cast<double>(v));
  return out;
}

/// eps of the error model for compute type C: u_C for each rounding to C, plus float32 (or float64)
/// accumulation of up to `terms` terms (Eigen sums in any order: gamma_terms <= terms u_acc).
template <class C>
double eps_for(std::size_t terms) {
  using Acc = mixprec::accumulator_t<C>;
  return unit_roundoff<C>() + static_cast<double>(terms) * unit_roundoff<Acc>();
}

/// Safety factor on the first-order bound: each value passes through at most 4 roundings to C between
/// stages (operands x and w, the projection result, the rotation) and the weighted sum adds 2 more
/// (its result and the rounding of `a` before wo), i.e. ~4-6 eps times the magnitudes; 8 adds margin
/// for the second-order terms of exp in the half types (e^(4 * 2^-8 * |s|) - 1 is 2% above first order
/// for |s| ~ 5).
constexpr double safety = 8.0;

/// Checks every evaluated element of y against the reference: |y - ref| <= `tolerance(M, |ref|)`, the
/// layer's tolerance `nn::error_bound<In>(layer, keys)` (8 eps M + u_O |ref|).
template <class O, std::size_t N>
void check_against(const xt::xtensor<O, N>& y, const ref_out& r, const nn::attention_error_bound& tolerance,
                   const std::vector<std::size_t>& rows, std::size_t d) {
  REQUIRE(y.size() == r.y.size());
  std::vector<std::size_t> all;
  if (rows.empty()) {
    for (std::size_t i = 0; i < y.size() / d; ++i) all.push_back(i);
  }
  for (std::size_t row : rows.empty() ? all : rows) {
    for (std::size_t o = 0; o < d; ++o) {
      const std::size_t i = row * d + o;
      const double got = static_cast<double>(y.data()[i]);
      const double tol = tolerance(r.bound[i], std::abs(r.y[i]));
      INFO("row " << row << ", feature " << o << ": got " << got << ", reference " << r.y[i] << ", tolerance " << tol);
      REQUIRE(std::abs(got - r.y[i]) <= tol);
    }
  }
}

/// The same with an eps of this file's own (`eps_for`): |y - ref| <= safety eps M + u_O |ref|.
template <class O, std::size_t N>
void check_against(const xt::xtensor<O, N>& y, const ref_out& r, double eps, const std::vector<std::size_t>& rows,
                   std::size_t d) {
  const double u_o = std::is_same_v<O, float> || std::is_same_v<O, double> ? 0.0 : unit_roundoff<O>();
  check_against(y, r, nn::attention_error_bound{safety * eps, u_o}, rows, d);
}

/// The configuration most tests use: GQA (4 query heads on 2 kv heads), causal, adjacent RoPE, tiny
/// tiles (3 queries x 2 keys) so that every tiling path runs on short sequences.
nn::attention_config small_config() {
  return {.d_model = 16,
          .n_heads = 4,
          .n_kv_heads = 2,
          .head_dim = 4,
          .causal = true,
          .rotary = nn::rotary_config{.layout = nn::rope_layout::adjacent_pairs},
          .query_block = 3,
          .key_block = 2};
}

/// Tokens [t0, t1) of a [batch, seq, ...] array (copied).
template <class T, std::size_t N>
xt::xtensor<T, N> tokens(const xt::xtensor<T, N>& a, std::size_t t0, std::size_t t1) {
  auto shape = a.shape();
  const std::size_t batch = shape[0], seq = shape[1], inner = a.size() / std::max<std::size_t>(batch * seq, 1);
  shape[1] = t1 - t0;
  auto out = xt::xtensor<T, N>::from_shape(shape);
  for (std::size_t b = 0; b < batch; ++b) {
    std::copy_n(a.data() + (b * seq + t0) * inner, (t1 - t0) * inner, out.data() + b * (t1 - t0) * inner);
  }
  return out;
}

/// Writes `part` [batch, n, ...] into tokens [t0, t0 + n) of `a` [batch, seq, ...].
template <class T, std::size_t N>
void put_tokens(xt::xtensor<T, N>& a, const xt::xtensor<T, N>& part, std::size_t t0) {
  const std::size_t batch = a.shape()[0], seq = a.shape()[1], n = part.shape()[1];
  const std::size_t inner = a.size() / std::max<std::size_t>(batch * seq, 1);
  for (std::size_t b = 0; b < batch; ++b) {
    std::copy_n(part.data() + b * n * inner, n * inner, a.data() + (b * seq + t0) * inner);
  }
}

template <class T, std::size_t N>
double max_abs_difference(const xt::xtensor<T, N>& a, const xt::xtensor<T, N>& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::abs(static_cast<double>(a.data()[i]) - static_cast<double>(b.data()[i])));
  }
  return m;
}

template <class P>
using input_for = std::conditional_t<std::is_same_v<P, p_f64>, double, float>;

}  // namespace

TEMPLATE_LIST_TEST_CASE("attention matches a float64 reference for every policy", "[nn][attention]", all_policies) {
  using P = TestType;
  const auto cfg = small_config();
  const auto layer = random_layer<P>(cfg, 1, /*biases=*/true);
  const std::size_t batch = 2, seq = 7;
  // Row 1 is left-padded by two tokens: its queries 0 and 1 see no real key (causal) and output zeros.
  auto mask = xt::xtensor<bool, 2>::from_shape({batch, seq});
  mask.fill(true);
  mask(1, 0) = mask(1, 1) = false;
  const std::vector<char> valid(mask.begin(), mask.end());
  // Inputs of float under every policy (double under float64), and of bfloat16, float16 and double where
  // they make a case of their own (input_case, policies.hpp).
  for_each_type<float, bfloat16, float16, double>([&]<class In>() {
    constexpr bool f64_input = std::is_same_v<P, p_f64> && std::is_same_v<In, double>;
    if constexpr ((input_case<P, In> && !std::is_same_v<P, p_f64>) || f64_input) {
      const mixprec::dtype input = mixprec::dtype_of_v<In>;
      CAPTURE(input);
      const auto x = random_input<In>(batch, seq, cfg.d_model, 2);
      const auto y = layer(x, mask);
      const auto r = reference_attention(cfg, batch, seq, to_doubles(x), read_weights(layer), valid, nullptr);
      check_against(y, r, nn::error_bound<In>(layer, seq), {}, cfg.d_model);
      for (const auto& e : y) CHECK(std::isfinite(static_cast<double>(e)));

      // Without a mask, padding tokens are attended like any other.
      const auto y_all = layer(x);
      const auto r_all = reference_attention(cfg, batch, seq, to_doubles(x), read_weights(layer), {}, nullptr);
      check_against(y_all, r_all, nn::error_bound<In>(layer, seq), {}, cfg.d_model);
    }
  });
}

TEMPLATE_LIST_TEST_CASE(
    "attention with T5's relative position bias or ALiBi matches a float64 reference for every policy",
    "[nn][attention][score_bias]", all_policies) {
  using P = TestType;
  using In = input_for<P>;
  using A = mixprec::accumulator_t<nn::compute_t<P, In>>;
  const std::size_t batch = 2, seq = 9, heads = 4;
  auto mask = xt::xtensor<bool, 2>::from_shape({batch, seq});
  mask.fill(true);
  mask(1, 0) = mask(1, 1) = false;
  const std::vector<char> valid(mask.begin(), mask.end());
  const auto x = random_input<In>(batch, seq, 16, 3);
  for (const bool causal : {true, false}) {
    INFO("causal " << causal);
    // T5's unscaled scores without RoPE (the bias is the position encoding), and scaled ones with RoPE.
    for (const bool t5 : {true, false}) {
      INFO("T5 (unscaled, no RoPE) " << t5);
      nn::attention_config cfg = small_config();
      cfg.causal = causal;
      if (t5) {
        cfg.rotary.reset();
        cfg.scale = 1.0;
      }
      const auto layer = random_layer<P>(cfg, 5, /*biases=*/false);
      // T5: a table of random entries (bucket count small enough that the log range is used).
      nn::relative_position_bias<P> t5_bias(
          {.n_heads = heads, .num_buckets = 8, .max_distance = 6, .bidirectional = !causal});
      const auto entries = gradcheck::uniform(t5_bias.table().size(), 6, -2.0, 2.0);
      for (std::size_t i = 0; i < entries.size(); ++i) {
        t5_bias.table().data()[i] = typename P::param_type(static_cast<float>(entries[i]));
      }
      const std::vector<double> slopes = nn::alibi_slopes(heads);
      for (const bool alibi : {false, true}) {
        INFO("ALiBi " << alibi);
        const std::vector<A> rows = alibi ? nn::alibi_bias<A>(slopes, seq) : t5_bias.template rows<In>(seq);
        // The reference reads the same values as a dense [batch, heads, seq, seq] bias.
        std::vector<double> dense(batch * heads * seq * seq);
        for (std::size_t b = 0; b < batch; ++b) {
          for (std::size_t h = 0; h < heads; ++h) {
            for (std::size_t t = 0; t < seq; ++t) {
              for (std::size_t j = 0; j < seq; ++j) {
                dense[((b * heads + h) * seq + t) * seq + j] =
                    static_cast<double>(rows[h * (2 * seq - 1) + j + seq - 1 - t]);
              }
            }
          }
        }
        const auto y = layer(x, mask, kernels::score_bias<A>::relative(rows, heads));
        const auto r =
            reference_attention(cfg, batch, seq, to_doubles(x), read_weights(layer), valid, nullptr, {}, &dense);
        check_against(y, r, nn::error_bound<In>(layer, seq), {}, cfg.d_model);
        // The bias matters: the layer is at least 4 times farther from the unbiased reference than from
        // the biased one (the bound itself is loose under 16-bit compute: docs/layers.md).
        const auto r_none = reference_attention(cfg, batch, seq, to_doubles(x), read_weights(layer), valid, nullptr);
        double to_biased = 0.0, to_unbiased = 0.0;
        for (std::size_t i = 0; i < y.size(); ++i) {
          to_biased = std::max(to_biased, std::abs(static_cast<double>(y.data()[i]) - r.y[i]));
          to_unbiased = std::max(to_unbiased, std::abs(static_cast<double>(y.data()[i]) - r_none.y[i]));
        }
        CHECK(to_unbiased > 4 * to_biased);
      }
    }
  }
}

TEST_CASE("a T5 decoder's self-attention decodes token by token with its relative bias as one pass does",
          "[nn][attention][score_bias]") {
  // The rows for a cache of n keys: a decoding step passes the rows of cache.size() + 1 keys, its query
  // at the last position. float64: the step's GEMV and the pass's GEMM differ by reassociation only.
  using P = p_f64;
  nn::attention_config cfg = small_config();
  cfg.rotary.reset();
  cfg.scale = 1.0;
  const auto layer = random_layer<P>(cfg, 7, /*biases=*/false);
  nn::relative_position_bias<P> bias({.n_heads = 4, .num_buckets = 6, .max_distance = 5, .bidirectional = false});
  const auto entries = gradcheck::uniform(bias.table().size(), 8, -2.0, 2.0);
  std::copy(entries.begin(), entries.end(), bias.table().begin());
  const std::size_t batch = 2, seq = 8;
  const auto x = random_input<double>(batch, seq, cfg.d_model, 9);
  const std::vector<double> all_rows = bias.rows<double>(seq);
  const auto y = layer(x, nn::no_key_mask, kernels::score_bias<double>::relative(all_rows, 4));
  auto cache = layer.make_cache<double>(batch, seq);
  for (std::size_t t = 0; t < seq; ++t) {
    const std::vector<double> rows = bias.rows<double>(t + 1);
    const auto step = layer(tokens(x, t, t + 1), cache, kernels::score_bias<double>::relative(rows, 4));
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t e = 0; e < cfg.d_model; ++e) {
        CHECK(step(b, 0, e) == Approx(y(b, t, e)).epsilon(1e-12).margin(1e-12));
      }
    }
  }
  // The rows must cover every cached key: a second step with the rows of one key is refused, and the
  // refused call appends nothing.
  cache.clear();
  (void)layer(tokens(x, 0, 1), cache, kernels::score_bias<double>::relative(bias.rows<double>(1), 4));
  const std::vector<double> short_rows = bias.rows<double>(1);
  CHECK_THROWS_WITH(layer(tokens(x, 1, 2), cache, kernels::score_bias<double>::relative(short_rows, 4)),
                    Contains("[heads, 2 keys - 1] = [4, 3]"));
  CHECK(cache.size() == 1);
}

// ---------------------------------------------------------------------------------------------
// The same roundings as the layer (issue 12): a float64 reference that rounds to C where the layer
// does (same_roundings_attention in attention_reference.hpp), so that only float32 arithmetic is left
// and the bound is tight; with planted bugs to prove the test sees them.
// ---------------------------------------------------------------------------------------------

namespace {

template <class P>
attention_roundings roundings_of(kernels::softmax_precision softmax) {
  using C = nn::compute_t<P, float>;
  using O = nn::output_t<P, float>;
  return {&round_as<C>, &round_as<O>, softmax == kernels::softmax_precision::compute && !std::is_same_v<C, float>};
}

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "attention equals a reference with its roundings up to float32 arithmetic, and sees planted bugs",
    "[nn][attention][same_roundings]", compute16_policies) {
  // The bound of each output (attention_reference.hpp) holds only what float32 arithmetic leaves: sums
  // (gamma_n of the magnitudes), exp, RoPE's float cos and sin, each carried to the output through the
  // magnitudes it meets, and, where a value the layer rounds to C (or O) lies so close to a rounding
  // boundary that float32 may land on either side, one ulp there, carried on the same way. Most outputs
  // have a bound of 0 when O is 16 bits: no boundary within reach, so the layer must give the reference's
  // value exactly.
  //
  // Each planted bug is a reference computed with it: the layer must be outside its bound somewhere, and
  // its separation from the correct reference (|bugged - correct| / (both bounds)) must exceed 1, so a
  // layer with that bug cannot pass. (A looser bound of the first-order model, nn::error_bound, passes
  // every one of these bugs for bfloat16 compute.)
  using P = TestType;
  const std::size_t batch = 2, seq = 7;
  auto mask = xt::xtensor<bool, 2>::from_shape({batch, seq});
  mask.fill(true);
  mask(1, 0) = mask(1, 1) = false;  // left padding: queries 0 and 1 of row 1 see no key
  const std::vector<char> valid(mask.begin(), mask.end());
  for (const auto softmax : {kernels::softmax_precision::opmath, kernels::softmax_precision::compute}) {
    for (const auto layout : {nn::rope_layout::adjacent_pairs, nn::rope_layout::half_split}) {
      auto cfg = small_config();  // 4 heads on 2 kv heads, causal, tiles of 3 queries x 2 keys
      cfg.rotary = nn::rotary_config{.layout = layout};
      cfg.softmax = softmax;
      const bool in_c = softmax == kernels::softmax_precision::compute;
      const auto layer = random_layer<P>(cfg, 91, /*biases=*/true);
      const auto x = random_input<float>(batch, seq, cfg.d_model, 92);
      const auto y = layer(x, mask);
      const auto xs = to_doubles(x);
      const weights64 w = read_weights(layer);
      const auto rd = roundings_of<P>(softmax);
      const auto ref = same_roundings_attention(cfg, batch, seq, xs, w, valid, rd);
      const comparison c = compare_with(y, ref.y, ref.bound);
      INFO("softmax in C " << in_c << ", half_split " << (layout == nn::rope_layout::half_split) << ": " << c.outside
                           << " of " << c.elements << " outside, worst error / bound " << c.worst << ", " << c.exact
                           << " exact");
      for (std::size_t i = 0; i < y.size(); ++i) {
        INFO("element " << i << ": got " << static_cast<double>(y.data()[i]) << ", reference " << ref.y[i] << ", bound "
                        << ref.bound[i]);
        REQUIRE(std::abs(static_cast<double>(y.data()[i]) - ref.y[i]) <= ref.bound[i]);
      }

      std::vector<std::pair<const char*, attention_bugs>> bugs{{"kv head h % n_kv_heads", {.kv_head_modulo = true}},
                                                               {"RoPE layouts swapped", {.swapped_rope_layout = true}},
                                                               {"sums accumulated in C", {.accumulate_in_c = true}}};
      if (in_c) {
        bugs.push_back({"weights not rounded to C", {.unrounded_weights = true}});
        bugs.push_back({"probabilities e_j / l rounded instead of e_j", {.rounded_probabilities = true}});
      }
      for (const auto& [name, bug] : bugs) {
        const auto bugged = same_roundings_attention(cfg, batch, seq, xs, w, valid, rd, bug);
        const comparison b =
            separate(compare_with(y, bugged.y, bugged.bound), ref.y, ref.bound, bugged.y, bugged.bound);
        INFO("planted bug: " << name << ": the layer is outside its bound at " << b.outside << " of " << b.elements
                             << " elements (worst error / bound " << b.worst << "); separation " << b.separation);
        CHECK(b.outside > 0);
        CHECK(b.separation > 1.0);
      }
    }
  }
}

TEST_CASE("attention's probed call hands the context and the output, same bits", "[nn][attention][probe]") {
  const auto cfg = small_config();
  const auto layer = random_layer<p_f32>(cfg, 3, /*biases=*/true);
  const std::size_t batch = 2, seq = 7, width = cfg.n_heads * cfg.head_dim;
  const auto x = random_input<float>(batch, seq, cfg.d_model, 4);
  auto mask = xt::xtensor<bool, 2>::from_shape({batch, seq});
  mask.fill(true);
  mask(1, 0) = false;
  mixprec::diagnostics::recording_probe probe(mixprec::diagnostics::capture::values);
  const auto y = layer(x, nn::no_key_mask, probe, "attn");
  CHECK(static_cast<bool>(y == layer(x)));
  CHECK(static_cast<bool>(layer(x, mask, probe, "masked") == layer(x, mask)));
  REQUIRE(probe.sites().size() == 4);
  const auto& context = probe.at("attn.context");
  const auto& out = probe.at("attn.out");
  REQUIRE(context.values.size() == batch * seq * width);
  REQUIRE(out.values.size() == y.size());
  for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(out.values[i] == static_cast<double>(y.data()[i]));
  // The output is the context through wo: y = context · wo + bo, summed here in float64; float32
  // accumulation of `width` terms stays within width · 2^-24 of the sum of magnitudes.
  const weights64 w = read_weights(layer);
  for (std::size_t r = 0; r < batch * seq; ++r) {
    for (std::size_t o = 0; o < cfg.d_model; ++o) {
      double sum = w.bo[o], magnitude = std::abs(w.bo[o]);
      for (std::size_t k = 0; k < width; ++k) {
        sum += context.values[r * width + k] * w.wo[k * cfg.d_model + o];
        magnitude += std::abs(context.values[r * width + k] * w.wo[k * cfg.d_model + o]);
      }
      REQUIRE(std::abs(static_cast<double>(y.data()[r * cfg.d_model + o]) - sum) <=
              static_cast<double>(width + 1) * 0x1p-24 * magnitude);
    }
  }
}

TEST_CASE("attention's biased and cross-attention probed calls hand the same sites, same bits",
          "[nn][attention][probe][cross]") {
  nn::attention_config cfg = small_config();
  cfg.rotary.reset();
  cfg.causal = false;
  const auto layer = random_layer<p_f32>(cfg, 13, /*biases=*/false);
  const auto x = random_input<float>(2, 5, cfg.d_model, 14);
  const auto context = random_input<float>(2, 6, cfg.d_model, 15);
  const std::vector<float> rows = nn::alibi_bias<float>(nn::alibi_slopes(cfg.n_heads), 5);
  const auto bias = kernels::score_bias<float>::relative(rows, cfg.n_heads);
  mixprec::diagnostics::recording_probe probe(mixprec::diagnostics::capture::values);
  const auto y = layer(x, nn::no_key_mask, bias, probe, "self");
  CHECK(static_cast<bool>(y == layer(x, nn::no_key_mask, bias)));
  const auto yc = layer.cross(x, context, nn::no_key_mask, probe, "cross");
  CHECK(static_cast<bool>(yc == layer.cross(x, context, nn::no_key_mask)));
  REQUIRE(probe.sites().size() == 4);
  CHECK(probe.at("self.context").values.size() == 2 * 5 * cfg.n_heads * cfg.head_dim);
  CHECK(probe.at("cross.context").values.size() == 2 * 5 * cfg.n_heads * cfg.head_dim);
  for (std::size_t i = 0; i < yc.size(); ++i) REQUIRE(probe.at("cross.out").values[i] == yc.data()[i]);
}

TEST_CASE("attention output and cache dtypes follow the policy, including Flax's promote cases", "[nn][attention]") {
  nn::attention_config cfg{.d_model = 8, .n_heads = 2};
  const auto x32 = random_input<float>(1, 3, 8, 1);
  const auto xbf = random_input<bfloat16>(1, 3, 8, 1);
  const auto x64 = random_input<double>(1, 3, 8, 1);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_f32>(cfg)(x32)), xt::xtensor<float, 3>>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_c_bf16>(cfg)(x32)), xt::xtensor<float, 3>>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_c_f16>(cfg)(x32)), xt::xtensor<float, 3>>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_bf16>(cfg)(x32)), xt::xtensor<bfloat16, 3>>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_f64>(cfg)(x32)), xt::xtensor<double, 3>>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_promote>(cfg)(x32)), xt::xtensor<float, 3>>);
  // Flax: bf16 input with float32 params and dtype=None computes and returns float32.
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_promote>(cfg)(xbf)), xt::xtensor<float, 3>>);
  // float64 input is never truncated under promote.
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_promote>(cfg)(x64)), xt::xtensor<double, 3>>);
  // An explicit compute dtype of bf16 (output defaults to compute) returns bf16.
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<policy<float, bfloat16>>(cfg)(x32)), xt::xtensor<bfloat16, 3>>);
  // The cache mirrors the keys and values: the compute type.
  STATIC_REQUIRE(std::is_same_v<nn::attention<p_c_bf16>::cache_type<float>, nn::kv_cache<bfloat16>>);
  STATIC_REQUIRE(std::is_same_v<nn::attention<p_c_f16>::cache_type<float>, nn::kv_cache<float16>>);
  STATIC_REQUIRE(std::is_same_v<nn::attention<p_f32>::cache_type<float>, nn::kv_cache<float>>);
  STATIC_REQUIRE(std::is_same_v<nn::attention<p_f64>::cache_type<float>, nn::kv_cache<double>>);
  STATIC_REQUIRE(std::is_same_v<nn::attention<p_promote>::cache_type<bfloat16>, nn::kv_cache<float>>);
  STATIC_REQUIRE(std::is_same_v<nn::attention<p_promote>::cache_type<double>, nn::kv_cache<double>>);
  // The rank of the input is kept.
  const auto x2 = xt::xtensor<float, 2>::from_shape({3, 8});
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_c_bf16>(cfg)(x2)), xt::xtensor<float, 2>>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::attention<p_c_bf16>(cfg)(xt::xarray<float>())), xt::xarray<float>>);
}

TEST_CASE("attention under promote matches the reference for bfloat16 and float64 inputs", "[nn][attention]") {
  const auto cfg = small_config();
  const auto layer = random_layer<p_promote>(cfg, 3, true);
  const auto xbf = random_input<bfloat16>(2, 6, cfg.d_model, 4);
  const auto ybf = layer(xbf);  // computed in float32 (bf16 inputs are exact in float)
  check_against(ybf, reference_attention(cfg, 2, 6, to_doubles(xbf), read_weights(layer), {}, nullptr),
                nn::error_bound<bfloat16>(layer, 6), {}, cfg.d_model);
  const auto x64 = random_input<double>(2, 6, cfg.d_model, 5);
  const auto y64 = layer(x64);  // computed in float64: float64-level agreement
  check_against(y64, reference_attention(cfg, 2, 6, to_doubles(x64), read_weights(layer), {}, nullptr),
                nn::error_bound<double>(layer, 6), {}, cfg.d_model);
}

TEST_CASE("grouped-query attention: query head h reads kv head h / (n_heads / n_kv_heads)", "[nn][attention]") {
  // float64 policy: the agreement is at float64 level, so a wrong head mapping (e.g. h % n_kv_heads)
  // or a wrong head slice fails by orders of magnitude.
  for (auto [heads, kv_heads] :
       std::vector<std::pair<std::size_t, std::size_t>>{{4, 4}, {4, 2}, {4, 1}, {6, 3}, {8, 4}}) {
    nn::attention_config cfg{.d_model = 12,
                             .n_heads = heads,
                             .n_kv_heads = kv_heads,
                             .head_dim = 4,
                             .causal = true,
                             .query_block = 2,
                             .key_block = 3};
    const auto layer = random_layer<p_f64>(cfg, 7, false);
    CHECK(layer.config().n_kv_heads == kv_heads);
    const auto x = random_input<double>(2, 5, 12, 8);
    INFO("n_heads " << heads << ", n_kv_heads " << kv_heads);
    check_against(layer(x), reference_attention(cfg, 2, 5, to_doubles(x), read_weights(layer), {}, nullptr),
                  nn::error_bound<double>(layer, 5), {}, 12);
  }
}

TEST_CASE("both rotary layouts, and custom theta, match the reference, and each changes the output",
          "[nn][attention]") {
  std::vector<xt::xtensor<double, 3>> outputs;
  const std::vector<std::optional<nn::rotary_config>> ropes{
      std::nullopt, nn::rotary_config{.layout = nn::rope_layout::adjacent_pairs},
      nn::rotary_config{.layout = nn::rope_layout::half_split},
      nn::rotary_config{.layout = nn::rope_layout::half_split, .theta = 500000.0}};
  for (const auto& rope : ropes) {
    nn::attention_config cfg{.d_model = 16, .n_heads = 2, .head_dim = 8, .causal = true, .rotary = rope};
    const auto layer = random_layer<p_f64>(cfg, 9, false);
    REQUIRE(layer.rotary().has_value() == rope.has_value());
    const auto x = random_input<double>(1, 9, 16, 10);
    outputs.push_back(layer(x));
    check_against(outputs.back(), reference_attention(cfg, 1, 9, to_doubles(x), read_weights(layer), {}, nullptr),
                  nn::error_bound<double>(layer, 9), {}, 16);
  }
  for (std::size_t a = 0; a < outputs.size(); ++a) {
    for (std::size_t b = a + 1; b < outputs.size(); ++b) {
      // Token 0 has position 0 (no rotation) in every variant; later tokens differ.
      CHECK(max_abs_difference(outputs[a], outputs[b]) > 1e-4);
    }
  }
}

TEST_CASE("causal and padding masks: every combination matches the reference, fully masked rows give the bias",
          "[nn][attention]") {
  const std::size_t batch = 2, seq = 6;
  auto mask = xt::xtensor<bool, 2>::from_shape({batch, seq});
  mask.fill(true);
  mask(0, 4) = mask(0, 5) = false;  // row 0: right padding
  mask(1, 0) = mask(1, 1) = false;  // row 1: left padding
  const std::vector<char> valid(mask.begin(), mask.end());
  for (bool causal : {false, true}) {
    for (bool padded : {false, true}) {
      nn::attention_config cfg{.d_model = 8, .n_heads = 2, .causal = causal, .query_block = 4, .key_block = 4};
      const auto layer = random_layer<p_f32>(cfg, 11, true);
      const auto x = random_input<float>(batch, seq, 8, 12);
      const auto y = padded ? layer(x, mask) : layer(x);
      INFO("causal " << causal << ", padding mask " << padded);
      check_against(y,
                    reference_attention(cfg, batch, seq, to_doubles(x), read_weights(layer),
                                        padded ? valid : std::vector<char>{}, nullptr),
                    nn::error_bound<float>(layer, seq), {}, 8);
      if (causal && padded) {
        // Queries 0 and 1 of row 1 see only padding keys: the attended heads are exactly 0 (not NaN), so
        // y is exactly the output bias.
        for (std::size_t t : {0u, 1u}) {
          for (std::size_t o = 0; o < 8; ++o) CHECK(y(1, t, o) == (*layer.wo().bias())(o));
        }
      }
    }
  }
}

TEST_CASE("a fully masked input gives zeros (no bias), never NaN", "[nn][attention]") {
  nn::attention_config cfg{.d_model = 8, .n_heads = 2};
  const auto layer = random_layer<p_c_bf16>(cfg, 13, false);
  const auto x = random_input<float>(1, 4, 8, 14);
  auto mask = xt::xtensor<bool, 2>::from_shape({1, 4});
  mask.fill(false);
  const auto y = layer(x, mask);
  for (float e : y) CHECK(e == 0.0f);
}

TEST_CASE("attention with a cache, decoding one token at a time, equals attention over the full sequence",
          "[nn][attention]") {
  // The cached path runs the same code on the same values except for summation order: a projection of
  // one row goes through Eigen's GEMV, of many rows through its GEMM, and a score tile of one query is a
  // GEMV too; Eigen may order the float32 sums differently (reassociation). Key tiles start at absolute
  // positions (multiples of key_block) in both cases, so each query sees the same tiles. Hence: float64
  // agrees to float64 reassociation, float32 to float32 reassociation, both tiny next to the reference
  // bound; with bfloat16 compute a reassociated sum may round q, k or v to the neighbouring bfloat16,
  // so there both runs are checked against the reference.
  const std::size_t batch = 2, seq = 9;
  auto mask = xt::xtensor<bool, 2>::from_shape({batch, seq});
  mask.fill(true);
  mask(1, 0) = mask(1, 1) = mask(1, 2) = false;  // left padding in row 1: recorded in the cache
  const std::vector<char> valid(mask.begin(), mask.end());

  auto run = [&]<class P>(P, double tol_scale) {
    using In = input_for<P>;
    using C = nn::compute_t<P, In>;
    const auto cfg = small_config();
    const auto layer = random_layer<P>(cfg, 21, true);
    const auto x = random_input<In>(batch, seq, cfg.d_model, 22);
    const auto full = layer(x, mask);
    const auto r = reference_attention(cfg, batch, seq, to_doubles(x), read_weights(layer), valid, nullptr);

    for (std::size_t prefill : {0u, 1u, 4u}) {
      auto cache = layer.template make_cache<In>(batch, 16);
      STATIC_REQUIRE(std::is_same_v<typename decltype(cache)::value_type, C>);
      auto y = xt::xtensor<nn::output_t<P, In>, 3>::from_shape({batch, seq, cfg.d_model});
      std::size_t t = 0;
      if (prefill > 0) {
        put_tokens(y, layer(tokens(x, 0, prefill), cache, tokens(mask, 0, prefill)), 0);
        t = prefill;
      }
      for (; t < seq; ++t) {
        put_tokens(y, layer(tokens(x, t, t + 1), cache, tokens(mask, t, t + 1)), t);
        CHECK(cache.size() == t + 1);
      }
      INFO("prefill " << prefill);
      if (tol_scale > 0) {
        for (std::size_t i = 0; i < y.size(); ++i) {
          const double d = std::abs(static_cast<double>(y.data()[i]) - static_cast<double>(full.data()[i]));
          INFO("element " << i);
          REQUIRE(d <= tol_scale * r.bound[i]);
        }
      }
      check_against(y, r, nn::error_bound<In>(layer, seq), {}, cfg.d_model);
    }
  };
  // Reassociation of sums of at most K = 16 (projections) and key_block + head_dim terms: gamma_K per
  // stage, 4 stages; K + 8 terms times u_acc.
  run(p_f64{}, 4 * 24 * unit_roundoff<double>());
  run(p_f32{}, 4 * 24 * unit_roundoff<float>());
  run(p_c_bf16{}, 0.0);
  run(p_bf16{}, 0.0);
}

namespace {

/// A cache of `batch` x `total` random keys and values for `kv_heads` heads of dimension `hd`, values
/// exact in C; some keys invalid when `padded`.
template <class C>
nn::kv_cache<C> random_cache(std::size_t batch, std::size_t kv_heads, std::size_t hd, std::size_t total, unsigned seed,
                             bool padded) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  nn::kv_cache<C> cache(batch, kv_heads, hd, total);
  std::vector<C> k(batch * total * kv_heads * hd), v(k.size());
  for (auto& e : k) e = static_cast<C>(2.0 * normal(rng));
  for (auto& e : v) e = static_cast<C>(normal(rng));
  std::unique_ptr<bool[]> valid(new bool[batch * total]);
  for (std::size_t i = 0; i < batch * total; ++i) valid[i] = !padded || (i % 7 != 3);
  cache.append(std::span<const C>(k), std::span<const C>(v), total, std::span<const bool>(valid.get(), batch * total));
  return cache;
}

/// The direct formula in float64 on the cache's values: scores of all keys at once, masks, softmax,
/// weighted sum. Returns out [batch, seq, heads, hd] and per element the scale sum_j p_j |v_j| (1 + 2 S)
/// with S = scale max_j sum_i |q_i k_ji| (the first-order error scale of scores and weights).
template <class C>
std::pair<std::vector<double>, std::vector<double>> direct_attention(const std::vector<C>& q,
                                                                     const nn::kv_cache<C>& cache, std::size_t seq,
                                                                     std::size_t heads, bool causal, double scale,
                                                                     double (*round_c)(double)) {
  const std::size_t batch = cache.batch(), hd = cache.head_dim(), total = cache.size();
  const std::size_t group = heads / cache.n_kv_heads();
  std::vector<double> out(batch * seq * heads * hd, 0.0), mag(out.size(), 0.0);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t t = 0; t < seq; ++t) {
      const std::size_t pos = total - seq + t;
      for (std::size_t h = 0; h < heads; ++h) {
        const auto keys = cache.keys(b, h / group);
        const auto values = cache.values(b, h / group);
        const C* qv = &q[((b * seq + t) * heads + h) * hd];
        std::vector<double> s(total, -std::numeric_limits<double>::infinity());
        double smag = 0.0;
        for (std::size_t j = 0; j < total; ++j) {
          if ((causal && j > pos) || !cache.is_valid(b, j)) continue;
          double dot = 0.0, m = 0.0;
          for (std::size_t i = 0; i < hd; ++i) {
            dot += static_cast<double>(qv[i]) * static_cast<double>(keys[j * hd + i]);
            m += std::abs(static_cast<double>(qv[i]) * static_cast<double>(keys[j * hd + i]));
          }
          s[j] = round_c != nullptr ? round_c(dot * scale) : dot * scale;
          smag = std::max(smag, m * scale);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        if (mx == -std::numeric_limits<double>::infinity()) continue;
        double l = 0.0;
        for (double sj : s) l += std::exp(sj - mx);
        double* o = &out[((b * seq + t) * heads + h) * hd];
        double* om = &mag[((b * seq + t) * heads + h) * hd];
        for (std::size_t j = 0; j < total; ++j) {
          double p = std::exp(s[j] - mx) / l;
          if (round_c != nullptr) p = round_c(p);
          for (std::size_t i = 0; i < hd; ++i) {
            o[i] += p * static_cast<double>(values[j * hd + i]);
            om[i] += p * std::abs(static_cast<double>(values[j * hd + i])) * (1.0 + 2.0 * smag);
          }
        }
      }
    }
  }
  return {out, mag};
}

}  // namespace

TEMPLATE_TEST_CASE("tiled online-softmax attention equals the direct formula for every tiling", "[nn][attention]",
                   float, bfloat16, double) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  const std::size_t batch = 2, total = 37, seq = 37, heads = 4, kv_heads = 2;
  // head_dim 16 with key_block 16 or 64 and 37 queries per block takes the packed path on AVX2 (keys and
  // values packed as GEMM panels, the micro-kernel's products); head_dim 8 never does.
  for (const std::size_t hd : {8u, 16u}) {
    for (bool causal : {false, true}) {
      const auto cache = random_cache<C>(batch, kv_heads, hd, total, 31, /*padded=*/true);
      std::mt19937 rng(32);
      std::normal_distribution<double> normal(0.0, 1.0);
      std::vector<C> q(batch * seq * heads * hd);
      for (auto& e : q) e = static_cast<C>(normal(rng));
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
      const auto [ref, mag] = direct_attention(q, cache, seq, heads, causal, scale, nullptr);
      // Error: scores carry (hd + 2) u_acc of their magnitude (dot product, scale), weights exp(s - m) add
      // (key_block + tiles + 4) u_acc of rescaling and summing, the weighted sum (key_block + tiles) u_acc,
      // then one rounding of the output to C. 2 (total + hd + 8) u_acc covers all the tilings below.
      const double u_c = std::is_same_v<C, A> ? 0.0 : unit_roundoff<C>();
      const double eps = 2.0 * static_cast<double>(total + hd + 8) * unit_roundoff<A>();
      // key_block 64 >= 37 keys is a single tile: the direct two-pass softmax (max, exp, sum, divide).
      for (std::size_t qb : {1u, 4u, 64u}) {
        for (std::size_t kb : {1u, 5u, 16u, 64u}) {
          nn::attention_config cfg{.d_model = heads * hd,
                                   .n_heads = heads,
                                   .n_kv_heads = kv_heads,
                                   .head_dim = hd,
                                   .causal = causal,
                                   .query_block = qb,
                                   .key_block = kb};
          std::vector<C> out(q.size());
          nn::attention_workspace<A> ws;
          nn::scaled_dot_product_attention<C>(std::span<const C>(q), cache, seq, cfg, std::span<C>(out), ws);
          INFO("head_dim " << hd << ", causal " << causal << ", query_block " << qb << ", key_block " << kb);
          for (std::size_t i = 0; i < out.size(); ++i) {
            INFO("element " << i << ": got " << static_cast<double>(out[i]) << ", direct " << ref[i]);
            REQUIRE(std::abs(static_cast<double>(out[i]) - ref[i]) <= eps * mag[i] + u_c * std::abs(ref[i]));
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("attention's packed path gives the same bits on 1, 2 and 3 threads and every SIMD level",
                   "[nn][attention]", float, bfloat16) {
  // 256 queries and keys, head_dim 16: large enough that (batch row, kv head) tasks are spread over the
  // threads (4·H·S²·D >= 4 Mi flops per thread) on the packed path; every output element is computed by
  // one task in one order, so no bit may change. Compared with a float64 direct formula too.
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  const std::size_t batch = 2, total = 256, seq = 256, heads = 4, kv_heads = 2, hd = 16;
  const auto cache = random_cache<C>(batch, kv_heads, hd, total, 41, /*padded=*/true);
  std::mt19937 rng(42);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<C> q(batch * seq * heads * hd);
  for (auto& e : q) e = static_cast<C>(normal(rng));
  for (bool causal : {false, true}) {
    const nn::attention_config cfg{
        .d_model = heads * hd, .n_heads = heads, .n_kv_heads = kv_heads, .head_dim = hd, .causal = causal};
    std::vector<std::vector<C>> outs;
    for (std::size_t threads : {1u, 2u, 3u}) {
      const std::size_t previous = mixprec::set_num_threads(threads);
      std::vector<C> out(q.size());
      nn::workspace ws;
      nn::scaled_dot_product_attention<C>(std::span<const C>(q), cache, seq, cfg, std::span<C>(out), ws);
      mixprec::set_num_threads(previous);
      outs.push_back(std::move(out));
    }
    // The AVX-512 micro-kernel (12 × 32 tiles, a read in place) and the AVX2 one (6 × 16) sum in the
    // same order: the same bits (on a CPU with AVX2 only, both runs take the AVX2 kernel).
    {
      const mixprec::isa_limit_scope avx2(mixprec::isa::avx2);
      std::vector<C> out(q.size());
      nn::workspace ws;
      nn::scaled_dot_product_attention<C>(std::span<const C>(q), cache, seq, cfg, std::span<C>(out), ws);
      outs.push_back(std::move(out));
    }
    INFO("causal " << causal << ", level " << mixprec::name(mixprec::active_isa()));
    CHECK(std::memcmp(outs[0].data(), outs[1].data(), q.size() * sizeof(C)) == 0);
    CHECK(std::memcmp(outs[0].data(), outs[2].data(), q.size() * sizeof(C)) == 0);
    if (mixprec::active_isa() >= mixprec::isa::avx2) {
      CHECK(std::memcmp(outs[0].data(), outs[3].data(), q.size() * sizeof(C)) == 0);
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const auto [ref, mag] = direct_attention(q, cache, seq, heads, causal, scale, nullptr);
    const double u_c = std::is_same_v<C, A> ? 0.0 : unit_roundoff<C>();
    const double eps = 2.0 * static_cast<double>(total + hd + 8) * unit_roundoff<A>();
    std::size_t outside = 0;
    for (std::size_t i = 0; i < q.size(); ++i) {
      if (!(std::abs(static_cast<double>(outs[0][i]) - ref[i]) <= eps * mag[i] + u_c * std::abs(ref[i]))) ++outside;
    }
    CHECK(outside == 0);
  }
}

TEST_CASE("softmax_precision::compute rounds scores and weights to the compute type, opmath does not",
          "[nn][attention]") {
  // One query q = 1.25 and two keys 80.5 and 80 (head_dim 1, scale 1), values 1 and 0: the scores are
  // 100.625 and 100. In bfloat16 (8 significant bits, spacing 0.5 in [64, 128)) 100.625 rounds to 100.5.
  // opmath: output = softmax weight of key 0 = 1 / (1 + e^-0.625) = 0.65135;
  // compute: 1 / (1 + e^-0.5) = 0.62246. Each is then rounded to bfloat16 (relative 2^-8).
  nn::kv_cache<bfloat16> cache(1, 1, 1, 2);
  const std::vector<bfloat16> k{bfloat16(80.5f), bfloat16(80.0f)}, v{bfloat16(1.0f), bfloat16(0.0f)};
  cache.append(std::span<const bfloat16>(k), std::span<const bfloat16>(v), 2);
  const std::vector<bfloat16> q{bfloat16(1.25f)};
  std::vector<bfloat16> out(1);
  nn::attention_workspace<float> ws;
  nn::attention_config cfg{.d_model = 1, .n_heads = 1, .scale = 1.0};
  // The query attends as the last position (seq 1 against 2 cached positions).
  nn::scaled_dot_product_attention<bfloat16>(std::span<const bfloat16>(q), cache, 1, cfg, std::span<bfloat16>(out), ws);
  const double opmath = 1.0 / (1.0 + std::exp(-0.625));
  CHECK(std::abs(static_cast<double>(out[0]) - opmath) <= std::ldexp(1.0, -8) * opmath);
  cfg.softmax = kernels::softmax_precision::compute;
  nn::scaled_dot_product_attention<bfloat16>(std::span<const bfloat16>(q), cache, 1, cfg, std::span<bfloat16>(out), ws);
  const double compute = 1.0 / (1.0 + std::exp(-0.5));
  CHECK(std::abs(static_cast<double>(out[0]) - compute) <= std::ldexp(1.0, -8) * compute);
}

TEST_CASE("softmax_precision::compute matches the reference that rounds scores and probabilities", "[nn][attention]") {
  auto cfg = small_config();
  cfg.softmax = kernels::softmax_precision::compute;
  const auto layer = random_layer<p_c_bf16>(cfg, 41, true);
  const auto x = random_input<float>(2, 8, cfg.d_model, 42);
  const auto y = layer(x);
  const auto r = reference_attention(cfg, 2, 8, to_doubles(x), read_weights(layer), {}, &round_to<bfloat16>);
  check_against(y, r, nn::error_bound<float>(layer, 8), {}, cfg.d_model);
  // For float32 compute the option changes nothing: bit-identical outputs.
  auto cfg32 = cfg;
  const auto l_compute = random_layer<p_f32>(cfg32, 43, false);
  cfg32.softmax = kernels::softmax_precision::opmath;
  const auto l_opmath = random_layer<p_f32>(cfg32, 43, false);
  CHECK(max_abs_difference(l_compute(x), l_opmath(x)) == 0.0);
}

TEST_CASE("a 4096-token sequence runs with scratch memory bounded by the tiles, never seq x seq",
          "[nn][attention][long]") {
  const std::size_t seq = 4096;
  nn::attention_config cfg{
      .d_model = 16, .n_heads = 2, .n_kv_heads = 1, .head_dim = 8, .causal = true, .rotary = nn::rotary_config{}};
  const auto layer = random_layer<p_c_bf16>(cfg, 51, false);
  const auto x = random_input<float>(1, seq, 16, 52);

  std::size_t peak = 0;
  std::size_t largest = 0;
  const auto y = [&] {
    const mixprec_test::allocation_counter counter;
    auto out = layer(x);
    peak = counter.peak();
    largest = counter.largest();
    return out;
  }();
  // The O(seq) buffers (q, k, v, cache, attended heads, output, matmul scratch) hold about 1.1 MB; one
  // seq x seq matrix of float scores alone would be 64 MiB, of bytes 16 MiB.
  INFO("peak live bytes " << peak << ", largest allocation " << largest);
  CHECK(largest <= seq * 16 * sizeof(float));  // nothing bigger than the output itself
  CHECK(peak < seq * seq / 4);

  // Correct at the first, a middle and the last token against the float64 reference.
  const std::vector<std::size_t> rows{0, 1, 2047, 4095};
  const auto r = reference_attention(cfg, 1, seq, to_doubles(x), read_weights(layer), {}, nullptr, rows);
  check_against(y, r, eps_for<bfloat16>(16 + 8 + 128 + seq / 128), rows, 16);
}

TEST_CASE(
    "the attention workspace holds query_block x (key_block + 2 head_dim) + 2 key_block x head_dim values, "
    "whatever the sequence length",
    "[nn][attention][long]") {
  // 64 queries (the last positions) against 512 and 4096 cached keys, bfloat16 compute: the tiles are
  // widened to float32 in the workspace.
  nn::attention_config cfg{.d_model = 16, .n_heads = 2, .n_kv_heads = 1, .head_dim = 8, .causal = true};
  std::vector<std::size_t> sizes;
  for (std::size_t total : {512u, 4096u}) {
    const auto cache = random_cache<bfloat16>(1, 1, 8, total, 53, false);
    std::vector<bfloat16> q(64 * 2 * 8, bfloat16(0.5f)), out(q.size());
    nn::attention_workspace<float> ws;
    nn::scaled_dot_product_attention<bfloat16>(std::span<const bfloat16>(q), cache, 64, cfg, std::span<bfloat16>(out),
                                               ws);
    sizes.push_back(ws.elements());
  }
  CHECK(sizes[0] == sizes[1]);
  CHECK(sizes[1] == 64 * (128 + 2 * 8) + 2 * 128 * 8 + 2 * 64);
}

TEST_CASE("llama2.c stories260K attention: [out, in] weights, adjacent RoPE, decoding one token at a time",
          "[nn][attention]") {
  // dim 64, n_heads 8, n_kv_heads 4, head_size 8, RoPE pairs (2i, 2i + 1) with theta 10000, scale
  // 1/sqrt(8), causal, no biases (karpathy/llama2.c run.c).
  nn::attention_config cfg{.d_model = 64,
                           .n_heads = 8,
                           .n_kv_heads = 4,
                           .head_dim = 8,
                           .causal = true,
                           .rotary = nn::rotary_config{.layout = nn::rope_layout::adjacent_pairs, .theta = 10000.0}};
  std::mt19937 rng(61);
  auto random_out_in = [&](std::size_t out, std::size_t in) {
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(in)));
    auto w = xt::xtensor<float, 2>::from_shape({out, in});
    for (auto& e : w) e = normal(rng);
    return w;
  };
  const auto wq = random_out_in(64, 64), wk = random_out_in(32, 64), wv = random_out_in(32, 64),
             wo = random_out_in(64, 64);
  const std::size_t steps = 20;
  const auto x = random_input<float>(1, steps, 64, 62);
  // Reference weights [in, out] from the [out, in] matrices, transposed here.
  auto transpose = [](const xt::xtensor<float, 2>& w) {
    std::vector<double> t(w.size());
    for (std::size_t o = 0; o < w.shape()[0]; ++o) {
      for (std::size_t i = 0; i < w.shape()[1]; ++i) t[i * w.shape()[0] + o] = static_cast<double>(w(o, i));
    }
    return t;
  };
  const weights64 w{transpose(wq), transpose(wk), transpose(wv), transpose(wo), {}, {}, {}, {}};
  const auto r = reference_attention(cfg, 1, steps, to_doubles(x), w, {}, nullptr);

  auto decode = [&]<class P>(P) {
    const auto layer = nn::attention<P>::from_weights(cfg, wq, wk, wv, wo, nn::weight_layout::out_in);
    auto cache = layer.template make_cache<float>(1, 512);
    auto y = xt::xtensor<float, 3>::from_shape({1, steps, 64});
    for (std::size_t pos = 0; pos < steps; ++pos) put_tokens(y, layer(tokens(x, pos, pos + 1), cache), pos);
    check_against(y, r, nn::error_bound<float>(layer, steps), {}, 64);
  };
  decode(p_f32{});
  decode(p_c_bf16{});

  SECTION("a decoding step allocates the same whatever the position (past one key tile)") {
    const auto layer = nn::attention<p_f32>::from_weights(cfg, wq, wk, wv, wo, nn::weight_layout::out_in);
    auto cache = layer.make_cache<float>(1, 512);
    const auto token = random_input<float>(1, 1, 64, 63);
    std::vector<std::size_t> counts, bytes;
    std::size_t elements = 0;
    for (std::size_t pos = 0; pos < 400; ++pos) {
      const bool measure = pos == 200 || pos == 399;
      if (measure) {
        const mixprec_test::allocation_counter counter;
        elements += layer(token, cache).size();
        counts.push_back(counter.count());
        bytes.push_back(counter.peak());
      } else {
        elements += layer(token, cache).size();
      }
    }
    CHECK(cache.size() == 400);
    CHECK(elements == 400 * 64);
    CHECK(counts[0] == counts[1]);
    CHECK(bytes[0] == bytes[1]);
    CHECK(bytes[1] < 16384);  // a few small buffers: q, k, v, scratch tiles, output
  }
}

TEST_CASE("attention accepts [seq, d_model], [batch, seq, d_model] and xt::xarray inputs alike", "[nn][attention]") {
  const auto cfg = small_config();
  const auto layer = random_layer<p_c_bf16>(cfg, 71, true);
  const auto x3 = random_input<float>(1, 5, 16, 72);
  auto x2 = xt::xtensor<float, 2>::from_shape({5, 16});
  std::copy_n(x3.data(), x3.size(), x2.data());
  const xt::xarray<float> xa = x3;
  const auto y3 = layer(x3);
  const auto y2 = layer(x2);
  const auto ya = layer(xa);
  REQUIRE(y2.shape()[0] == 5);
  REQUIRE(ya.dimension() == 3);
  for (std::size_t i = 0; i < y3.size(); ++i) {
    CHECK(y2.data()[i] == y3.data()[i]);
    CHECK(ya.data()[i] == y3.data()[i]);
  }
  // A [seq] mask for a [seq, d_model] input.
  auto m1 = xt::xtensor<bool, 1>::from_shape({5});
  m1.fill(true);
  const auto ym = layer(x2, m1);
  for (std::size_t i = 0; i < ym.size(); ++i) CHECK(ym.data()[i] == y3.data()[i]);
  // An empty sequence gives an empty output.
  const auto empty = layer(xt::xtensor<float, 3>::from_shape({2, 0, 16}));
  CHECK(empty.size() == 0);
}

TEST_CASE("attention rejects bad shapes, caches and configs with messages naming both sides", "[nn][attention]") {
  const auto cfg = small_config();  // d_model 16, 4 heads of 4, 2 kv heads
  const auto layer = random_layer<p_f32>(cfg, 81, false);
  CHECK_THROWS_WITH(layer(xt::xtensor<float, 3>::from_shape({2, 5, 15})),
                    Contains("[2, 5, 15]") && Contains("expects 16") && Contains("[16, 16]"));
  CHECK_THROWS_WITH(layer(xt::xarray<float>::from_shape({16})), Contains("[16]") && Contains("[seq, d_model]"));
  CHECK_THROWS_WITH(layer(xt::xarray<float>::from_shape({1, 2, 3, 16})), Contains("[1, 2, 3, 16]"));
  const auto x = random_input<float>(2, 5, 16, 82);
  auto bad_mask = xt::xtensor<bool, 2>::from_shape({2, 4});
  bad_mask.fill(true);
  CHECK_THROWS_WITH(layer(x, bad_mask), Contains("[2, 4]") && Contains("[2, 5, 16]") && Contains("[2, 5]"));

  auto wrong_batch = layer.make_cache<float>(3, 8);
  CHECK_THROWS_WITH(layer(x, wrong_batch), Contains("batch 3") && Contains("[2, 5, 16]") && Contains("batch 2"));
  nn::kv_cache<float> wrong_heads(2, 4, 4, 8);
  CHECK_THROWS_WITH(layer(x, wrong_heads), Contains("4 kv heads") && Contains("2 kv heads"));
  auto small = layer.make_cache<float>(2, 4);
  CHECK_THROWS_WITH(layer(x, small), Contains("5 tokens") && Contains("holds 0 of its 4"));
  CHECK(small.size() == 0);

  // Weights that do not match the config.
  const auto w16 = xt::xtensor<float, 2>::from_shape({16, 16});
  const auto w8 = xt::xtensor<float, 2>::from_shape({8, 16});
  const auto w12 = xt::xtensor<float, 2>::from_shape({12, 16});
  CHECK_NOTHROW(nn::attention<p_f32>::from_weights(cfg, w16, w8, w8, w16, nn::weight_layout::out_in));
  CHECK_THROWS_WITH(nn::attention<p_f32>::from_weights(cfg, w16, w12, w8, w16, nn::weight_layout::out_in),
                    Contains("wk") && Contains("[16, 12]") && Contains("[16, 8]"));
  CHECK_THROWS_WITH(nn::attention<p_f32>::from_weights(cfg, w16, w8, w8, w8, nn::weight_layout::out_in),
                    Contains("wo") && Contains("[16, 8]") && Contains("[16, 16]"));

  // Configs.
  CHECK_THROWS_WITH(nn::attention<p_f32>(nn::attention_config{.d_model = 16, .n_heads = 4, .n_kv_heads = 3}),
                    Contains("n_heads = 4") && Contains("n_kv_heads = 3"));
  CHECK_THROWS_WITH(nn::attention<p_f32>(nn::attention_config{.d_model = 15, .n_heads = 4}),
                    Contains("d_model = 15") && Contains("head_dim"));
  CHECK_THROWS_WITH(
      nn::attention<p_f32>(nn::attention_config{.d_model = 12, .n_heads = 4, .rotary = nn::rotary_config{}}),
      Contains("head_dim = 3") && Contains("odd"));
  CHECK_THROWS_WITH(nn::attention<p_f32>(nn::attention_config{.d_model = 16, .n_heads = 4, .key_block = 0}),
                    Contains("key_block = 0"));
  CHECK_THROWS_WITH(nn::attention<p_f32>(nn::attention_config{.d_model = 16}), Contains("n_heads is 0"));

  // The core: queries of the wrong size, more queries than cached positions.
  const auto cache = random_cache<float>(1, 2, 4, 3, 83, false);
  std::vector<float> q(5), out(5);
  nn::attention_workspace<float> ws;
  CHECK_THROWS_WITH(
      nn::scaled_dot_product_attention<float>(std::span<const float>(q), cache, 1, cfg, std::span<float>(out), ws),
      Contains("[1, 1, 4, 4]") && Contains("needs 16"));
  std::vector<float> q4(4 * 16), out4(q4.size());
  CHECK_THROWS_WITH(
      nn::scaled_dot_product_attention<float>(std::span<const float>(q4), cache, 4, cfg, std::span<float>(out4), ws),
      Contains("4 queries") && Contains("only 3"));
}

// ---------------------------------------------------------------------------------------------
// Masked keys whose keys or values are Inf or NaN (issue 12): a masked key must contribute exactly
// nothing, so the output equals, bit for bit, the output with finite values in those rows.
// ---------------------------------------------------------------------------------------------

namespace {
template <class T>
bool identical_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// A cache [batch, kv_heads, total, hd] from `seed` whose rows (b, position) listed in `bad` hold `poison`
/// in every key (`in_keys`) and/or value (`in_values`) element, in every kv head.
template <class C>
nn::kv_cache<C> poisoned_cache(std::size_t batch, std::size_t kv_heads, std::size_t hd, std::size_t total,
                               const std::vector<char>& valid,
                               const std::vector<std::pair<std::size_t, std::size_t>>& bad, double poison, bool in_keys,
                               bool in_values) {
  std::mt19937 rng(71);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<C> k(batch * total * kv_heads * hd), v(k.size());
  for (auto& e : k) e = static_cast<C>(2.0 * normal(rng));
  for (auto& e : v) e = static_cast<C>(normal(rng));
  for (const auto& [b, pos] : bad) {
    const std::size_t row = (b * total + pos) * kv_heads * hd;  // [batch, seq, kv_heads, hd]
    for (std::size_t i = 0; i < kv_heads * hd; ++i) {
      if (in_keys) k[row + i] = static_cast<C>(poison);
      if (in_values) v[row + i] = static_cast<C>(poison);
    }
  }
  std::unique_ptr<bool[]> flags(new bool[batch * total]);
  for (std::size_t i = 0; i < batch * total; ++i) flags[i] = valid[i] != 0;
  nn::kv_cache<C> cache(batch, kv_heads, hd, total);
  cache.append(std::span<const C>(k), std::span<const C>(v), total, std::span<const bool>(flags.get(), batch * total));
  return cache;
}
}  // namespace

TEMPLATE_TEST_CASE("masked keys contribute exactly nothing, even when their keys or values are Inf or NaN",
                   "[nn][attention]", float, bfloat16, double) {
  // Batch row 0 has padding at position 3; row 1 is left-padded (0, 1) and has padding at 6 and 7, a
  // whole key tile when key_block = 2. Under the causal mask, position 9 (a real token) is poisoned
  // too: queries 0..8 must not see it, queries 9 and 10 do (their outputs become non-finite when the
  // values are, which shows the poison is really there). 0 x NaN = NaN in the P.V product was the bug.
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  const std::size_t batch = 2, total = 11, heads = 4, kv_heads = 2;
  // head_dim 16 with query_block 64 (11 queries) and key_block 128 takes the packed path on AVX2.
  for (const std::size_t hd : {4u, 16u}) {
    std::vector<char> valid(batch * total, 1);
    valid[3] = 0;
    for (std::size_t pos : {0u, 1u, 6u, 7u}) valid[total + pos] = 0;
    std::mt19937 rng(72);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<C> q(batch * total * heads * hd);
    for (auto& e : q) e = static_cast<C>(normal(rng));
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    for (bool causal : {false, true}) {
      std::vector<std::pair<std::size_t, std::size_t>> bad{{0, 3}, {1, 0}, {1, 1}, {1, 6}, {1, 7}};
      if (causal) {
        bad.emplace_back(0, 9);
        bad.emplace_back(1, 9);
      }
      const auto clean = poisoned_cache<C>(batch, kv_heads, hd, total, valid, {}, 0.0, false, false);
      for (auto [qb, kb] : std::vector<std::pair<std::size_t, std::size_t>>{{3, 2}, {1, 1}, {4, 5}, {64, 128}}) {
        nn::attention_config cfg{.d_model = heads * hd,
                                 .n_heads = heads,
                                 .n_kv_heads = kv_heads,
                                 .head_dim = hd,
                                 .causal = causal,
                                 .query_block = qb,
                                 .key_block = kb};
        nn::attention_workspace<A> ws;
        std::vector<C> expected(q.size());
        nn::scaled_dot_product_attention<C>(std::span<const C>(q), clean, total, cfg, std::span<C>(expected), ws);
        for (double poison : {nan, inf, -inf}) {
          for (int where = 0; where < 3; ++where) {  // values, keys, both
            const bool in_keys = where != 0, in_values = where != 1;
            const auto cache = poisoned_cache<C>(batch, kv_heads, hd, total, valid, bad, poison, in_keys, in_values);
            std::vector<C> out(q.size());
            nn::scaled_dot_product_attention<C>(std::span<const C>(q), cache, total, cfg, std::span<C>(out), ws);
            INFO("head_dim " << hd << ", causal " << causal << ", query_block " << qb << ", key_block " << kb
                             << ", poison " << poison
                             << (where == 0   ? " in values"
                                 : where == 1 ? " in keys"
                                              : " in keys and values"));
            for (std::size_t b = 0; b < batch; ++b) {
              for (std::size_t t = 0; t < total; ++t) {
                for (std::size_t i = 0; i < heads * hd; ++i) {
                  const std::size_t at = (b * total + t) * heads * hd + i;
                  INFO("batch " << b << ", query " << t << ", element " << i << ": got " << static_cast<double>(out[at])
                                << ", with finite rows " << static_cast<double>(expected[at]));
                  if (causal && t >= 9) {
                    if (in_values) REQUIRE_FALSE(std::isfinite(static_cast<double>(out[at])));
                  } else {
                    REQUIRE(identical_bits(out[at], expected[at]));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("attention: NaN in the inputs of padding tokens never reaches the real tokens' outputs",
                   "[nn][attention]", p_f32, p_c_bf16, p_f64) {
  // Hugging Face batches carry arbitrary data at padded positions; here it is NaN. The k and v
  // projections of those tokens are NaN, and the padding mask must keep them out of every real query,
  // with and without the causal mask: the real tokens' outputs equal those with zeros there, bit for bit.
  using P = TestType;
  using In = input_for<P>;
  for (bool causal : {true, false}) {
    auto cfg = small_config();
    cfg.causal = causal;
    const auto layer = random_layer<P>(cfg, 81, /*biases=*/true);
    const std::size_t batch = 2, seq = 7;
    auto x = random_input<In>(batch, seq, cfg.d_model, 82);
    auto mask = xt::xtensor<bool, 2>::from_shape({batch, seq});
    mask.fill(true);
    mask(0, 2) = mask(1, 0) = mask(1, 1) = mask(1, 5) = false;
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t t = 0; t < seq; ++t) {
        if (!mask(b, t)) {
          for (std::size_t i = 0; i < cfg.d_model; ++i) x(b, t, i) = In(0);
        }
      }
    }
    auto x_nan = x;
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t t = 0; t < seq; ++t) {
        if (!mask(b, t)) {
          for (std::size_t i = 0; i < cfg.d_model; ++i) x_nan(b, t, i) = std::numeric_limits<In>::quiet_NaN();
        }
      }
    }
    const auto y = layer(x, mask);
    const auto y_nan = layer(x_nan, mask);
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t t = 0; t < seq; ++t) {
        if (!mask(b, t)) continue;  // a NaN query's own output is NaN
        for (std::size_t i = 0; i < cfg.d_model; ++i) {
          INFO("causal " << causal << ", batch " << b << ", token " << t << ", feature " << i << ": got "
                         << static_cast<double>(y_nan(b, t, i)) << ", with zeros " << static_cast<double>(y(b, t, i)));
          REQUIRE(identical_bits(y_nan(b, t, i), y(b, t, i)));
        }
      }
    }
  }
}

namespace {
/// The float64 cross-attention of x [batch, seq, d] over context [batch, keys, d], written from the
/// definitions with the layer's parameters (read as doubles): q = x Wq + bq, k = c Wk + bk, v = c Wv + bv,
/// per head softmax(q·k / sqrt(head_dim)) over the valid keys, y = attended Wo + bo.
template <class Layer, class T>
std::vector<double> cross_reference(const Layer& layer, const xt::xtensor<T, 3>& x, const xt::xtensor<T, 3>& c,
                                    const xt::xtensor<bool, 2>& valid) {
  const auto& cfg = layer.config();
  const std::size_t B = x.shape()[0], S = x.shape()[1], K = c.shape()[1], d = cfg.d_model;
  const std::size_t H = cfg.n_heads, G = cfg.n_kv_heads, D = cfg.head_dim;
  const auto project = [](const auto& dense, const auto& in, std::size_t rows, std::size_t width_in) {
    const std::size_t out = dense.kernel().shape()[1];
    std::vector<double> y(rows * out, 0.0);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t o = 0; o < out; ++o) {
        double sum = dense.bias() ? static_cast<double>((*dense.bias())(o)) : 0.0;
        for (std::size_t i = 0; i < width_in; ++i) {
          sum += static_cast<double>(in[r * width_in + i]) * static_cast<double>(dense.kernel()(i, o));
        }
        y[r * out + o] = sum;
      }
    }
    return y;
  };
  const std::vector<double> q = project(layer.wq(), x.data(), B * S, d);
  const std::vector<double> k = project(layer.wk(), c.data(), B * K, d);
  const std::vector<double> v = project(layer.wv(), c.data(), B * K, d);
  std::vector<double> att(B * S * H * D, 0.0);
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t t = 0; t < S; ++t) {
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t g = h / (H / G);
        std::vector<double> p(K, 0.0);
        double max = -std::numeric_limits<double>::infinity(), sum = 0.0;
        for (std::size_t j = 0; j < K; ++j) {
          if (!valid(b, j)) continue;
          double dot = 0.0;
          for (std::size_t e = 0; e < D; ++e)
            dot += q[(b * S + t) * H * D + h * D + e] * k[(b * K + j) * G * D + g * D + e];
          p[j] = dot / std::sqrt(static_cast<double>(D));
          max = std::max(max, p[j]);
        }
        for (std::size_t j = 0; j < K; ++j) sum += (p[j] = valid(b, j) ? std::exp(p[j] - max) : 0.0);
        for (std::size_t j = 0; j < K; ++j) {
          for (std::size_t e = 0; e < D; ++e) {
            att[(b * S + t) * H * D + h * D + e] += p[j] / sum * v[(b * K + j) * G * D + g * D + e];
          }
        }
      }
    }
  }
  return project(layer.wo(), att.data(), B * S, H * D);
}
}  // namespace

TEMPLATE_TEST_CASE("attention cross: a context of another length, against float64, and decoding from a filled cache",
                   "[nn][attention][cross]", p_f64, p_c_bf16) {
  using P = TestType;
  using T = typename P::param_type;  // float64 or float32 inputs
  const nn::attention_config cfg{
      .d_model = 16, .n_heads = 4, .n_kv_heads = 2, .causal = false, .query_block = 4, .key_block = 3};
  nn::attention<P> layer(cfg, nn::use_bias::yes);
  unsigned seed = 7;
  layer.for_each_parameter([&](std::string_view, auto& p) {
    std::mt19937 rng(seed++);
    std::uniform_real_distribution<double> u(-0.5, 0.5);
    for (auto& e : p) e = static_cast<T>(u(rng));
  });
  std::mt19937 rng(11);
  std::normal_distribution<double> n(0.0, 1.0);
  xt::xtensor<T, 3> x = xt::xtensor<T, 3>::from_shape({2, 5, 16});
  xt::xtensor<T, 3> context = xt::xtensor<T, 3>::from_shape({2, 9, 16});
  for (auto& e : x) e = static_cast<T>(n(rng));
  for (auto& e : context) e = static_cast<T>(n(rng));
  xt::xtensor<bool, 2> mask = xt::ones<bool>({2, 9});
  mask(1, 0) = mask(1, 4) = false;
  const auto y = layer.cross(x, context, mask);
  const std::vector<double> ref = cross_reference(layer, x, context, mask);
  // float64: sums of O(1) terms (relative 1e-12); c=bf16: x, the context, the weights, q, k, v, the heads
  // rounded to bfloat16, about eight roundings of 2^-8 in relative L2.
  const double bound = std::is_same_v<T, double> ? 1e-12 : 8 * std::ldexp(1.0, -8);
  CHECK(gradcheck::relative_l2(std::span<const T>(y.data(), y.size()), std::span<const double>(ref)) <= bound);

  // Decoding: the context projected into a cache once, then the queries one token at a time, each the
  // same bits as its row of the whole call (queries do not see each other in cross-attention).
  auto cache = layer.template make_cache<T>(2, 9);
  layer.fill_context(context, mask, cache);
  REQUIRE(cache.size() == 9);
  CHECK(bool(layer.cross(x, cache) == y));
  for (std::size_t t = 0; t < 5; ++t) {
    const xt::xtensor<T, 3> step = xt::view(x, xt::all(), xt::range(t, t + 1), xt::all());
    const auto ys = layer.cross(step, cache);
    for (std::size_t b = 0; b < 2; ++b) {
      for (std::size_t e = 0; e < 16; ++e) CHECK(ys(b, 0, e) == y(b, t, e));
    }
  }
  // A context that is all padding for a batch row: its queries output Wo's bias alone (zeros before Wo).
  xt::xtensor<bool, 2> none = mask;
  for (std::size_t j = 0; j < 9; ++j) none(0, j) = false;
  const auto y_none = layer.cross(x, context, none);
  // (The bias as the projection adds it: rounded to the compute type.)
  for (std::size_t e = 0; e < 16; ++e) {
    CHECK(static_cast<double>(y_none(0, 2, e)) ==
          round_to<nn::compute_t<P, T>>(static_cast<double>((*layer.wo().bias())(e))));
  }

  // Errors, each naming what to fix.
  nn::attention<P> causal(nn::attention_config{.d_model = 16, .n_heads = 4, .causal = true});
  CHECK_THROWS_WITH(causal.cross(x, context, mask), Contains("causal = false and no rotary"));
  const xt::xtensor<T, 3> one_row = xt::view(context, xt::range(0, 1), xt::all(), xt::all());
  CHECK_THROWS_WITH(layer.cross(x, one_row, nn::no_key_mask), Contains("the same rank and batch"));
  const xt::xtensor<bool, 2> short_mask = xt::ones<bool>({2, 8});
  CHECK_THROWS_WITH(layer.cross(x, context, short_mask), Contains("needs [2, 9]"));
  auto small = layer.template make_cache<T>(2, 8);
  CHECK_THROWS_WITH(layer.fill_context(context, mask, small), Contains("make_cache<In>(2, 9)"));
  auto empty = layer.template make_cache<T>(2, 9);
  CHECK_THROWS_WITH(layer.cross(x, empty), Contains("fill it with fill_context"));
}

}  // namespace attention_test
