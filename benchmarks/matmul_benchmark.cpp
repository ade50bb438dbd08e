// Google Benchmark: mixprec's matrix products against oneDNN's matmul primitive and Eigen's GEMM, in
// the same run (issue 8). benchmarks/matmul_report.py turns one JSON run into the tables of
// docs/performance.md (ratios against the best peer of the same run).
//
// Y[m, n] = X[m, k] · W with W stored [n, k] (PyTorch / llama2.c "out, in"), float32 accumulation.
// Arguments {m, k, n, threads}: the shapes M2048·K1024·N4096, M2048·K4096·N1024, M1024·K1024·N1024
// and the single-row product M1·K4096·N4096, each with 1 and 2 threads; the training shapes
// M768·K128·N384, M768·K512·N128 and M768·K128·N65 on 1 thread.
//
//  - dense/<policy>:      nn::dense<P> with its weights cached (packed once, before timing), through
//                         dense::project into a caller's buffer: p=f32 | p=f32,c=bf16 | p=f16 (float16
//                         weights). The former p=e4m3,c=bf16 row (float8 weights) is gone: no policy holds
//                         a float8 type (docs/policies.md, "float8 and smaller formats"); weight-only
//                         float8 is scaled::float8_weight_dot, timed in float8_benchmark.cpp.
//  - float8_weights/c=bf16: weights stored as float8_e4m3fn, kept packed as their own bytes
//                         (kernels::pack_b<bfloat16>, once, before timing) and multiplied in bfloat16:
//                         the product scaled::float8_weight_dot runs (without its per-column scales)
//  - matmul/<policy>:     kernels::matmul<C> with W as stored, converted and packed on every call
//  - onednn_f32/_bf16:    oneDNN's matmul primitive (its own run-time ISA dispatch; bf16 operands,
//                         float32 accumulation, bf16 output), created once outside the timing
//  - eigen_f32:           Eigen's float GEMM (this build's flags: no -march)
//
// Threads: mixprec::set_num_threads for mixprec, omp_set_num_threads for oneDNN (Debian's oneDNN runs
// on OpenMP) and Eigen. Counters: FLOP/s = 2 m n k per iteration, W_bytes/s = bytes of the weights as
// the product reads them (the packed copy for dense: 4 bytes per weight for f32, 2 for bf16/f16).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/packed_b.hpp"
#include "mixprec/kernels/threads.hpp"

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/arrays/xtensor.hpp"

#include <xtensor/xadapt.hpp>
#include "mixprec/core.hpp"
#include "mixprec/nn/dense.hpp"
#include "peer_threads.hpp"

#if MIXPREC_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

namespace {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;
using mixprec::kernels::b_layout;

struct problem {
  std::size_t m, k, n, threads;
  std::vector<float> x, w, y;
};

problem make_problem(const benchmark::State& state) {
  problem p{static_cast<std::size_t>(state.range(0)),
            static_cast<std::size_t>(state.range(1)),
            static_cast<std::size_t>(state.range(2)),
            static_cast<std::size_t>(state.range(3)),
            {},
            {},
            {}};
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.x.resize(p.m * p.k);
  p.w.resize(p.n * p.k);
  p.y.resize(p.m * p.n);
  for (auto& v : p.x) v = normal(rng);
  for (auto& v : p.w) v = normal(rng) * 0.05f;
  return p;
}

void set_counters(benchmark::State& state, const problem& p, double weight_bytes) {
  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_bytes/s"] = benchmark::Counter(weight_bytes, benchmark::Counter::kIsIterationInvariantRate);
}

template <class T>
std::vector<T> converted(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
  return out;
}

template <class P>
void dense(benchmark::State& state) {
  auto p = make_problem(state);
  const threads_for threads(p.threads);
  using C = mixprec::nn::compute_t<P, float>;
  xt::xtensor<float, 2> w = xt::adapt(p.w, std::vector<std::size_t>{p.n, p.k});
  const auto layer = mixprec::nn::dense<P>::from_weights(w, mixprec::nn::weight_layout::out_in);
  const std::span<const float> x(p.x);
  const std::span<float> y(p.y);
  layer.template project<C>(x, p.m, y);  // packs the weights (kept by the layer)
  for (auto _ : state) {
    layer.template project<C>(x, p.m, y);
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  const double bytes_per_weight = std::is_same_v<C, float> ? 4.0 : 2.0;
  set_counters(state, p, bytes_per_weight * static_cast<double>(p.w.size()));
}

void float8_weights(benchmark::State& state) {
  auto p = make_problem(state);
  const threads_for threads(p.threads);
  std::vector<mixprec::float8_e4m3fn> w(p.w.size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = mixprec::saturate_cast<mixprec::float8_e4m3fn>(p.w[i] * 64.0f);
  const auto packed = mixprec::kernels::pack_b<bfloat16>(w, p.k, p.n, b_layout::n_k);
  for (auto _ : state) {
    mixprec::kernels::matmul<bfloat16>(p.x, packed, p.y, p.m);
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p, static_cast<double>(packed.element_bytes() * w.size()));
}

template <class Compute, class Weight>
void matmul(benchmark::State& state) {
  auto p = make_problem(state);
  const threads_for threads(p.threads);
  const auto w = converted<Weight>(p.w);
  for (auto _ : state) {
    mixprec::kernels::matmul<Compute>(p.x, w, p.y, {p.m, p.k, p.n}, b_layout::n_k);
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p, static_cast<double>(sizeof(Weight) * w.size()));
}

void eigen_f32(benchmark::State& state) {
  auto p = make_problem(state);
  const threads_for threads(p.threads);
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const Mat> x(p.x.data(), static_cast<Eigen::Index>(p.m), static_cast<Eigen::Index>(p.k));
  const Eigen::Map<const Mat> w(p.w.data(), static_cast<Eigen::Index>(p.n), static_cast<Eigen::Index>(p.k));
  Eigen::Map<Mat> y(p.y.data(), static_cast<Eigen::Index>(p.m), static_cast<Eigen::Index>(p.n));
  for (auto _ : state) {
    y.noalias() = x * w.transpose();
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p, 4.0 * static_cast<double>(p.w.size()));
}

#if MIXPREC_HAVE_ONEDNN
// oneDNN matmul: src [m, k], weights [k, n] given with the strides of an [n, k] array (no copy), dst [m, n].
template <dnnl::memory::data_type DT>
void onednn(benchmark::State& state) {
  auto p = make_problem(state);
  const threads_for threads(p.threads);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const auto m = static_cast<dnnl::memory::dim>(p.m);
  const auto k = static_cast<dnnl::memory::dim>(p.k);
  const auto n = static_cast<dnnl::memory::dim>(p.n);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc src_md({m, k}, DT, tag::ab);
  const dnnl::memory::desc wei_md({k, n}, DT, tag::ba);  // [n, k] storage read as [k, n]
  const dnnl::memory::desc dst_md({m, n}, DT, tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_md, dst_md), engine);
  } catch (const dnnl::error& e) {
    // oneDNN 2.6 implements bf16 matmul only from AVX-512 (avx512_core) up.
    state.SkipWithError((std::string("oneDNN has no matmul for these types on this CPU: ") + e.what()).c_str());
    return;
  }
  dnnl::memory src(src_md, engine), wei(wei_md, engine), dst(dst_md, engine);
  if constexpr (DT == dt::f32) {
    std::copy(p.x.begin(), p.x.end(), static_cast<float*>(src.get_data_handle()));
    std::copy(p.w.begin(), p.w.end(), static_cast<float*>(wei.get_data_handle()));
  } else {
    const auto xb = converted<bfloat16>(p.x);
    const auto wb = converted<bfloat16>(p.w);
    std::copy(xb.begin(), xb.end(), static_cast<bfloat16*>(src.get_data_handle()));
    std::copy(wb.begin(), wb.end(), static_cast<bfloat16*>(wei.get_data_handle()));
  }
  dnnl::matmul prim(pd);
  for (auto _ : state) {
    prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    stream.wait();
    benchmark::ClobberMemory();
  }
  state.SetLabel(pd.impl_info_str());
  set_counters(state, p, (DT == dt::f32 ? 4.0 : 2.0) * static_cast<double>(p.w.size()));
}
#endif

void shapes(benchmark::internal::Benchmark* b) {
  for (long threads : {1L, 2L}) {
    b->Args({2048, 1024, 4096, threads});
    b->Args({2048, 4096, 1024, threads});
    b->Args({1024, 1024, 1024, threads});
    b->Args({1, 4096, 4096, threads});
  }
  // The training shapes of nanoGPT's shakespeare_char recipe, one worker's rows (issue 38): attention's
  // projections and the feed-forward's two products, and the classifier.
  b->Args({768, 128, 384, 1});
  b->Args({768, 512, 128, 1});
  b->Args({768, 128, 65, 1});
  b->Args({3, 40, 20, 1});  // tiny: the ctest smoke run (--benchmark_filter=/m:3/)
  b->ArgNames({"m", "k", "n", "threads"});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}

}  // namespace

BENCHMARK_TEMPLATE(dense, policy<float>)->Name("dense/p=f32")->Apply(shapes);
BENCHMARK_TEMPLATE(dense, policy<float, bfloat16, float>)->Name("dense/p=f32,c=bf16")->Apply(shapes);
BENCHMARK_TEMPLATE(dense, policy<float16>)->Name("dense/p=f16")->Apply(shapes);
BENCHMARK(float8_weights)->Name("float8_weights/c=bf16")->Apply(shapes);
BENCHMARK_TEMPLATE(matmul, float, float)->Name("matmul/p=f32")->Apply(shapes);
BENCHMARK_TEMPLATE(matmul, bfloat16, bfloat16)->Name("matmul/p=bf16")->Apply(shapes);
BENCHMARK_TEMPLATE(matmul, bfloat16, float)->Name("matmul/p=f32,c=bf16")->Apply(shapes);
BENCHMARK(eigen_f32)->Apply(shapes);
#if MIXPREC_HAVE_ONEDNN
BENCHMARK_TEMPLATE(onednn, dnnl::memory::data_type::f32)->Name("onednn_f32")->Apply(shapes);
BENCHMARK_TEMPLATE(onednn, dnnl::memory::data_type::bf16)->Name("onednn_bf16")->Apply(shapes);
#endif

BENCHMARK_MAIN();
