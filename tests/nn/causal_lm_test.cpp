// Tests of nn::causal_lm (nn/causal_lm.hpp): the forward pass bit for bit the parts called by hand,
// float64 central differences for every parameter (GPT-2 style with learned positions, Llama style with
// rotary grouped-query attention), decoding token by token against the whole-sequence forward pass
// (and its probe sites), the names of the walks, a state-dict round trip, the from_scope form against the
// compile-time model, and every error's message.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/nn/causal_lm.hpp"
#include "mixprec/policies/policy_scope.hpp"
#include "mixprec/train/state_dict.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"
#include "support/error_message.hpp"

namespace causal_lm_test {

namespace nn = mixprec::nn;
using test_support::says;

namespace {

constexpr std::size_t vocab = 7, width = 8, seq = 5;

/// GPT-2's shape: layer_norm, learned positions, GELU MLP.
const nn::causal_lm_config gpt_config{.vocab = vocab,
                                      .n_layers = 2,
                                      .max_positions = 6,
                                      .block = {.attention = {.d_model = width, .n_heads = 2, .causal = true}}};
/// Llama's shape: rotary grouped-query attention, SwiGLU, no position table.
const nn::causal_lm_config llama_config{
    .vocab = vocab,
    .n_layers = 2,
    .block = {.attention = {.d_model = width,
                            .n_heads = 4,
                            .n_kv_heads = 2,
                            .causal = true,
                            .rotary = nn::rotary_config{.layout = nn::rope_layout::adjacent_pairs}},
              .hidden = 12,
              .activation = nn::ffn_activation::swiglu}};

/// A model with every parameter drawn from `seed` (norm scales around 1).
template <class P, class Norm>
nn::causal_lm<P, Norm> make_model(const nn::causal_lm_config& c, unsigned seed) {
  nn::causal_lm<P, Norm> m(c);
  unsigned s = seed;
  m.for_each_parameter([&](std::string_view name, auto& p) {
    const bool norm = name.find("ln_") != std::string_view::npos;
    const auto v = gradcheck::uniform(p.size(), ++s, norm ? 0.5 : -0.5, norm ? 1.5 : 0.5);
    for (std::size_t i = 0; i < p.size(); ++i)
      p.data()[i] = static_cast<typename std::remove_cvref_t<decltype(p)>::value_type>(v[i]);
  });
  return m;
}

xt::xtensor<std::int32_t, 2> ids_of(std::vector<std::int32_t> v, std::size_t rows, std::size_t cols) {
  xt::xtensor<std::int32_t, 2> out = xt::xtensor<std::int32_t, 2>::from_shape({rows, cols});
  for (std::size_t i = 0; i < v.size(); ++i) out.data()[i] = v[i];
  return out;
}

template <class A>
std::vector<double> values(const A& a) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = static_cast<double>(a.data()[i]);
  return out;
}

}  // namespace

TEST_CASE("causal_lm: forward is its parts called by hand, bit for bit", "[nn][causal_lm]") {
  using P = layer_tests::p_c_bf16;
  const auto m = make_model<P, nn::layer_norm<P>>(gpt_config, 1);
  const auto ids = ids_of({1, 5, 0, 6, 2, 3, 3, 4, 1, 0}, 2, seq);
  typename nn::causal_lm<P>::saved ctx;
  const auto logits = m.forward(ids, ctx);
  REQUIRE(logits.shape() == std::array<std::size_t, 3>{2, seq, vocab});
  CHECK(values(m.logits(ids)) == values(logits));

  // The stream: token rows plus position rows, each sum rounded once to float; then the parts.
  const auto tok = m.token_embedding()(ids);
  const auto pos = (*m.position_embedding())(ids_of({0, 1, 2, 3, 4, 0, 1, 2, 3, 4}, 2, seq));
  xt::xtensor<float, 3> x = xt::xtensor<float, 3>::from_shape({2, seq, width});
  for (std::size_t i = 0; i < x.size(); ++i)
    x.data()[i] = static_cast<float>(tok.data()[i]) + static_cast<float>(pos.data()[i]);
  const auto by_hand = m.token_embedding().attend_logits<float>(m.final_norm()(m.blocks()(x)));
  CHECK(values(logits) == values(by_hand));
}

TEST_CASE("causal_lm: backward matches float64 central differences for every parameter", "[nn][causal_lm][gradcheck]") {
  using P = layer_tests::p_f64;
  const auto ids = ids_of({1, 5, 0, 6, 2, 3, 3, 4}, 2, 4);
  const auto check = [&](auto m, std::size_t tensors) {
    const auto w = gradcheck::uniform(2 * 4 * vocab, 3);
    typename decltype(m)::saved ctx;
    const auto logits = m.forward(ids, ctx);
    const auto dlogits = gradcheck::tensor_from<double>(w, std::array<std::size_t, 3>{2, 4, vocab});
    auto g = m.zero_gradients();
    m.backward(ctx, dlogits, g);
    auto loss = [&] {
      m.for_each_parameter([](std::string_view, auto&) {});  // drop any packed weights
      return gradcheck::weighted_sum(m.logits(ids), w);
    };
    std::size_t checked = 0;
    nn::for_each_parameter(m, g, [&](std::string_view name, auto& p, const auto& dp) {
      gradcheck::require_close(std::string(name), gradcheck::flat_values(dp),
                               gradcheck::numeric_gradient(p.data(), p.size(), loss));
      ++checked;
    });
    CHECK(checked == tensors);
    CHECK(values(logits) == values(m.logits(ids)));
  };
  // wte, wpe, 2 × (ln_1, wq, wk, wv, wo, ln_2, w1, w2), ln_f
  check(make_model<P, nn::layer_norm<P>>(gpt_config, 10), 2 + 2 * 8 + 1);
  // wte, 2 × (ln_1, wq, wk, wv, wo, ln_2, w1, w2, w3), ln_f
  check(make_model<P, nn::rms_norm<P>>(llama_config, 20), 1 + 2 * 9 + 1);
}

TEST_CASE("causal_lm: backward tells each part whose gradients are final, in reverse walk order", "[nn][causal_lm]") {
  using P = layer_tests::p_c_bf16;
  const auto m = make_model<P, nn::layer_norm<P>>(gpt_config, 3);
  const auto ids = ids_of({1, 5, 0, 6, 2, 3, 3, 4, 1, 0}, 2, seq);
  typename nn::causal_lm<P>::saved ctx;
  const auto logits = m.forward(ids, ctx);
  const auto w = gradcheck::uniform(logits.size(), 4);
  const auto dlogits = gradcheck::tensor_from<float>(w, std::array<std::size_t, 3>{2, seq, vocab});
  auto plain = m.zero_gradients();
  m.backward(ctx, dlogits, plain);
  // With the hook: at each call, snapshot the gradients under the prefix; at the end they must not
  // have changed since (final when told), and everything equals the backward without the hook.
  auto hooked = m.zero_gradients();
  std::vector<std::string> order;
  std::vector<std::pair<std::string, std::vector<double>>> snapshots;
  m.backward(ctx, dlogits, hooked, [&](std::string_view prefix) {
    order.emplace_back(prefix);
    hooked.for_each([&](std::string_view name, const auto& g) {
      if (name.size() > prefix.size() && name.starts_with(prefix) && name[prefix.size()] == '.')
        snapshots.emplace_back(std::string(name), values(g));
    });
  });
  CHECK(order == std::vector<std::string>{"ln_f", "layers.1", "layers.0", "wpe", "wte"});
  std::vector<std::string> names, told;
  hooked.for_each([&](std::string_view name, const auto&) { names.emplace_back(name); });
  for (const auto& snapshot : snapshots) told.push_back(snapshot.first);
  std::sort(names.begin(), names.end());
  std::sort(told.begin(), told.end());
  CHECK(told == names);  // every gradient told once
  const std::size_t tensors = names.size();
  std::size_t compared = 0;
  hooked.for_each([&](std::string_view name, const auto& g) {
    for (const auto& [snap_name, snap] : snapshots) {
      if (snap_name != name) continue;
      CHECK(snap == values(g));
      ++compared;
    }
  });
  CHECK(compared == tensors);
  std::vector<std::vector<double>> a, b;
  plain.for_each([&](std::string_view, const auto& g) { a.push_back(values(g)); });
  hooked.for_each([&](std::string_view, const auto& g) { b.push_back(values(g)); });
  CHECK(a == b);
}

TEST_CASE("causal_lm: decoding token by token gives the whole-sequence forward's logits", "[nn][causal_lm][decode]") {
  const std::vector<int> tokens{3, 0, 6, 6, 2};
  const auto ids = ids_of({3, 0, 6, 6, 2}, 1, seq);
  SECTION("float64, rotary and learned positions: to 1e-12") {
    using P = layer_tests::p_f64;
    for (const auto& config : {llama_config, nn::causal_lm_config{gpt_config.vocab, 2, 6, llama_config.block}}) {
      const auto m = make_model<P, nn::rms_norm<P>>(config, 30);
      const auto whole = m.logits(ids);
      auto state = m.make_decode_state(seq);
      std::vector<double> first;
      for (std::size_t t = 0; t < seq; ++t) {
        REQUIRE(state.position() == t);
        const auto step = m.decode(tokens[t], state);
        for (std::size_t v = 0; v < vocab; ++v) CHECK(step(v) == Approx(whole(0, t, v)).margin(1e-12));
        if (t == 0) first = values(step);
      }
      state.reset();  // the same sequence again, from position 0
      CHECK(state.position() == 0);
      CHECK(values(m.decode(tokens[0], state)) == first);
    }
  }
  SECTION("c=bf16: within bfloat16 roundings, and the probe sites in order") {
    using P = layer_tests::p_c_bf16;
    const auto m = make_model<P, nn::rms_norm<P>>(llama_config, 40);
    const auto whole = m.logits(ids);
    auto state = m.make_decode_state(seq);
    mixprec::diagnostics::recording_probe probe;
    for (std::size_t t = 0; t < seq; ++t) {
      const auto step = m.decode(tokens[t], state, probe);
      // The cached and the whole-sequence attention sum in other orders: logits of magnitude <= 2 agree
      // to a few bfloat16 ulps at 1 (2^-7 each); 0.011 measured.
      for (std::size_t v = 0; v < vocab; ++v) CHECK(step(v) == Approx(whole(0, t, v)).margin(0.03));
    }
    std::vector<std::string> sites;
    for (const auto& site : probe.sites()) sites.push_back(site.name);
    CHECK(sites == std::vector<std::string>{"embedding", "layers.0.attention", "layers.0.residual_attn", "layers.0.ffn",
                                            "layers.0.residual", "layers.1.attention", "layers.1.residual_attn",
                                            "layers.1.ffn", "layers.1.residual", "final_norm", "logits"});
    CHECK(probe.sites().back().calls == seq);
  }
}

TEST_CASE("causal_lm: names, gradient tree, state dict", "[nn][causal_lm]") {
  using P = layer_tests::p_f32;
  auto m = make_model<P, nn::layer_norm<P>>(gpt_config, 50);
  std::vector<std::string> names, grad_names;
  m.for_each_parameter([&](const auto& name, const auto&) { names.emplace_back(name); });
  auto g = m.zero_gradients();
  g.for_each([&](const auto& name, const auto&) { grad_names.emplace_back(name); });
  REQUIRE(names.size() == 2 + 2 * 8 + 1);
  CHECK(names[0] == "wte.embedding");
  CHECK(names[1] == "wpe.embedding");
  CHECK(names[2] == "layers.0.ln_1.scale");
  CHECK(names[3] == "layers.0.attn.wq.kernel");
  CHECK(names[17] == "layers.1.mlp.w2.kernel");
  CHECK(names.back() == "ln_f.scale");
  CHECK(grad_names == names);
  CHECK(nn::parameter_count(m) == 7 * 8 + 6 * 8 + 2 * (8 + 4 * 64 + 8 + 2 * 8 * 32) + 8);
  std::vector<std::string> projections;
  m.for_each_projection([&](const std::string& name, auto&) { projections.push_back(name); });
  CHECK(projections.front() == "layers.0.attn.wq");
  CHECK(projections.back() == "layers.1.mlp.w2");

  const nn::causal_lm<P, nn::rms_norm<P>> rotary(llama_config);
  CHECK(rotary.position_embedding() == nullptr);
  CHECK(!rotary.zero_gradients().wpe.has_value());

  mixprec::train::checkpoint ck;
  mixprec::train::save_state(ck, m, "model");
  auto loaded = nn::causal_lm<P>(gpt_config);
  mixprec::train::load_state(ck, loaded, "model");
  const auto ids = ids_of({1, 2, 3, 4, 5}, 1, seq);
  CHECK(values(loaded.logits(ids)) == values(m.logits(ids)));
  nn::causal_lm<P> no_positions(nn::causal_lm_config{vocab, 2, 0, gpt_config.block});
  CHECK_THROWS_MATCHES(mixprec::train::load_state(ck, no_positions, "model"), mixprec::train::safetensors_error,
                       says({"model.wpe.embedding"}));
}

TEST_CASE("causal_lm: errors", "[nn][causal_lm][errors]") {
  using P = layer_tests::p_f32;
  using R = nn::causal_lm<P, nn::rms_norm<P>>;
  auto bad = llama_config;
  bad.vocab = 0;
  CHECK_THROWS_MATCHES(R(bad), std::invalid_argument, says({"nn::causal_lm: vocab is 0"}));
  bad = llama_config;
  bad.n_layers = 0;
  CHECK_THROWS_MATCHES(R(bad), std::invalid_argument, says({"nn::causal_lm: n_layers is 0"}));
  bad = llama_config;
  bad.block.attention.causal = false;
  CHECK_THROWS_MATCHES(R(bad), std::invalid_argument,
                       says({"nn::causal_lm: block.attention.causal is false", "causal attention"}));

  const R positions(nn::causal_lm_config{vocab, 1, 4, llama_config.block});
  CHECK_THROWS_MATCHES((void)positions.make_decode_state(5), std::invalid_argument,
                       says({"make_decode_state: capacity 5 must be at least 1 and at most max_positions", "= 4"}));
  CHECK_THROWS_MATCHES((void)positions.make_decode_state(0), std::invalid_argument,
                       says({"make_decode_state: capacity 0 must be at least 1"}));
  CHECK_THROWS_MATCHES((void)positions.logits(ids_of({1, 2, 3, 4, 5}, 1, 5)), std::invalid_argument,
                       says({"nn::causal_lm: the sequence has 5 tokens but the model has max_positions = 4"}));

  const R m(llama_config);
  auto state = m.make_decode_state(2);
  CHECK_THROWS_AS((void)m.decode(static_cast<int>(vocab), state), std::out_of_range);
  std::vector<float> short_logits(vocab - 1);
  CHECK_THROWS_MATCHES(m.decode_into(short_logits, 1, state), std::invalid_argument,
                       says({"decode_into: logits has 6 elements; make it [vocab] = [7]"}));
  (void)m.decode(1, state);
  (void)m.decode(2, state);
  CHECK_THROWS_MATCHES((void)m.decode(3, state), std::length_error,
                       says({"decode_into: the state already holds its capacity of 2 tokens", "reset()"}));
}

TEST_CASE("causal_lm<from_scope<...>>: the scope's policy for the whole model, the same bits",
          "[nn][causal_lm][from_scope]") {
  using scoped = mixprec::from_scope<mixprec::full_precision, mixprec::mixed_bfloat16, mixprec::mixed_float16>;
  using P = mixprec::mixed_float16;
  const mixprec::policy_scope scope(P{});
  nn::causal_lm<scoped, nn::rms_norm<scoped>> m(llama_config);
  CHECK(m.policy() == mixprec::to_runtime_policy(P{}));
  REQUIRE(m.get_if<P>() != nullptr);
  CHECK(m.get_if<mixprec::mixed_bfloat16>() == nullptr);
  auto typed = make_model<P, nn::rms_norm<P>>(llama_config, 60);

  // The parameters through the scoped walk: the same names and tensors as the typed model's.
  mixprec::train::checkpoint ck;
  mixprec::train::save_state(ck, typed, "");
  mixprec::train::load_state(ck, m, "");
  const auto ids = ids_of({1, 5, 0, 6, 2, 3, 3, 4, 1, 0}, 2, seq);
  const auto targets = ids_of({5, 0, 6, 2, 3, 3, 4, 1, 0, 2}, 2, seq);
  CHECK(values(m.logits(ids)) == values(typed.logits(ids)));
  CHECK(m.loss(ids, targets) == typed.loss(ids, targets));

  // Training and decoding inside one visit, typed: the same gradients and logits as the typed model's.
  std::vector<std::vector<double>> scoped_grads, typed_grads;
  auto typed_state = typed.make_decode_state(seq);
  m.visit([&](auto& model) {
    typename std::remove_cvref_t<decltype(model)>::saved ctx;
    const auto logits = model.forward(ids, ctx);
    auto g = model.zero_gradients();
    model.backward(ctx, logits, g);
    g.for_each([&](std::string_view, const auto& t) { scoped_grads.push_back(values(t)); });
    auto state = model.make_decode_state(seq);
    CHECK(values(model.decode(3, state)) == values(typed.decode(3, typed_state)));
  });
  typename decltype(typed)::saved ctx;
  const auto logits = typed.forward(ids, ctx);
  auto g = typed.zero_gradients();
  typed.backward(ctx, logits, g);
  g.for_each([&](std::string_view, const auto& t) { typed_grads.push_back(values(t)); });
  CHECK(scoped_grads == typed_grads);

  const mixprec::policy_scope other("p=bf16,c=bf16,o=bf16");
  CHECK_THROWS_MATCHES((nn::causal_lm<scoped, nn::rms_norm<scoped>>(llama_config)), mixprec::policy_error,
                       says({"mixprec::nn::causal_lm<from_scope<...>>: the policy p=bf16,c=bf16,o=bf16",
                             "is not one of the 3 listed policies"}));
}

}  // namespace causal_lm_test
