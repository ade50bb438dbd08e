// Tests of nn::transformer_block (nn/transformer_block.hpp) and nn::repeated (nn/repeated.hpp): forward
// and backward bit for bit the sub-layers called by hand (GPT-2 style under c=bf16, Llama style with
// rotary grouped-query attention and SwiGLU under c=f16), float64 central differences through a stack
// of two blocks (dx and every parameter), the names of the walks, a block inside nn::sequential, and
// the errors; the from_scope form against the compile-time block.
#include <array>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/nn/repeated.hpp"
#include "mixprec/nn/sequential.hpp"
#include "mixprec/nn/transformer_block.hpp"
#include "mixprec/nn/workspace.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/policy_scope.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"
#include "support/error_message.hpp"

namespace transformer_block_test {

namespace nn = mixprec::nn;
using gradcheck::tensor_from;
using test_support::says;

namespace {

const nn::transformer_block_config gpt_config{.attention = {.d_model = 8, .n_heads = 2, .causal = true}};
const nn::transformer_block_config llama_config{
    .attention = {.d_model = 8,
                  .n_heads = 4,
                  .n_kv_heads = 2,
                  .causal = true,
                  .rotary = nn::rotary_config{.layout = nn::rope_layout::adjacent_pairs}},
    .hidden = 12,
    .activation = nn::ffn_activation::swiglu};

/// A block with every parameter drawn from `seed` (norm scales around 1).
template <class P, class Norm>
nn::transformer_block<P, Norm> make_block(const nn::transformer_block_config& c, unsigned seed) {
  nn::transformer_block<P, Norm> b(c);
  unsigned s = seed;
  b.for_each_parameter([&](std::string_view name, auto& p) {
    const bool norm = name.starts_with("ln_");
    const auto v = gradcheck::uniform(p.size(), ++s, norm ? 0.5 : -0.5, norm ? 1.5 : 0.5);
    for (std::size_t i = 0; i < p.size(); ++i)
      p.data()[i] = static_cast<typename std::remove_cvref_t<decltype(p)>::value_type>(v[i]);
  });
  return b;
}

template <class A>
std::vector<float> values(const A& a) {
  std::vector<float> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = static_cast<float>(a.data()[i]);
  return out;
}

/// x += a, each sum in float (the block's residual add, written out here).
template <class A>
void add(xt::xtensor<float, 3>& x, const A& a) {
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] += static_cast<float>(a.data()[i]);
}

/// Forward and backward of `b` against its sub-layers called by hand, bit for bit.
template <class P, class Norm>
void require_same_as_by_hand(const nn::transformer_block<P, Norm>& b) {
  const auto x = tensor_from<float>(gradcheck::uniform(2 * 5 * 8, 7), std::array<std::size_t, 3>{2, 5, 8});
  const auto dy = tensor_from<float>(gradcheck::uniform(2 * 5 * 8, 8), std::array<std::size_t, 3>{2, 5, 8});
  typename nn::transformer_block<P, Norm>::template saved<float> ctx;
  const auto y = b.forward(x, ctx);
  auto g = b.zero_gradients();
  const auto dx = b.backward(ctx, dy, g);

  typename Norm::template saved<float> s1, s2;
  typename nn::attention<P>::template saved<nn::output_t<P, float>> sa;
  typename nn::feed_forward<P>::template saved<nn::output_t<P, float>> sm;
  xt::xtensor<float, 3> h = x;
  add(h, b.attn().forward(b.ln_1().forward(h, s1), sa));
  add(h, b.mlp().forward(b.ln_2().forward(h, s2), sm));
  CHECK(values(y) == values(h));
  CHECK(values(b(x)) == values(h));

  auto gh = b.zero_gradients();
  xt::xtensor<float, 3> d = dy;
  add(d, b.ln_2().backward(s2, b.mlp().backward(sm, d, gh.mlp), gh.ln_2));
  add(d, b.ln_1().backward(s1, b.attn().backward(sa, d, gh.attn), gh.ln_1));
  CHECK(values(dx) == values(d));
  std::vector<std::vector<float>> a, e;
  g.for_each([&](std::string_view, const auto& t) { a.push_back(values(t)); });
  gh.for_each([&](std::string_view, const auto& t) { e.push_back(values(t)); });
  CHECK(a == e);
}

}  // namespace

TEST_CASE("transformer_block: the sub-layers by hand, bit for bit", "[nn][transformer_block]") {
  require_same_as_by_hand(make_block<layer_tests::p_c_bf16, nn::layer_norm<layer_tests::p_c_bf16>>(gpt_config, 1));
  require_same_as_by_hand(make_block<layer_tests::p_c_f16, nn::rms_norm<layer_tests::p_c_f16>>(llama_config, 2));
}

TEST_CASE("transformer_block and repeated: backward matches float64 central differences",
          "[nn][transformer_block][gradcheck]") {
  using P = layer_tests::p_f64;
  for (const auto& config : {gpt_config, llama_config}) {
    std::vector<nn::transformer_block<P, nn::rms_norm<P>>> blocks;
    blocks.push_back(make_block<P, nn::rms_norm<P>>(config, 10));
    blocks.push_back(make_block<P, nn::rms_norm<P>>(config, 20));
    nn::repeated stack(std::move(blocks));
    auto x = tensor_from<double>(gradcheck::uniform(2 * 3 * 8, 31), std::array<std::size_t, 3>{2, 3, 8});
    const auto w = gradcheck::uniform(x.size(), 32);
    const auto dy = tensor_from<double>(w, std::array<std::size_t, 3>{2, 3, 8});

    decltype(stack)::saved<double> ctx;
    (void)stack.forward(x, ctx);
    auto grads = stack.zero_gradients();
    const auto dx = stack.backward(ctx, dy, grads);
    auto loss = [&] {
      stack.for_each_parameter([](std::string_view, auto&) {});  // drop any prepared weights
      return gradcheck::weighted_sum(stack(x), w);
    };
    gradcheck::require_close("dx", gradcheck::flat_values(dx), gradcheck::numeric_gradient(x.data(), x.size(), loss));
    std::size_t checked = 0;
    nn::for_each_parameter(stack, grads, [&](std::string_view name, auto& p, const auto& g) {
      gradcheck::require_close(std::string(name), gradcheck::flat_values(g),
                               gradcheck::numeric_gradient(p.data(), p.size(), loss));
      ++checked;
    });
    CHECK(checked == 2 * (config.activation == nn::ffn_activation::swiglu ? 9u : 8u));  // norms, 4 projections, MLP
  }
}

TEST_CASE("transformer_block: names, the gradient tree, inside sequential", "[nn][transformer_block]") {
  using P = layer_tests::p_f32;
  std::vector<nn::transformer_block<P>> blocks;
  for (unsigned l = 0; l < 2; ++l) blocks.push_back(make_block<P, nn::layer_norm<P>>(gpt_config, l));
  nn::repeated<nn::transformer_block<P>> stack(blocks);
  std::vector<std::string> names;
  stack.for_each_parameter([&](const auto& name, const auto&) { names.emplace_back(name); });
  REQUIRE(names.size() == 2 * 8);
  CHECK(names.front() == "0.ln_1.scale");
  CHECK(names[1] == "0.attn.wq.kernel");
  CHECK(names.back() == "1.mlp.w2.kernel");
  std::vector<std::string> grad_names;
  stack.zero_gradients().for_each([&](const auto& name, const auto&) { grad_names.emplace_back(name); });
  CHECK(grad_names == names);

  std::mt19937 rng(0);
  nn::sequential model{nn::dense<P>(3, 8, rng), stack, nn::layer_norm<P>(8)};
  const auto x = tensor_from<float>(gradcheck::uniform(2 * 4 * 3, 41), std::array<std::size_t, 3>{2, 4, 3});
  decltype(model)::saved<float> ctx;
  const auto y = model.forward(x, ctx);
  auto grads = model.zero_gradients();
  (void)model.backward(ctx, y, grads);
  CHECK(mixprec::all_finite(grads));
  CHECK(values(y) == values(model(x)));
  grads.zero();
  bool all_zero = true;
  grads.for_each([&](std::string_view, const auto& g) {
    for (std::size_t i = 0; i < g.size(); ++i) all_zero = all_zero && g.data()[i] == 0.0f;
  });
  CHECK(all_zero);
}

TEST_CASE("transformer_block::decode_into: the sub-layers' fused calls, bit for bit, and the probe sites",
          "[nn][transformer_block][decode]") {
  using P = layer_tests::p_c_bf16;
  using block = nn::transformer_block<P, nn::rms_norm<P>>;
  const auto b0 = make_block<P, nn::rms_norm<P>>(llama_config, 50);
  const auto b1 = make_block<P, nn::rms_norm<P>>(llama_config, 60);
  const nn::rms_norm<P> final_norm(8, {.epsilon = 1e-5});
  using A = float;  // o=f32
  auto cache0 = b0.attn().make_cache<A>(1, 4), cache1 = b1.attn().make_cache<A>(1, 4);
  auto hand0 = b0.attn().make_cache<A>(1, 4), hand1 = b1.attn().make_cache<A>(1, 4);
  nn::workspace ws;
  mixprec::diagnostics::recording_probe probe;
  for (unsigned step = 0; step < 3; ++step) {
    const auto x = tensor_from<float>(gradcheck::uniform(8, 70 + step), std::array<std::size_t, 2>{1, 8});
    xt::xtensor<A, 2> normed({1, 8}), hidden({1, 8});
    xt::xtensor<float, 2> residual({1, 8});
    b0.ln_1().forward_into(normed, residual, x, nn::no_residual, ws);
    b0.decode_into(normed, residual, hidden, cache0, b1.ln_1(), ws, probe, "layers.0");
    b1.decode_into(normed, residual, hidden, cache1, final_norm, ws, probe, "layers.1");

    xt::xtensor<A, 2> n2({1, 8}), h2({1, 8});
    xt::xtensor<float, 2> r2({1, 8});
    b0.ln_1().forward_into(n2, r2, x, nn::no_residual, ws);
    for (const auto* b : {&b0, &b1}) {
      auto& cache = b == &b0 ? hand0 : hand1;
      b->attn().forward_into(h2, n2, cache, ws);
      b->ln_2().forward_into(n2, r2, h2, r2, ws);
      b->mlp().forward_into(h2, n2, ws);
      (b == &b0 ? b1.ln_1() : final_norm).forward_into(n2, r2, h2, r2, ws);
    }
    CHECK(values(normed) == values(n2));
    CHECK(values(residual) == values(r2));
    CHECK(values(hidden) == values(h2));
  }
  std::vector<std::string> sites;
  for (const auto& site : probe.sites()) sites.push_back(site.name);
  CHECK(sites == std::vector<std::string>{"layers.0.attention", "layers.0.residual_attn", "layers.0.ffn",
                                          "layers.0.residual", "layers.1.attention", "layers.1.residual_attn",
                                          "layers.1.ffn", "layers.1.residual"});
  CHECK(probe.sites().front().calls == 3);
  static_assert(std::is_same_v<block::cache_type<A>, decltype(cache0)>);
}

TEST_CASE("transformer_block and repeated: errors", "[nn][transformer_block][errors]") {
  using P = layer_tests::p_f32;
  std::mt19937 rng(0);
  CHECK_THROWS_MATCHES(
      nn::transformer_block<P>(nn::layer_norm<P>(8), nn::attention<P>(gpt_config.attention), nn::layer_norm<P>(6),
                               nn::feed_forward<P>::init(nn::ffn_activation::gelu, 8, 16, rng)),
      std::invalid_argument, says({"nn::transformer_block: the sub-layers' widths disagree", "ln_2 6"}));
  nn::repeated<nn::transformer_block<P>> stack(std::vector{nn::transformer_block<P>(gpt_config)});
  decltype(stack)::saved<float> empty;
  auto grads = stack.zero_gradients();
  const xt::xtensor<float, 3> dy = xt::zeros<float>({1, 2, 8});
  CHECK_THROWS_MATCHES((void)stack.backward(empty, dy, grads), std::invalid_argument,
                       says({"nn::repeated::backward: 1 layers but 0 saved contexts"}));
}

TEST_CASE("transformer_block<from_scope<...>>: the scope's policy, the same bits as the compile-time block",
          "[nn][transformer_block][from_scope]") {
  using scoped = mixprec::from_scope<mixprec::full_precision, mixprec::mixed_bfloat16, mixprec::mixed_float16>;
  using P = mixprec::mixed_bfloat16;
  const mixprec::policy_scope scope("p=f32,c=bf16,o=f32");
  for (const bool rms : {false, true}) {
    const auto check = [&](auto& b, const auto& typed) {
      CHECK(b.policy() == mixprec::to_runtime_policy(P{}));
      // The same parameters, written through the scoped walk in the typed block's order.
      std::vector<std::vector<float>> from_typed;
      typed.for_each_parameter([&](std::string_view, const auto& t) { from_typed.push_back(values(t)); });
      std::size_t i = 0;
      b.for_each_parameter([&](std::string_view, auto& t) {
        for (std::size_t k = 0; k < t.size(); ++k) t.data()[k] = from_typed[i][k];
        ++i;
      });
      REQUIRE(i == from_typed.size());
      const auto x = tensor_from<float>(gradcheck::uniform(2 * 5 * 8, 81), std::array<std::size_t, 3>{2, 5, 8});
      CHECK(values(b(x)) == values(typed(x)));
      // Training through visit: the compile-time block's forward and backward, the typed block's bits.
      const auto train = [&](const auto& block) {
        typename std::remove_cvref_t<decltype(block)>::template saved<float> ctx;
        const auto y = block.forward(x, ctx);
        auto g = block.zero_gradients();
        std::vector<std::vector<float>> out{values(y), values(block.backward(ctx, y, g))};
        g.for_each([&](std::string_view, const auto& t) { out.push_back(values(t)); });
        return out;
      };
      CHECK(b.visit(train) == train(typed));
    };
    if (rms) {
      nn::transformer_block<scoped, nn::rms_norm<scoped>> b(llama_config);
      REQUIRE(b.get_if<P>() != nullptr);
      check(b, make_block<P, nn::rms_norm<P>>(llama_config, 90));
    } else {
      nn::transformer_block<scoped> b(gpt_config);
      REQUIRE(b.get_if<P>() != nullptr);
      check(b, make_block<P, nn::layer_norm<P>>(gpt_config, 91));
    }
  }
  const mixprec::policy_scope other("p=bf16,c=bf16,o=bf16");
  CHECK_THROWS_MATCHES(nn::transformer_block<scoped>(gpt_config), mixprec::policy_error,
                       says({"mixprec::nn::transformer_block<from_scope<...>>: the policy p=bf16,c=bf16,o=bf16",
                             "is not one of the 3 listed policies"}));
}

}  // namespace transformer_block_test
