// Google Benchmark: mixprec's row-wise memory-bound kernels — the normalisation layers and the
// softmax — against a memcpy of the same bytes and oneDNN's layer normalisation primitive, in the
// same run (issue 9). benchmarks/rows_report.py turns one JSON run into the table of
// docs/performance.md.
//
// Arguments {rows, features, threads}: 2048×1024 (in the last-level cache) and 8192×4096 (out of it),
// each with 1 and 2 threads. Every case writes into buffers made before the timing (forward_into),
// and runs once before it: the first write to a fresh buffer faults its pages in, which a case
// that runs few iterations would otherwise time (it made 8192×4096 on 1 thread read 0.5 GB/s on a
// Zen 5 VM whose memcpy read 31).
//
//  - layer_norm/f32:         nn::layer_norm<policy<float>>, float in, float out
//  - layer_norm/bf16:        nn::layer_norm<p=f32,c=bf16,o=bf16>, bfloat16 in, bfloat16 out
//  - batch_norm/f32, /bf16:  nn::batch_norm in train mode (batch statistics, running update), the same
//                            policies and types as layer_norm; shapes 8192×1024 (with layer_norm and
//                            memcpy of the same shape beside it), 8192×4096 (memcpy's in the main
//                            shapes) and the smoke case, 1 thread (issue 40)
//  - rms_norm_residual/f32:  the fused nn::rms_norm<policy<float>>: float x and residual stream in,
//                            float out, stream updated in place (llama's pre-norm)
//  - softmax/f32, /bf16:     kernels::softmax_rows, float in and out / bfloat16 in and out
//  - silu/f32, /bf16, gelu_tanh/f32: kernels::silu / kernels::gelu (tanh) on a range, float or
//                            bfloat16 in and out, on the calling thread (the threads argument does
//                            not split it); silu/f32/portable: the same at MIXPREC_ISA=portable
//                            (the scalar formulas with std::exp), the baseline of the kernel
//  - silu_derivative/f32, /f32/portable: kernels::silu_derivative, the same way
//  - memcpy/<bytes>:         std::memcpy of <bytes> per element of the problem, split over the threads
//                            (4: what layer_norm/f32 reads and writes, 2: bf16, 8: rms_norm_residual)
//  - onednn_f32/_bf16:       oneDNN's layer_normalization_forward (inference, scale and shift)
//
// Counter bytes/s counts bytes read + written once each (a memcpy of b bytes moves 2b).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/core.hpp"
#include "mixprec/kernels/activation_kind.hpp"
#include "mixprec/kernels/activations.hpp"
#include "mixprec/kernels/softmax.hpp"
#include "mixprec/nn/batch_norm.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "peer_threads.hpp"

#if MIXPREC_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

namespace {

using mixprec::bfloat16;
using mixprec::policy;

struct shape {
  std::size_t rows, features, threads;
  [[nodiscard]] std::size_t size() const { return rows * features; }
};

shape shape_of(const benchmark::State& state) {
  return {static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)),
          static_cast<std::size_t>(state.range(2))};
}

template <class T>
xt::xtensor<T, 2> random_rows(const shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.5F, 2.0F);
  auto x = xt::xtensor<T, 2>::from_shape({s.rows, s.features});
  for (auto& v : x) v = static_cast<T>(normal(rng));
  return x;
}

xt::xtensor<float, 1> random_vector(std::size_t n, float mean, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, 0.2F);
  auto v = xt::xtensor<float, 1>::from_shape({n});
  for (auto& e : v) e = normal(rng);
  return v;
}

void set_bytes(benchmark::State& state, double bytes) {
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

template <class T, class P>
void layer_norm(benchmark::State& state) {
  const shape s = shape_of(state);
  const threads_for threads(s.threads);
  using O = mixprec::nn::output_t<P, T>;
  const auto x = random_rows<T>(s, 1);
  auto y = xt::xtensor<O, 2>::from_shape({s.rows, s.features});
  const auto ln = mixprec::nn::layer_norm<P>::from_params(random_vector(s.features, 1.0F, 2),
                                                          random_vector(s.features, 0.0F, 3), 1e-5);
  ln.forward_into(y, x);  // untimed: faults the output in
  for (auto _ : state) {
    ln.forward_into(y, x);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(s.size() * (sizeof(T) + sizeof(O))));
}

template <class T, class P>
void batch_norm(benchmark::State& state) {
  const shape s = shape_of(state);
  const threads_for threads(s.threads);
  using O = mixprec::nn::output_t<P, T>;
  const auto x = random_rows<T>(s, 1);
  auto y = xt::xtensor<O, 2>::from_shape({s.rows, s.features});
  mixprec::nn::batch_norm<P> bn(s.features);
  bn.forward_into(y, x, mixprec::nn::mode::train);  // untimed: faults the output in
  for (auto _ : state) {
    bn.forward_into(y, x, mixprec::nn::mode::train);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(s.size() * (sizeof(T) + sizeof(O))));
}

void rms_norm_residual(benchmark::State& state) {
  const shape s = shape_of(state);
  const threads_for threads(s.threads);
  const auto x = random_rows<float>(s, 4);
  auto stream = random_rows<float>(s, 5);
  auto y = xt::xtensor<float, 2>::from_shape({s.rows, s.features});
  const auto norm = mixprec::nn::rms_norm<policy<float>>::from_scale(random_vector(s.features, 1.0F, 6));
  norm.forward_into(y, stream, x, stream);  // untimed: faults the output in
  for (auto _ : state) {
    norm.forward_into(y, stream, x, stream);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(s.size() * 4 * sizeof(float)));
}

template <class T>
void softmax(benchmark::State& state) {
  const shape s = shape_of(state);
  const threads_for threads(s.threads);
  const auto x = random_rows<T>(s, 7);
  auto y = xt::xtensor<T, 2>::from_shape({s.rows, s.features});
  mixprec::kernels::softmax_rows(x, y, s.features);  // untimed: faults the output in
  for (auto _ : state) {
    mixprec::kernels::softmax_rows(x, y, s.features);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(s.size() * 2 * sizeof(T)));
}

/// The element-wise SiLU, SiLU's derivative, erf-GELU, its derivative or tanh-GELU of kernels/activations.hpp over
/// rows × features values of T (on the calling thread); `level` limits the ISA (isa::portable: the scalar
/// formulas, std::exp and std::erfc).
template <class T, mixprec::kernels::activation_kind K>
void activation(benchmark::State& state, mixprec::isa level) {
  const shape s = shape_of(state);
  const mixprec::isa_limit_scope limit(level);
  const auto x = random_rows<T>(s, 8);
  auto y = xt::xtensor<T, 2>::from_shape({s.rows, s.features});
  const auto run = [&] {
    if constexpr (K == mixprec::kernels::activation_kind::silu) {
      mixprec::kernels::silu(x, y);
    } else if constexpr (K == mixprec::kernels::activation_kind::silu_derivative) {
      mixprec::kernels::silu_derivative(x, y);
    } else if constexpr (K == mixprec::kernels::activation_kind::gelu_erf) {
      mixprec::kernels::gelu(x, y);
    } else if constexpr (K == mixprec::kernels::activation_kind::gelu_erf_derivative) {
      mixprec::kernels::gelu_derivative(x, y);
    } else {
      mixprec::kernels::gelu(x, y, mixprec::kernels::gelu_approximation::tanh);
    }
  };
  run();  // untimed: faults the output in
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(s.size() * 2 * sizeof(T)));
}

using mixprec::kernels::activation_kind;
constexpr mixprec::isa no_limit = mixprec::isa::avx512bf16;  // isa_limit_scope's "every level this CPU has"
void silu_f32(benchmark::State& state) { activation<float, activation_kind::silu>(state, no_limit); }
void silu_bf16(benchmark::State& state) { activation<bfloat16, activation_kind::silu>(state, no_limit); }
void gelu_tanh_f32(benchmark::State& state) { activation<float, activation_kind::gelu_tanh>(state, no_limit); }
void silu_f32_portable(benchmark::State& state) {
  activation<float, activation_kind::silu>(state, mixprec::isa::portable);
}
void silu_derivative_f32(benchmark::State& state) {
  activation<float, activation_kind::silu_derivative>(state, no_limit);
}
void silu_derivative_f32_portable(benchmark::State& state) {
  activation<float, activation_kind::silu_derivative>(state, mixprec::isa::portable);
}
void gelu_erf_f32(benchmark::State& state) { activation<float, activation_kind::gelu_erf>(state, no_limit); }
void gelu_erf_f32_portable(benchmark::State& state) {
  activation<float, activation_kind::gelu_erf>(state, mixprec::isa::portable);
}
void gelu_erf_derivative_f32(benchmark::State& state) {
  activation<float, activation_kind::gelu_erf_derivative>(state, no_limit);
}

/// memcpy of bytes_per_element × rows × features bytes, in as many contiguous parts as threads.
void memcpy_peer(benchmark::State& state, std::size_t bytes_per_element) {
  const shape s = shape_of(state);
  const std::size_t bytes = s.size() * bytes_per_element;
  std::vector<unsigned char> src(bytes, 1), dst(bytes, 0);
  const std::size_t part = (bytes + s.threads - 1) / s.threads;
  const auto copy = [&](std::size_t t) {
    const std::size_t begin = std::min(bytes, t * part);
    std::memcpy(dst.data() + begin, src.data() + begin, std::min(bytes, begin + part) - begin);
  };
  for (auto _ : state) {
    {
      std::vector<std::jthread> workers;
      for (std::size_t t = 1; t < s.threads; ++t) workers.emplace_back(copy, t);
      copy(0);
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2.0 * static_cast<double>(bytes));
}

#if MIXPREC_HAVE_ONEDNN
template <dnnl::memory::data_type DT>
void onednn(benchmark::State& state) {
  const shape s = shape_of(state);
  const threads_for threads(s.threads);
  using dt = dnnl::memory::data_type;
  using flags = dnnl::normalization_flags;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc data_md({static_cast<dnnl::memory::dim>(s.rows), static_cast<dnnl::memory::dim>(s.features)},
                                   DT, dnnl::memory::format_tag::ab);
  const dnnl::memory::desc param_md({static_cast<dnnl::memory::dim>(s.features)}, dt::f32, dnnl::memory::format_tag::a);
  dnnl::layer_normalization_forward::primitive_desc pd;
  try {
    pd = dnnl::layer_normalization_forward::primitive_desc(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_inference, data_md, 1e-5F,
                                                flags::use_scale | flags::use_shift),
        engine);
  } catch (const dnnl::error& e) {
    state.SkipWithError(
        (std::string("oneDNN has no layer normalisation for these types on this CPU: ") + e.what()).c_str());
    return;
  }
  dnnl::memory src(data_md, engine), dst(data_md, engine), scale(param_md, engine), shift(param_md, engine);
  const auto x = random_rows<float>(s, 1);
  if constexpr (DT == dt::f32) {
    std::copy(x.begin(), x.end(), static_cast<float*>(src.get_data_handle()));
  } else {
    std::transform(x.begin(), x.end(), static_cast<bfloat16*>(src.get_data_handle()),
                   [](float v) { return bfloat16(v); });
  }
  const auto g = random_vector(s.features, 1.0F, 2);
  const auto b = random_vector(s.features, 0.0F, 3);
  std::copy(g.begin(), g.end(), static_cast<float*>(scale.get_data_handle()));
  std::copy(b.begin(), b.end(), static_cast<float*>(shift.get_data_handle()));
  dnnl::layer_normalization_forward prim(pd);
  prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift}});
  stream.wait();  // untimed: faults the output in
  for (auto _ : state) {
    prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift}});
    stream.wait();
    benchmark::ClobberMemory();
  }
  state.SetLabel(pd.impl_info_str());
  set_bytes(state, static_cast<double>(s.size() * 2 * (DT == dt::f32 ? 4 : 2)));
}
#endif

void shapes(benchmark::internal::Benchmark* b) {
  for (long threads : {1L, 2L}) {
    b->Args({2048, 1024, threads});
    b->Args({8192, 4096, threads});
  }
  b->Args({3, 45, 1});  // tiny: the ctest smoke run (--benchmark_filter=/rows:3/)
  b->ArgNames({"rows", "features", "threads"});
  b->Unit(benchmark::kMicrosecond);
  b->UseRealTime();
}

/// issue 40's shape: batch_norm 8192×1024 on 1 thread (and the smoke case).
void batch_shapes(benchmark::internal::Benchmark* b) {
  b->Args({8192, 1024, 1});
  b->Args({3, 45, 1});
  b->ArgNames({"rows", "features", "threads"});
  b->Unit(benchmark::kMicrosecond);
  b->UseRealTime();
}

/// batch_norm at 8192×4096 on 1 thread: 64 MiB of bfloat16 input, past the L3 like its memcpy peer of
/// `shapes` (memcpy/2B at 8192×4096), where the 8192×1024 memcpy is served from the L3.
void batch_large_shapes(benchmark::internal::Benchmark* b) {
  b->Args({8192, 4096, 1});
  b->ArgNames({"rows", "features", "threads"});
  b->Unit(benchmark::kMicrosecond);
  b->UseRealTime();
}

}  // namespace

BENCHMARK_TEMPLATE(layer_norm, float, policy<float>)->Name("layer_norm/f32")->Apply(shapes);
BENCHMARK_TEMPLATE(layer_norm, bfloat16, policy<float, bfloat16, bfloat16>)->Name("layer_norm/bf16")->Apply(shapes);
BENCHMARK_TEMPLATE(batch_norm, float, policy<float>)->Name("batch_norm/f32")->Apply(batch_shapes);
BENCHMARK_TEMPLATE(batch_norm, bfloat16, policy<float, bfloat16, bfloat16>)
    ->Name("batch_norm/bf16")
    ->Apply(batch_shapes);
BENCHMARK_TEMPLATE(layer_norm, float, policy<float>)->Name("layer_norm/f32")->Apply(batch_shapes);
BENCHMARK_TEMPLATE(layer_norm, bfloat16, policy<float, bfloat16, bfloat16>)
    ->Name("layer_norm/bf16")
    ->Apply(batch_shapes);
BENCHMARK_TEMPLATE(batch_norm, float, policy<float>)->Name("batch_norm/f32")->Apply(batch_large_shapes);
BENCHMARK_TEMPLATE(batch_norm, bfloat16, policy<float, bfloat16, bfloat16>)
    ->Name("batch_norm/bf16")
    ->Apply(batch_large_shapes);
BENCHMARK_CAPTURE(memcpy_peer, 4, 4)->Name("memcpy/4B")->Apply(batch_shapes);
BENCHMARK_CAPTURE(memcpy_peer, 2, 2)->Name("memcpy/2B")->Apply(batch_shapes);
BENCHMARK(rms_norm_residual)->Name("rms_norm_residual/f32")->Apply(shapes);
BENCHMARK_TEMPLATE(softmax, float)->Name("softmax/f32")->Apply(shapes);
BENCHMARK_TEMPLATE(softmax, bfloat16)->Name("softmax/bf16")->Apply(shapes);
BENCHMARK(silu_f32)->Name("silu/f32")->Apply(shapes);
BENCHMARK(silu_bf16)->Name("silu/bf16")->Apply(shapes);
BENCHMARK(gelu_tanh_f32)->Name("gelu_tanh/f32")->Apply(shapes);
BENCHMARK(silu_f32_portable)->Name("silu/f32/portable")->Apply(shapes);
BENCHMARK(silu_derivative_f32)->Name("silu_derivative/f32")->Apply(shapes);
BENCHMARK(silu_derivative_f32_portable)->Name("silu_derivative/f32/portable")->Apply(shapes);
BENCHMARK(gelu_erf_f32)->Name("gelu_erf/f32")->Apply(shapes);
BENCHMARK(gelu_erf_f32_portable)->Name("gelu_erf/f32/portable")->Apply(shapes);
BENCHMARK(gelu_erf_derivative_f32)->Name("gelu_erf_derivative/f32")->Apply(shapes);
BENCHMARK_CAPTURE(memcpy_peer, 4, 4)->Name("memcpy/4B")->Apply(shapes);
BENCHMARK_CAPTURE(memcpy_peer, 2, 2)->Name("memcpy/2B")->Apply(shapes);
BENCHMARK_CAPTURE(memcpy_peer, 8, 8)->Name("memcpy/8B")->Apply(shapes);
#if MIXPREC_HAVE_ONEDNN
BENCHMARK_TEMPLATE(onednn, dnnl::memory::data_type::f32)->Name("onednn_f32")->Apply(shapes);
BENCHMARK_TEMPLATE(onednn, dnnl::memory::data_type::bf16)->Name("onednn_bf16")->Apply(shapes);
#endif

BENCHMARK_MAIN();
