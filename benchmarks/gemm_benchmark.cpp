// Google Benchmark: kernels::matmul against the alternatives, in the same run.
//
// Shapes: y[m, n] = x[m, k] · W^T with W [n, k] (the [out, in] layout of llama2.c and PyTorch), for
// a single row (m = 1: a matrix-vector product per token) and a prefill batch (m = 64).
//
//  - eigen_f32:            Eigen's float GEMM/GEMV on float data, no conversion (the speed reference)
//  - naive_f32:            llama2.c's matmul loop (one dot product per output, float accumulator)
//  - matmul<float>:        kernels::matmul with float operands (maps in place: should equal eigen_f32)
//  - matmul<bf16>, bf16 W: weights stored as bfloat16, widened block by block to float
//  - matmul<bf16>, f32 W:  float weights rounded to bfloat16 on the fly (p=f32, c=bf16)
//  - matmul<f16>,  f16 W:  float16 weights
//  - eigen_bf16:           Eigen's own Eigen::bfloat16 GEMM (each operation rounded to bfloat16,
//                          so it also accumulates in bfloat16: shown for speed only, its results
//                          differ from float32 accumulation)
//
// Counters: FLOP/s (2 m n k per iteration) and the bytes of W read per second.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <vector>

// gemm.hpp first: it includes Eigen inside its GCC 12 -Wmaybe-uninitialized suppression (see there),
// which then also covers the plain Eigen products below in the AVX-512 (_simd) build with -Werror.
#include "mixprec/kernels/gemm.hpp"

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/core.hpp"

namespace {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::kernels::b_layout;
using mixprec::kernels::matmul;

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

void set_counters(benchmark::State& state, const problem& p, std::size_t weight_bytes) {
  const double flops = 2.0 * static_cast<double>(p.m * p.n * p.k);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W bytes/s"] =
      benchmark::Counter(static_cast<double>(weight_bytes), benchmark::Counter::kIsIterationInvariantRate);
}

template <class T>
std::vector<T> converted(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
  return out;
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
  set_counters(state, p, p.w.size() * sizeof(float));
}

void naive_f32(benchmark::State& state) {
  auto p = make_problem(state);
  for (auto _ : state) {
    for (std::size_t i = 0; i < p.m; ++i) {
      for (std::size_t j = 0; j < p.n; ++j) {
        float acc = 0.0f;
        for (std::size_t q = 0; q < p.k; ++q) acc += p.w[j * p.k + q] * p.x[i * p.k + q];
        p.y[i * p.n + j] = acc;
      }
    }
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p, p.w.size() * sizeof(float));
}

template <class Compute, class Weight>
void mixprec_matmul(benchmark::State& state) {
  auto p = make_problem(state);
  const auto w = converted<Weight>(p.w);
  for (auto _ : state) {
    matmul<Compute>(p.x, w, p.y, {p.m, p.k, p.n}, b_layout::n_k);
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p, w.size() * sizeof(Weight));
}

void eigen_bf16(benchmark::State& state) {
  auto p = make_problem(state);
  using Mat = Eigen::Matrix<Eigen::bfloat16, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Mat x = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                    p.x.data(), static_cast<Eigen::Index>(p.m), static_cast<Eigen::Index>(p.k))
                    .cast<Eigen::bfloat16>();
  const Mat w = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                    p.w.data(), static_cast<Eigen::Index>(p.n), static_cast<Eigen::Index>(p.k))
                    .cast<Eigen::bfloat16>();
  Mat y(static_cast<Eigen::Index>(p.m), static_cast<Eigen::Index>(p.n));
  for (auto _ : state) {
    y.noalias() = x * w.transpose();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, p, p.w.size() * sizeof(Eigen::bfloat16));
}

// {m, k, n}: a single row (m = 1) and prefill (m = 64) of a 1024 -> 1024 and a 1024 -> 4096 projection.
void shapes(benchmark::internal::Benchmark* b) {
  for (long m : {1L, 64L}) {
    b->Args({m, 1024, 1024});
    b->Args({m, 1024, 4096});
  }
  b->ArgNames({"m", "k", "n"});
  b->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(eigen_f32)->Apply(shapes);
BENCHMARK(naive_f32)->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_matmul, float, float)->Name("matmul<float>/f32_W")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_matmul, bfloat16, bfloat16)->Name("matmul<bf16>/bf16_W")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_matmul, bfloat16, float)->Name("matmul<bf16>/f32_W")->Apply(shapes);
BENCHMARK_TEMPLATE(mixprec_matmul, float16, float16)->Name("matmul<f16>/f16_W")->Apply(shapes);
BENCHMARK(eigen_bf16)->Apply(shapes);

BENCHMARK_MAIN();
