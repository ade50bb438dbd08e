// Compile-time benchmark: one nn::dense under mixed_bfloat16: forward, zero_gradients, backward.
#include <mixprec/nn/dense.hpp>

#include <random>

int main() {
  std::mt19937 rng(1);
  mixprec::nn::dense<mixprec::mixed_bfloat16> layer(64, 32, rng);
  xt::xtensor<float, 2> x = xt::ones<float>({8, 64});
  mixprec::nn::dense<mixprec::mixed_bfloat16>::saved<float> ctx;
  const auto y = layer.forward(x, ctx);
  auto grads = layer.zero_gradients();
  const auto dx = layer.backward(ctx, y, grads);
  return dx.size() == x.size() ? 0 : 1;
}
