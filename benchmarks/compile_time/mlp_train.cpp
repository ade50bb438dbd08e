// Compile-time benchmark: a new user's training step, a 2-layer MLP (feed-forward block and a dense
// head) under mixed_float16 with dynamic loss scaling, global-norm clipping and AdamW.
#include <mixprec/nn/cross_entropy.hpp>
#include <mixprec/nn/dense.hpp>
#include <mixprec/nn/feed_forward.hpp>
#include <mixprec/policies/loss_scale.hpp>
#include <mixprec/train/adamw.hpp>
#include <mixprec/train/clip.hpp>
#include <xtensor/xadapt.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace nn = mixprec::nn;
using P = mixprec::mixed_float16;

int main() {
  std::mt19937 rng(1);
  auto block = nn::feed_forward<P>::init(nn::ffn_activation::gelu, 32, 64, rng, mixprec::nn::use_bias::yes);
  nn::dense<P> head(32, 10, rng);
  mixprec::train::adamw opt;
  mixprec::dynamic_loss_scale ls({.initial_scale = 1024.0f});
  xt::xtensor<float, 2> x = xt::ones<float>({16, 32});
  std::vector<std::int32_t> targets(16, 3);
  for (int step = 0; step < 3; ++step) {
    nn::feed_forward<P>::saved<float> block_ctx;
    nn::dense<P>::saved<float> head_ctx;
    const auto h = block.forward(x, block_ctx);
    const auto logits = head.forward(h, head_ctx);
    std::vector<float> dlogits(logits.size());
    (void)nn::softmax_cross_entropy(std::span<const float>(logits.data(), logits.size()), 10, targets,
                                    std::span<float>(dlogits), ls.loss_scale());
    auto head_grads = head.zero_gradients();
    auto block_grads = block.zero_gradients();
    const auto dh = head.backward(head_ctx, xt::adapt(dlogits, {std::size_t{16}, std::size_t{10}}), head_grads);
    (void)block.backward(block_ctx, dh, block_grads);
    std::vector<std::span<float>> grads;
    const auto collect = [&](std::string_view, auto& g) { grads.emplace_back(g.data(), g.size()); };
    head_grads.for_each(collect);
    block_grads.for_each(collect);
    bool finite = true;
    for (auto g : grads) {
      for (float& v : g) {
        v /= ls.loss_scale();
        finite = finite && std::isfinite(v);
      }
    }
    ls.adjust(finite);
    if (!finite) continue;
    (void)mixprec::train::clip_grad_norm(1.0, grads);
    opt.begin_step(1e-3);
    std::size_t i = 0;
    const auto update = [&](const std::string& name, auto& p) {
      using T = typename std::remove_cvref_t<decltype(p)>::value_type;
      opt.update(name, std::span<T>(p.data(), p.size()), std::span<const float>(grads[i++]),
                 mixprec::train::decays_by_rank(p.dimension()));
    };
    head.for_each_parameter([&](std::string_view name, auto& p) { update("head." + std::string(name), p); });
    block.for_each_parameter([&](std::string_view name, auto& p) { update("block." + std::string(name), p); });
  }
  return 0;
}
