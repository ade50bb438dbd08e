// Issue 11: a dense layer's products in float8 (scaled::float8_dot, delayed scaling, e4m3fn forward and
// e5m2 backward; scaled::float8_weight_dot, weight-only) against the same layer's plain bfloat16 products
// (policy p=f32,c=bf16,o=f32), in the same run. One training step of the layer: forward, backward (dx and
// the kernel gradient), the optimiser's write to the kernel (`parameters_changed`: every kept packing of
// the kernel, bfloat16's and float8's, is made again in the next step, as in training) and, for float8,
// the end-of-step scale update. items/s = rows per second.
//
//   mixprec_float8_benchmark [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstddef>
#include <memory>
#include <random>

#include "mixprec/nn/dense.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/scaled/float8_dot.hpp"

namespace {

using P = mixprec::policy<float, mixprec::bfloat16, float>;
namespace nn = mixprec::nn;

enum class product : int { bfloat16 = 0, float8 = 1, float8_weights = 2 };

void dense_step(benchmark::State& state) {
  const auto kind = static_cast<product>(state.range(0));
  const auto rows = static_cast<std::size_t>(state.range(1));
  const auto width = static_cast<std::size_t>(state.range(2));
  std::mt19937 rng(1);
  nn::dense<P> layer(width, width, rng, nn::use_bias::no);
  std::shared_ptr<mixprec::scaled::float8_dot<>> fp8;
  if (kind == product::float8) {
    fp8 = std::make_shared<mixprec::scaled::float8_dot<>>();
    layer.set_dot(fp8);
  } else if (kind == product::float8_weights) {
    layer.set_dot(std::make_shared<mixprec::scaled::float8_weight_dot>());
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({rows, width});
  xt::xtensor<float, 2> dy = xt::xtensor<float, 2>::from_shape({rows, width});
  for (auto& v : x) v = normal(rng);
  for (auto& v : dy) v = normal(rng) * 1e-3f;
  auto grads = layer.zero_gradients();
  nn::dense<P>::saved<float> ctx;
  for (auto _ : state) {
    auto y = layer.forward(x, ctx);
    auto dx = layer.backward(ctx, dy, grads);
    layer.parameters_changed();  // the optimiser step
    if (fp8) fp8->update_scales();
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(dx.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(rows));
  state.SetLabel(kind == product::bfloat16 ? "bfloat16" : kind == product::float8 ? "float8" : "float8_weights");
}

}  // namespace

BENCHMARK(dense_step)
    ->ArgNames({"product", "rows", "width"})
    ->ArgsProduct({{0, 1, 2}, {768}, {128, 512}})
    ->ArgsProduct({{0, 1, 2}, {4096}, {1024}})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
