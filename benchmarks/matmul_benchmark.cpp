// Google Benchmark: mixprec's matrix products against oneDNN's matmul primitive and Eigen's GEMM, in
// the same run (issue 8; results in docs/performance.md).
//
// Y[m, n] = X[m, k] · W with W stored [n, k] (PyTorch / llama2.c "out, in"), float32 accumulation.
//
//  - mixprec/<policy>:   kernels::matmul<C> with float X and W stored as the policy's param dtype
//                        (p=f32,c=f32 | p=bf16,c=bf16 | p=f16,c=f16 | p=f32,c=bf16: rounded on the fly)
//  - mixprec_packed/<C>: the same product with W packed once beforehand (kernels::packed_b, as a layer
//                        keeps it across calls)
//  - ..._portable:       the same with the instruction-set level forced to portable (Eigen's GEMM, what
//                        every call ran before the run-time dispatch)
//  - eigen_f32:          Eigen's float GEMM (this build's flags: no -march unless the _simd binary)
//  - onednn_f32/_bf16:   oneDNN's matmul primitive (its own run-time ISA dispatch; bf16 operands,
//                        float32 accumulation, bf16 output), primitive created once, outside the loop
//
// Counters: FLOP/s = 2 m n k per iteration. Threads: mixprec's products use kernels::gemm_threads()
// (MIXPREC_NUM_THREADS); oneDNN's use OMP_NUM_THREADS. Set both to the same value for a fair ratio.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/packed_b.hpp"

#include "mixprec/arch/isa.hpp"
#include "mixprec/arrays/eigen.hpp"
#include "mixprec/core.hpp"

#if MIXPREC_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

namespace {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::kernels::b_layout;

struct problem {
  std::size_t m, k, n;
  std::vector<float> x, w, y;
};

problem make_problem(const benchmark::State& state) {
  problem p{static_cast<std::size_t>(state.range(0)),
            static_cast<std::size_t>(state.range(1)),
            static_cast<std::size_t>(state.range(2)),
            {},
            {},
            {}};
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.x.resize(p.m * p.k);
  p.w.resize(p.n * p.k);
  p.y.resize(p.m * p.n);
  for (auto& v : p.x) v = normal(rng);
  for (auto& v : p.w) v = normal(rng);
  return p;
}

void set_counters(benchmark::State& state, const problem& p) {
  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

template <class T>
std::vector<T> converted(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
  return out;
}

template <class Compute, class Weight, bool Portable = false>
void mixprec_matmul(benchmark::State& state) {
  auto p = make_problem(state);
  const auto w = converted<Weight>(p.w);
  const mixprec::isa_limit_scope limit(Portable ? mixprec::isa::portable : mixprec::isa::avx512bf16);
  for (auto _ : state) {
    mixprec::kernels::matmul<Compute>(p.x, w, p.y, {p.m, p.k, p.n}, b_layout::n_k);
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p);
}

template <class Compute>
void mixprec_packed(benchmark::State& state) {
  auto p = make_problem(state);
  const mixprec::kernels::packed_b packed = mixprec::kernels::pack_b<Compute>(p.w, p.k, p.n, b_layout::n_k);
  for (auto _ : state) {
    mixprec::kernels::matmul<Compute>(p.x, packed, p.y, p.m);
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p);
}

void eigen_f32(benchmark::State& state) {
  auto p = make_problem(state);
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const Mat> x(p.x.data(), static_cast<Eigen::Index>(p.m), static_cast<Eigen::Index>(p.k));
  const Eigen::Map<const Mat> w(p.w.data(), static_cast<Eigen::Index>(p.n), static_cast<Eigen::Index>(p.k));
  Eigen::Map<Mat> y(p.y.data(), static_cast<Eigen::Index>(p.m), static_cast<Eigen::Index>(p.n));
  for (auto _ : state) {
    y.noalias() = x * w.transpose();
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p);
}

#if MIXPREC_HAVE_ONEDNN
// oneDNN matmul: src [m, k], weights [k, n] given with strides of an [n, k] array (no copy), dst [m, n].
template <dnnl::memory::data_type DT>
void onednn(benchmark::State& state) {
  auto p = make_problem(state);
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
  set_counters(state, p);
}
#endif

// {m, k, n}: the large product, a training-step projection, prefill and decode.
void shapes(benchmark::internal::Benchmark* b) {
  b->Args({2048, 1024, 4096});
  b->Args({512, 384, 1536});
  b->Args({64, 1024, 4096});
  b->Args({1, 1024, 4096});
  b->ArgNames({"m", "k", "n"});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}

}  // namespace

BENCHMARK_TEMPLATE(mixprec_matmul, float, float)->Name("mixprec/p=f32,c=f32")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_matmul, bfloat16, bfloat16)->Name("mixprec/p=bf16,c=bf16")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_matmul, float16, float16)->Name("mixprec/p=f16,c=f16")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_matmul, bfloat16, float)->Name("mixprec/p=f32,c=bf16")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_packed, float)->Name("mixprec_packed/c=f32")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_packed, bfloat16)->Name("mixprec_packed/c=bf16")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_matmul, float, float, true)->Name("mixprec_portable/p=f32,c=f32")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_matmul, bfloat16, float, true)->Name("mixprec_portable/p=f32,c=bf16")->Apply(shapes);
BENCHMARK(eigen_f32)->Apply(shapes);
#if MIXPREC_HAVE_ONEDNN
BENCHMARK_TEMPLATE(onednn, dnnl::memory::data_type::f32)->Name("onednn_f32")->Apply(shapes);
BENCHMARK_TEMPLATE(onednn, dnnl::memory::data_type::bf16)->Name("onednn_bf16")->Apply(shapes);
#endif

BENCHMARK_MAIN();
