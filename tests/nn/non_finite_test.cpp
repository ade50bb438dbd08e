// NaN and Inf through every layer and every backward pass (issue 12, "Hardening to build"): one
// element of the input (or of the cotangent) is NaN or +Inf, and each test checks, element by element,
// what IEEE arithmetic implies: which outputs become NaN (or +-Inf, with the sign the arithmetic gives),
// and that every other output is bit for bit the output of the clean run. No call throws or hangs.
// The last two test cases run the probed layers with diagnostics::recording_probe and check that
// each site counts its non-finite values, and that the first site reporting any is where they entered.
// (Masked keys holding NaN or Inf in the forward pass are tested in attention_test.cpp.)
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/cross_entropy.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"

namespace non_finite_test {

namespace nn = mixprec::nn;
namespace diagnostics = mixprec::diagnostics;
using layer_tests::p_c_bf16;
using layer_tests::p_f32;

namespace {

constexpr double qnan = std::numeric_limits<double>::quiet_NaN();
constexpr double pinf = std::numeric_limits<double>::infinity();

template <class T, std::size_t N>
xt::xtensor<T, N> random_tensor(const std::array<std::size_t, N>& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto t = xt::xtensor<T, N>::from_shape(shape);
  for (auto& v : t) v = static_cast<T>(normal(rng));
  return t;
}

/// What one element must be: the clean run's bits, NaN, +Inf, -Inf, any non-finite value, zero, or
/// any finite value.
enum class want : std::uint8_t { same, nan, pos_inf, neg_inf, non_finite, zero, finite };

/// +Inf or -Inf with the sign of `v` (Inf times a finite non-zero v).
want inf_like(double v) { return v > 0 ? want::pos_inf : want::neg_inf; }
/// What `poison` times a finite non-zero v gives: NaN for NaN, +-Inf for +Inf.
want times(double poison, double v) { return std::isnan(poison) ? want::nan : inf_like(v); }

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// Checks every element of `got` (row-major, `cols` per row) against `want_at(row, col)`, `clean`
/// giving the bits of `want::same`. One assertion per call; the message names the first mismatch.
template <class X, class WantAt>
void check_pattern(const std::string& what, const X& got, const X& clean, std::size_t cols, WantAt&& want_at) {
  REQUIRE(got.size() == clean.size());
  std::size_t bad = 0;
  std::string first;
  for (std::size_t n = 0; n < got.size(); ++n) {
    const std::size_t r = n / cols, c = n % cols;
    const double g = static_cast<double>(got.data()[n]);
    bool ok = false;
    const want w = want_at(r, c);
    switch (w) {
      case want::same: ok = same_bits(got.data()[n], clean.data()[n]); break;
      case want::nan: ok = std::isnan(g); break;
      case want::pos_inf: ok = g == pinf; break;
      case want::neg_inf: ok = g == -pinf; break;
      case want::non_finite: ok = !std::isfinite(g); break;
      case want::zero: ok = g == 0.0; break;
      case want::finite: ok = std::isfinite(g); break;
    }
    if (!ok && bad++ == 0) {
      first = "[" + std::to_string(r) + ", " + std::to_string(c) + "] is " + std::to_string(g) + " (clean " +
              std::to_string(static_cast<double>(clean.data()[n])) + "), expected " +
              std::to_string(static_cast<int>(w)) + " (0 same, 1 nan, 2 +inf, 3 -inf, 4 non-finite, 5 zero, 6 finite)";
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements differ from the IEEE pattern; first " << first);
  CHECK(bad == 0);
}

/// A label for INFO: "NaN" or "+Inf".
std::string name_of(double poison) { return std::isnan(poison) ? "NaN" : "+Inf"; }

}  // namespace

TEMPLATE_TEST_CASE("dense: a NaN or Inf reaches its row of y and dx and its row or column of the kernel gradient",
                   "[nn][non_finite][dense]", p_f32, p_c_bf16) {
  using P = TestType;
  std::mt19937 rng(1);
  auto layer = nn::dense<P>::lecun_normal(6, 4, rng, nn::use_bias::yes);
  *layer.bias() = random_tensor<float, 1>({4}, 2);
  const auto& k = layer.kernel();  // float params: signs are the compute type's too
  const auto x = random_tensor<float, 2>({5, 6}, 3);
  const auto dy = random_tensor<float, 2>({5, 4}, 4);
  typename nn::dense<P>::template saved<float> ctx0;
  const auto y0 = layer.forward(x, ctx0);
  auto g0 = layer.zero_gradients();
  const auto dx0 = layer.backward(ctx0, dy, g0);
  for (const double poison : {qnan, pinf}) {
    INFO(name_of(poison));
    // x[2, 3] poisoned: y[2, o] = poison * k[3, o] + finite; dx does not read x; kernel grad row 3.
    auto x1 = x;
    x1(2, 3) = static_cast<float>(poison);
    typename nn::dense<P>::template saved<float> ctx1;
    const auto y1 = layer.forward(x1, ctx1);
    check_pattern("y", y1, y0, 4,
                  [&](std::size_t r, std::size_t o) { return r != 2 ? want::same : times(poison, k(3, o)); });
    auto g1 = layer.zero_gradients();
    const auto dx1 = layer.backward(ctx1, dy, g1);
    check_pattern("dx", dx1, dx0, 6, [](std::size_t, std::size_t) { return want::same; });
    check_pattern("grads.kernel", g1.kernel, g0.kernel, 4,
                  [&](std::size_t i, std::size_t o) { return i != 3 ? want::same : times(poison, dy(2, o)); });
    check_pattern("grads.bias", *g1.bias, *g0.bias, 4, [](std::size_t, std::size_t) { return want::same; });
    // dy[1, 2] poisoned: dx row 1, the kernel gradient's column 2, the bias gradient's element 2.
    auto dy1 = dy;
    dy1(1, 2) = static_cast<float>(poison);
    auto g2 = layer.zero_gradients();
    const auto dx2 = layer.backward(ctx0, dy1, g2);
    check_pattern("dx", dx2, dx0, 6,
                  [&](std::size_t r, std::size_t i) { return r != 1 ? want::same : times(poison, k(i, 2)); });
    check_pattern("grads.kernel", g2.kernel, g0.kernel, 4,
                  [&](std::size_t i, std::size_t o) { return o != 2 ? want::same : times(poison, x(1, i)); });
    check_pattern("grads.bias", *g2.bias, *g0.bias, 4,
                  [&](std::size_t, std::size_t o) { return o != 2 ? want::same : times(poison, 1.0); });
  }
}

TEMPLATE_TEST_CASE("layer_norm: a NaN or Inf poisons its row, forward and backward, and its feature's gradients",
                   "[nn][non_finite][layer_norm]", p_f32, p_c_bf16) {
  using P = TestType;
  const auto ln = nn::layer_norm<P>::from_params(random_tensor<float, 1>({6}, 11), random_tensor<float, 1>({6}, 12));
  const auto x = random_tensor<float, 2>({5, 6}, 13);
  const auto dy = random_tensor<float, 2>({5, 6}, 14);
  typename nn::layer_norm<P>::template saved<float> ctx0;
  const auto y0 = ln.forward(x, ctx0);
  auto g0 = ln.zero_gradients();
  const auto dx0 = ln.backward(ctx0, dy, g0);
  auto only_row = [](std::size_t row, want w) {
    return [row, w](std::size_t r, std::size_t) { return r == row ? w : want::same; };
  };
  for (const double poison : {qnan, pinf}) {
    INFO(name_of(poison));
    // x[2, 3]: the row's mean is NaN or Inf, so every deviation (Inf - Inf = NaN for x[2, 3]) and the
    // variance are NaN: the whole row is NaN, for +Inf too.
    auto x1 = x;
    x1(2, 3) = static_cast<float>(poison);
    typename nn::layer_norm<P>::template saved<float> ctx1;
    const auto y1 = ln.forward(x1, ctx1);
    check_pattern("y", y1, y0, 6, only_row(2, want::nan));
    // Its backward with a clean dy: x̂ and r of row 2 are NaN, so dx's row 2 and every scale gradient;
    // the bias gradient (sum of dy) does not read x.
    auto g1 = ln.zero_gradients();
    const auto dx1 = ln.backward(ctx1, dy, g1);
    check_pattern("dx", dx1, dx0, 6, only_row(2, want::nan));
    check_pattern("grads.scale", *g1.scale, *g0.scale, 6, [](std::size_t, std::size_t) { return want::nan; });
    check_pattern("grads.bias", *g1.bias, *g0.bias, 6, [](std::size_t, std::size_t) { return want::same; });
    // dy[1, 2]: mean(g) and mean(g x̂) are NaN or +-Inf, so all of dx's row 1 is non-finite; the scale
    // and bias gradients of feature 2 only.
    auto dy1 = dy;
    dy1(1, 2) = static_cast<float>(poison);
    auto g2 = ln.zero_gradients();
    const auto dx2 = ln.backward(ctx0, dy1, g2);
    check_pattern("dx", dx2, dx0, 6, only_row(1, std::isnan(poison) ? want::nan : want::non_finite));
    check_pattern("grads.scale", *g2.scale, *g0.scale, 6, [&](std::size_t, std::size_t j) {
      return j != 2 ? want::same : times(poison, ctx0.xhat[1 * 6 + 2]);
    });
    check_pattern("grads.bias", *g2.bias, *g0.bias, 6,
                  [&](std::size_t, std::size_t j) { return j != 2 ? want::same : times(poison, 1.0); });
  }
}

TEMPLATE_TEST_CASE("rms_norm: a NaN poisons its row, an Inf gives NaN at itself and zeros beside, plain and fused",
                   "[nn][non_finite][rms_norm]", p_f32, p_c_bf16) {
  using P = TestType;
  const auto norm = nn::rms_norm<P>::from_scale(random_tensor<float, 1>({6}, 21));
  const auto x = random_tensor<float, 2>({5, 6}, 22);
  const auto residual = random_tensor<float, 2>({5, 6}, 23);
  const auto dy = random_tensor<float, 2>({5, 6}, 24);
  // In row 2 with x[2, 3] poisoned: NaN makes the mean square NaN (the whole row NaN); +Inf makes it
  // +Inf, so r = 1/sqrt(Inf) = 0: y[2, 3] = Inf * 0 = NaN and every other y[2, j] = x[2, j] * 0 = zero.
  auto forward_pattern = [](double poison) {
    return [poison](std::size_t r, std::size_t j) {
      if (r != 2) return want::same;
      return std::isnan(poison) || j == 3 ? want::nan : want::zero;
    };
  };
  SECTION("plain form, forward and backward") {
    typename nn::rms_norm<P>::template saved<float> ctx0;
    const auto y0 = norm.forward(x, ctx0);
    auto g0 = norm.zero_gradients();
    const auto dx0 = norm.backward(ctx0, dy, g0);
    for (const double poison : {qnan, pinf}) {
      INFO(name_of(poison));
      auto x1 = x;
      x1(2, 3) = static_cast<float>(poison);
      typename nn::rms_norm<P>::template saved<float> ctx1;
      check_pattern("y", norm.forward(x1, ctx1), y0, 6, forward_pattern(poison));
      check_pattern("y of operator()", norm(x1), y0, 6, forward_pattern(poison));
      // dy[1, 2]: mean(g x̂) is NaN or +-Inf: all of dx's row 1; the scale gradient of feature 2.
      auto dy1 = dy;
      dy1(1, 2) = static_cast<float>(poison);
      auto g2 = norm.zero_gradients();
      const auto dx2 = norm.backward(ctx0, dy1, g2);
      check_pattern("dx", dx2, dx0, 6, [&](std::size_t r, std::size_t) {
        return r != 1 ? want::same : std::isnan(poison) ? want::nan : want::non_finite;
      });
      check_pattern("grads.scale", *g2.scale, *g0.scale, 6, [&](std::size_t, std::size_t j) {
        return j != 2 ? want::same : times(poison, ctx0.xhat[1 * 6 + 2]);
      });
    }
  }
  SECTION("fused form: the normalised row as above, the stream only at the poisoned element") {
    typename nn::rms_norm<P>::template saved<float> ctx0;
    const auto out0 = norm.forward(x, residual, ctx0);
    auto g0 = norm.zero_gradients();
    const auto dnew_residual = random_tensor<float, 2>({5, 6}, 25);
    const auto ds0 = norm.backward(ctx0, dy, dnew_residual, g0);
    for (const double poison : {qnan, pinf}) {
      INFO(name_of(poison));
      for (const bool in_x : {true, false}) {
        INFO((in_x ? "in x" : "in the residual"));
        auto x1 = x;
        auto r1 = residual;
        (in_x ? x1 : r1)(2, 3) = static_cast<float>(poison);
        typename nn::rms_norm<P>::template saved<float> ctx1;
        const auto out1 = norm.forward(x1, r1, ctx1);
        check_pattern("normed", out1.x, out0.x, 6, forward_pattern(poison));
        check_pattern("new residual", out1.residual, out0.residual, 6,
                      [&](std::size_t r, std::size_t j) { return r == 2 && j == 3 ? times(poison, 1.0) : want::same; });
      }
      // The cotangent of the stream: dnormed's poison fills its row; dnew_residual's reaches ds at itself.
      auto dy1 = dy;
      dy1(1, 2) = static_cast<float>(poison);
      auto g1 = norm.zero_gradients();
      check_pattern("ds (dnormed poisoned)", norm.backward(ctx0, dy1, dnew_residual, g1), ds0, 6,
                    [&](std::size_t r, std::size_t) {
                      return r != 1 ? want::same : std::isnan(poison) ? want::nan : want::non_finite;
                    });
      auto dr1 = dnew_residual;
      dr1(1, 2) = static_cast<float>(poison);
      auto g2 = norm.zero_gradients();
      check_pattern("ds (dnew_residual poisoned)", norm.backward(ctx0, dy, dr1, g2), ds0, 6,
                    [&](std::size_t r, std::size_t j) { return r == 1 && j == 2 ? times(poison, 1.0) : want::same; });
      check_pattern("grads.scale", *g2.scale, *g0.scale, 6, [](std::size_t, std::size_t) { return want::same; });
    }
  }
}

TEMPLATE_TEST_CASE("feed_forward: a NaN or Inf in x poisons its row of y, in dy its row of dx",
                   "[nn][non_finite][feed_forward]", p_f32, p_c_bf16) {
  using P = TestType;
  for (const auto activation : {nn::ffn_activation::swiglu, nn::ffn_activation::relu}) {
    INFO("activation " << nn::activation_name(activation));
    std::mt19937 rng(31);
    const auto ffn = nn::feed_forward<P>::init(activation, 6, 10, rng, nn::use_bias::yes);
    const auto x = random_tensor<float, 2>({5, 6}, 32);
    const auto dy = random_tensor<float, 2>({5, 6}, 33);
    typename nn::feed_forward<P>::template saved<float> ctx0;
    const auto y0 = ffn.forward(x, ctx0);
    auto g0 = ffn.zero_gradients();
    const auto dx0 = ffn.backward(ctx0, dy, g0);
    for (const double poison : {qnan, pinf}) {
      INFO(name_of(poison));
      // x[2, 3]: every pre-activation of row 2 is NaN or +-Inf; relu(-Inf) = 0 but some hidden value is
      // +Inf or NaN (silu(-Inf) = -Inf / Inf = NaN), and w2 mixes them into every output of the row.
      auto x1 = x;
      x1(2, 3) = static_cast<float>(poison);
      typename nn::feed_forward<P>::template saved<float> ctx1;
      const auto y1 = ffn.forward(x1, ctx1);
      const want row_want = std::isnan(poison) ? want::nan : want::non_finite;
      check_pattern("y", y1, y0, 6, [&](std::size_t r, std::size_t) { return r == 2 ? row_want : want::same; });
      check_pattern("y of operator()", ffn(x1), y0, 6,
                    [&](std::size_t r, std::size_t) { return r == 2 ? row_want : want::same; });
      // Its backward with a clean dy: the pre-activations of row 2 are not finite. NaN: act'(NaN) is NaN,
      // so dx's row 2 is NaN. +-Inf: relu' is 0 or 1 (the limits), so under relu dx's row 2 stays finite;
      // under swiglu da = dh b silu'(a) with b = +-Inf is not.
      auto g1 = ffn.zero_gradients();
      const want dx_want = std::isnan(poison)                       ? want::nan
                           : activation == nn::ffn_activation::relu ? want::finite
                                                                    : want::non_finite;
      check_pattern("dx", ffn.backward(ctx1, dy, g1), dx0, 6,
                    [&](std::size_t r, std::size_t) { return r == 2 ? dx_want : want::same; });
      // dy[1, 2]: dh's row 1, then da (0 x NaN = NaN where relu' = 0: IEEE, as frameworks give) and dx's row 1;
      // w2's kernel gradient in column 2 only.
      auto dy1 = dy;
      dy1(1, 2) = static_cast<float>(poison);
      auto g2 = ffn.zero_gradients();
      check_pattern("dx", ffn.backward(ctx0, dy1, g2), dx0, 6,
                    [&](std::size_t r, std::size_t) { return r == 1 ? want::non_finite : want::same; });
      check_pattern("grads.w2.kernel", g2.w2.kernel, g0.w2.kernel, 6,
                    [&](std::size_t, std::size_t o) { return o == 2 ? want::non_finite : want::same; });
    }
  }
}

TEMPLATE_TEST_CASE("attention: a NaN or Inf token reaches every query that sees it, forward and backward",
                   "[nn][non_finite][attention]", p_f32, p_c_bf16) {
  using P = TestType;
  const std::size_t batch = 2, seq = 6, d = 8;
  for (const bool causal : {false, true}) {
    for (const std::size_t block : {std::size_t{2}, std::size_t{64}}) {
      INFO((causal ? "causal" : "not causal") << ", query_block = key_block = " << block);
      const nn::attention_config cfg{.d_model = d,
                                     .n_heads = 2,
                                     .n_kv_heads = 1,
                                     .causal = causal,
                                     .rotary = nn::rotary_config{},
                                     .query_block = block,
                                     .key_block = block};
      std::mt19937 rng(41);
      const auto attn = nn::attention<P>::lecun_normal(cfg, rng, nn::use_bias::yes);
      const auto x = random_tensor<float, 3>({batch, seq, d}, 42);
      const auto dy = random_tensor<float, 3>({batch, seq, d}, 43);
      typename nn::attention<P>::template saved<float> ctx0;
      const auto y0 = attn.forward(x, ctx0);
      auto g0 = attn.zero_gradients();
      const auto dx0 = attn.backward(ctx0, dy, g0);
      // Token t = 2 of batch row 0: its key and value reach every query that sees it (all of row 0, or
      // the queries at positions >= 2 under the causal mask); batch row 1 is untouched.
      auto sees = [&](std::size_t b, std::size_t t) { return b == 0 && (!causal || t >= 2); };
      for (const double poison : {qnan, pinf}) {
        INFO(name_of(poison));
        auto x1 = x;
        x1(0, 2, 3) = static_cast<float>(poison);
        typename nn::attention<P>::template saved<float> ctx1;
        const auto y1 = attn.forward(x1, ctx1);
        check_pattern("y", y1, y0, d, [&](std::size_t r, std::size_t) {
          const std::size_t b = r / seq, t = r % seq;
          return sees(b, t) ? (std::isnan(poison) ? want::nan : want::non_finite) : want::same;
        });
        check_pattern("y of operator()", attn(x1), y0, d, [&](std::size_t r, std::size_t) {
          const std::size_t b = r / seq, t = r % seq;
          return sees(b, t) ? want::non_finite : want::same;
        });
        // dy at token 2 of row 0: its query's dO reaches dQ of token 2 and dK, dV of the keys it sees
        // (every token of row 0, or tokens <= 2 under the causal mask), never those it does not see:
        // under the causal mask dx of tokens 3..5 stays the clean run's, whatever the tiling.
        auto dy1 = dy;
        dy1(0, 2, 3) = static_cast<float>(poison);
        auto g1 = attn.zero_gradients();
        const auto dx1 = attn.backward(ctx0, dy1, g1);
        check_pattern("dx", dx1, dx0, d, [&](std::size_t r, std::size_t) {
          const std::size_t b = r / seq, t = r % seq;
          return b == 0 && (!causal || t <= 2) ? want::non_finite : want::same;
        });
      }
      // With token 4 of row 0 as padding, a NaN in dy at token 1 never reaches the padding token's dx
      // (its key and value are masked for every query): only the tokens token 1 sees.
      xt::xtensor<bool, 2> mask = xt::ones<bool>({batch, seq});
      mask(0, 4) = false;
      typename nn::attention<P>::template saved<float> ctx_m;
      (void)attn.forward(x, mask, ctx_m);
      auto gm0 = attn.zero_gradients();
      const auto dxm0 = attn.backward(ctx_m, dy, gm0);
      auto dy1 = dy;
      dy1(0, 1, 5) = static_cast<float>(qnan);
      auto gm1 = attn.zero_gradients();
      check_pattern("dx with padding", attn.backward(ctx_m, dy1, gm1), dxm0, d, [&](std::size_t r, std::size_t) {
        const std::size_t b = r / seq, t = r % seq;
        return b == 0 && t != 4 && (!causal || t <= 1) ? want::nan : want::same;
      });
    }
  }
}

TEMPLATE_TEST_CASE("embedding: NaN or Inf in attend's x, its dlogits and the lookup's dy reach their rows only",
                   "[nn][non_finite][embedding]", p_f32, p_c_bf16) {
  using P = TestType;
  const auto table = random_tensor<float, 2>({7, 4}, 51);
  const auto emb = nn::embedding<P>::from_table(table);
  const auto h = random_tensor<float, 2>({3, 4}, 52);
  const auto dz = random_tensor<float, 2>({3, 7}, 53);
  typename nn::embedding<P>::template attend_saved<float> ctx0;
  const auto z0 = emb.template attend_forward<float>(h, ctx0);
  auto g0 = emb.zero_gradients();
  const auto dh0 = emb.attend_backward(ctx0, dz, g0);
  for (const double poison : {qnan, pinf}) {
    INFO(name_of(poison));
    auto h1 = h;
    h1(2, 3) = static_cast<float>(poison);
    check_pattern("logits", emb.attend(h1), z0, 7,
                  [&](std::size_t r, std::size_t v) { return r != 2 ? want::same : times(poison, table(v, 3)); });
    auto dz1 = dz;
    dz1(1, 5) = static_cast<float>(poison);
    auto g1 = emb.zero_gradients();
    check_pattern("dh", emb.attend_backward(ctx0, dz1, g1), dh0, 4,
                  [&](std::size_t r, std::size_t f) { return r != 1 ? want::same : times(poison, table(5, f)); });
    check_pattern("grads.embedding", g1.embedding, g0.embedding, 4,
                  [&](std::size_t v, std::size_t f) { return v != 5 ? want::same : times(poison, h(1, f)); });
    // The lookup's backward adds dy row by row: the poison lands at its id and feature only.
    typename nn::embedding<P>::saved ctx;
    (void)emb.forward(xt::xtensor<int, 1>{3, 1, 3, 0}, ctx);
    const auto dy = random_tensor<float, 2>({4, 4}, 54);
    auto dy1 = dy;
    dy1(2, 1) = static_cast<float>(poison);
    auto l0 = emb.zero_gradients();
    auto l1 = emb.zero_gradients();
    emb.backward(ctx, dy, l0);
    emb.backward(ctx, dy1, l1);
    check_pattern("lookup grads.embedding", l1.embedding, l0.embedding, 4,
                  [&](std::size_t v, std::size_t f) { return v == 3 && f == 1 ? times(poison, 1.0) : want::same; });
  }
}

TEST_CASE("softmax_cross_entropy: NaN and Inf logits give what IEEE gives, in their row only",
          "[nn][non_finite][cross_entropy]") {
  const auto z = random_tensor<float, 2>({3, 5}, 61);
  const std::vector<std::int32_t> targets{1, 4, 0};
  const double seed = 1.0 / 3.0;
  auto run = [&](const xt::xtensor<float, 2>& logits, const std::vector<std::int32_t>& t, xt::xtensor<float, 2>& dz) {
    return nn::softmax_cross_entropy<float>(std::span<const float>(logits.data(), logits.size()), 5,
                                            std::span<const std::int32_t>(t), std::span<float>(dz.data(), dz.size()),
                                            seed);
  };
  auto dz0 = xt::xtensor<float, 2>::from_shape({3, 5});
  const double loss0 = run(z, targets, dz0);
  auto dz1 = dz0;
  auto z1 = z;
  SECTION("NaN: the loss is NaN, the row's gradient is NaN") {
    z1(1, 2) = static_cast<float>(qnan);
    CHECK(std::isnan(run(z1, targets, dz1)));
    CHECK(std::isnan(nn::cross_entropy_loss<float>(std::span<const float>(z1.data(), z1.size()), 5,
                                                   std::span<const std::int32_t>(targets))));
    check_pattern("dlogits", dz1, dz0, 5, [](std::size_t r, std::size_t) { return r == 1 ? want::nan : want::same; });
  }
  SECTION(
      "+Inf beside the target: the loss is +Inf; the row's gradient is NaN there, 0 elsewhere, -seed at the target") {
    z1(1, 2) = static_cast<float>(pinf);
    CHECK(run(z1, targets, dz1) == pinf);
    check_pattern("dlogits", dz1, dz0, 5, [](std::size_t r, std::size_t j) {
      return r != 1 ? want::same : j == 2 ? want::nan : j == 4 ? want::finite : want::zero;
    });
    CHECK(dz1(1, 4) == static_cast<float>(-seed));
  }
  SECTION("+Inf at the target: the loss is Inf - Inf = NaN") {
    z1(1, 4) = static_cast<float>(pinf);
    CHECK(std::isnan(run(z1, targets, dz1)));
    check_pattern("dlogits", dz1, dz0, 5, [](std::size_t r, std::size_t j) {
      return r != 1 ? want::same : j == 4 ? want::nan : want::zero;
    });
  }
  SECTION("-Inf: a class of probability 0, everything stays finite and its gradient is exactly 0") {
    z1(1, 2) = static_cast<float>(-pinf);
    CHECK(std::isfinite(run(z1, targets, dz1)));
    check_pattern("dlogits", dz1, dz0, 5, [](std::size_t r, std::size_t j) {
      return r != 1 ? want::same : j == 2 ? want::zero : want::finite;
    });
  }
  SECTION("an ignored row's NaN reaches nothing") {
    z1(1, 2) = static_cast<float>(qnan);
    std::vector<std::int32_t> ignored = targets;
    ignored[1] = nn::ignore_index;
    auto dz_clean = dz0;
    const double clean = run(z, ignored, dz_clean);
    CHECK(same_bits(run(z1, ignored, dz1), clean));
    check_pattern("dlogits", dz1, dz_clean, 5, [](std::size_t, std::size_t) { return want::same; });
  }
  (void)loss0;
}

TEMPLATE_TEST_CASE("probed feed_forward and attention: each site counts the NaN and Inf values it holds",
                   "[nn][non_finite][probe]", p_f32, p_c_bf16) {
  using P = TestType;
  SECTION("feed_forward: a NaN in x fills its row at .hidden and .out; an Inf feeds +Inf where w1 > 0 (relu)") {
    std::mt19937 rng(71);
    const auto ffn = nn::feed_forward<P>::init(nn::ffn_activation::relu, 6, 10, rng);
    auto x = random_tensor<float, 2>({4, 6}, 72);
    x(2, 3) = static_cast<float>(qnan);
    diagnostics::recording_probe probe;
    const auto y = ffn(x, probe, "ffn");
    CHECK(probe.at("ffn.hidden").stats.nan_count() == 10);
    CHECK(probe.at("ffn.hidden").stats.inf_count() == 0);
    CHECK(probe.at("ffn.hidden").stats.count() == 40);
    CHECK(probe.at("ffn.out").stats.nan_count() == 6);
    x(2, 3) = static_cast<float>(pinf);
    diagnostics::recording_probe probe_inf;
    (void)ffn(x, probe_inf, "ffn");
    std::size_t positive = 0;  // relu(+Inf) = +Inf where w1[3, h] > 0, relu(-Inf) = 0 elsewhere
    for (std::size_t hcol = 0; hcol < 10; ++hcol) positive += ffn.w1().kernel()(3, hcol) > 0 ? 1 : 0;
    REQUIRE(positive > 0);
    CHECK(probe_inf.at("ffn.hidden").stats.inf_count() == positive);
    CHECK(probe_inf.at("ffn.hidden").stats.nan_count() == 0);
    const auto& out = probe_inf.at("ffn.out").stats;
    CHECK(out.nan_count() + out.inf_count() == 6);
  }
  SECTION("attention: a NaN token fills the context of every query that sees it") {
    for (const bool causal : {false, true}) {
      INFO((causal ? "causal" : "not causal"));
      const nn::attention_config cfg{
          .d_model = 8, .n_heads = 2, .n_kv_heads = 1, .causal = causal, .query_block = 2, .key_block = 2};
      std::mt19937 rng(73);
      const auto attn = nn::attention<P>::lecun_normal(cfg, rng);
      auto x = random_tensor<float, 3>({2, 5, 8}, 74);
      x(1, 2, 0) = static_cast<float>(qnan);
      diagnostics::recording_probe probe;
      (void)attn(x, nn::no_key_mask, probe, "attn");
      const std::size_t queries = causal ? 3 : 5;  // of batch row 1: positions >= 2, or all
      CHECK(probe.at("attn.context").stats.nan_count() == queries * 8);
      CHECK(probe.at("attn.context").stats.inf_count() == 0);
      CHECK(probe.at("attn.out").stats.nan_count() == queries * 8);
    }
  }
}

namespace {

/// A pre-norm block: in -> rms_norm -> attention -> + in -> feed_forward, every tensor observed by the
/// probe (norm and residual by the block, the layers' inner sites by their probed calls).
template <class P>
struct block {
  nn::rms_norm<P> norm{8};
  nn::attention<P> attn;
  nn::feed_forward<P> ffn;

  explicit block(std::mt19937& rng)
      : attn(nn::attention<P>::lecun_normal(
            nn::attention_config{.d_model = 8, .n_heads = 2, .n_kv_heads = 1, .rotary = nn::rotary_config{}}, rng)),
        ffn(nn::feed_forward<P>::init(nn::ffn_activation::silu, 8, 12, rng)) {}

  /// Runs the block, returning the residual stream the feed-forward block reads.
  xt::xtensor<float, 3> run(const xt::xtensor<float, 3>& x, diagnostics::recording_probe& probe) const {
    probe.observe("block.in", std::span<const float>(x.data(), x.size()));
    const auto h = norm(x);
    probe.observe("block.norm", std::span<const float>(h.data(), h.size()));
    const auto a = attn(h, nn::no_key_mask, probe, "block.attn");
    xt::xtensor<float, 3> s = x + a;
    probe.observe("block.resid", std::span<const float>(s.data(), s.size()));
    (void)ffn(s, probe, "block.ffn");
    return s;
  }
};

/// The first site (in execution order) holding a NaN or an Inf, or "" if none does.
std::string first_non_finite(const diagnostics::recording_probe& probe) {
  for (const auto& site : probe.sites()) {
    if (!site.stats.all_finite()) return site.name;
  }
  return "";
}

}  // namespace

TEMPLATE_TEST_CASE("in a block, the first site reporting NaN or Inf is where it entered, and each site counts them",
                   "[nn][non_finite][probe]", p_f32, p_c_bf16) {
  using P = TestType;
  std::mt19937 rng(81);
  block<P> net(rng);
  const auto x = random_tensor<float, 3>({2, 5, 8}, 82);
  const std::size_t rows = 10;
  {
    diagnostics::recording_probe clean;
    (void)net.run(x, clean);
    CHECK(first_non_finite(clean).empty());
    CHECK(clean.size() == 7);
  }
  SECTION("a NaN in the input: the input, its row after the norm, then all of its sequence") {
    auto x1 = x;
    x1(0, 2, 3) = static_cast<float>(qnan);
    diagnostics::recording_probe probe;
    (void)net.run(x1, probe);
    CHECK(first_non_finite(probe) == "block.in");
    CHECK(probe.at("block.in").stats.nan_count() == 1);
    CHECK(probe.at("block.norm").stats.nan_count() == 8);              // the row
    CHECK(probe.at("block.attn.context").stats.nan_count() == 5 * 8);  // every query of sequence 0
    CHECK(probe.at("block.attn.out").stats.nan_count() == 5 * 8);
    CHECK(probe.at("block.resid").stats.nan_count() == 5 * 8);
    CHECK(probe.at("block.ffn.hidden").stats.nan_count() == 5 * 12);
    CHECK(probe.at("block.ffn.out").stats.nan_count() == 5 * 8);
  }
  SECTION("an Inf in the input: the norm turns it into one NaN (Inf / Inf) and zeros beside it") {
    auto x1 = x;
    x1(1, 1, 0) = static_cast<float>(pinf);
    diagnostics::recording_probe probe;
    (void)net.run(x1, probe);
    CHECK(first_non_finite(probe) == "block.in");
    CHECK(probe.at("block.in").stats.inf_count() == 1);
    CHECK(probe.at("block.norm").stats.nan_count() == 1);
    CHECK(probe.at("block.norm").stats.inf_count() == 0);
    CHECK(probe.at("block.attn.context").stats.nan_count() == 5 * 8);  // every query of sequence 1
  }
  SECTION("a NaN in the attention's value kernel: first seen in the context, one column per query head") {
    net.attn.wv().kernel()(1, 2) = static_cast<float>(qnan);  // v[:, 2]: kv head 0, read by both query heads
    diagnostics::recording_probe probe;
    (void)net.run(x, probe);
    CHECK(first_non_finite(probe) == "block.attn.context");
    CHECK(probe.at("block.attn.context").stats.nan_count() == rows * 2);
    CHECK(probe.at("block.attn.out").stats.nan_count() == rows * 8);
  }
  SECTION("an Inf in the feed-forward's w1: first seen in the hidden activation, silu(+Inf) or silu(-Inf)") {
    net.ffn.w1().kernel()(3, 5) = static_cast<float>(pinf);
    diagnostics::recording_probe probe;
    const auto s = net.run(x, probe);
    CHECK(first_non_finite(probe) == "block.ffn.hidden");
    // a[r, 5] = +Inf * s[r, 3] + finite: silu(+Inf) = +Inf, silu(-Inf) = -Inf / Inf = NaN.
    std::size_t positive = 0, negative = 0;
    for (std::size_t r = 0; r < rows; ++r) (s.data()[r * 8 + 3] > 0 ? positive : negative) += 1;
    CHECK(probe.at("block.ffn.hidden").stats.inf_count() == positive);
    CHECK(probe.at("block.ffn.hidden").stats.nan_count() == negative);
    const auto& out = probe.at("block.ffn.out").stats;
    CHECK(out.nan_count() + out.inf_count() == rows * 8);
  }
}

}  // namespace non_finite_test
