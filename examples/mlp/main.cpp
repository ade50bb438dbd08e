// An MLP tells two spirals apart (float32 params, float16 compute, dynamic loss scaling, AdamW); a run resumed
// from the step-150 train state must end on the uninterrupted run's bits. See docs/training_your_own_model.md.
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <vector>

#include "mixprec/mixprec.hpp"

namespace nn = mixprec::nn;
namespace train = mixprec::train;
using P = mixprec::mixed_float16;  // param float32, compute float16, output float32
using mlp = nn::sequential<nn::dense<P>, nn::feed_forward<P>, nn::dense<P>>;
constexpr float pi = std::numbers::pi_v<float>;

struct run {
  std::mt19937 rng{42};
  mlp model{nn::dense<P>(2, 64, rng), nn::feed_forward<P>::init(nn::ffn_activation::gelu, 64, 256, rng),
            nn::dense<P>(64, 2, rng)};
  train::adamw opt{{.weight_decay = 0.01}};
  mixprec::dynamic_loss_scale ls{{.initial_scale = 65536.0f, .period = 50}};

  double step() {
    xt::xtensor<float, 2> x({256, 2});
    std::vector<std::int32_t> labels(256);
    for (std::size_t i = 0; i < 256; ++i) {  // half of the points on each spiral
      labels[i] = static_cast<std::int32_t>(i % 2);
      const float r = std::uniform_real_distribution<float>(0.05f, 1.0f)(rng), angle = 3 * pi * r + pi * labels[i];
      x(i, 0) = r * std::cos(angle), x(i, 1) = r * std::sin(angle);
    }
    mlp::saved<float> ctx;
    const auto logits = model.forward(x, ctx);
    xt::xtensor<float, 2> dlogits(logits.shape());  // d(S · mean loss)/dlogits: the loss scaled by S
    const double loss = nn::softmax_cross_entropy(logits, labels, dlogits, ls.loss_scale() / 256);
    auto grads = model.zero_gradients();
    (void)model.backward(ctx, dlogits, grads);
    train::scaled_step(ls, opt, 3e-3, model, grads, {.max_norm = 1.0});  // unscale, check, adjust, step
    return loss;
  }
  auto parts() {  // the train state: everything a resume needs, saved under these prefixes
    return std::vector<train::state_ref>{{"model", model}, {"optimizer", opt}, {"loss_scale", ls}, {"rng", rng}};
  }
};

int main() {
  run first, resumed;
  for (int s = 1; s <= 300; ++s) {
    const double loss = first.step();
    if (s % 50 == 0) std::printf("step %3d  loss %.4f  loss scale %g\n", s, loss, first.ls.loss_scale());
    if (s == 150) train::save_states("mlp_train_state.safetensors", first.parts());
  }
  train::load_states("mlp_train_state.safetensors", resumed.parts());  // strict: names, shapes, dtypes
  for (int s = 151; s <= 300; ++s) resumed.step();
  train::checkpoint a, b;  // the two models' state dicts, compared byte for byte
  train::save_state(a, first.model);
  train::save_state(b, resumed.model);
  std::printf("resumed at step 150: parameters %s\n", a.to_bytes() == b.to_bytes() ? "bit-identical" : "DIFFERENT");
  return a.to_bytes() == b.to_bytes() ? 0 : 1;
}
