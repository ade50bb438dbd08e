// Google Benchmark: mixprec's tiled attention (nn::scaled_dot_product_attention: online softmax over
// key tiles, O(S) memory) against the materialising baseline — scores = Q·Kᵀ, softmax, P·V — in the
// same run (issue 9), batch 1, 16 heads of 64, sequence S, no mask, 1 and 2 threads.
//
//  - mixprec/f32, /bf16:  nn::scaled_dot_product_attention<C> on queries [S, H, D] and a kv_cache of S
//                         positions in C, scratch from an nn::workspace made before the timing.
//  - baseline/f32:        per head, scores [S, S] = Q_h·K_hᵀ with oneDNN's matmul (Eigen's GEMM when
//                         oneDNN is not found), kernels::softmax_rows on the scaled scores (mixprec's
//                         run-time dispatched softmax), out_h = P·V_h with the same GEMM: what a framework
//                         without fused attention runs (PyTorch's matmul+softmax+matmul), its S×S scores
//                         one head at a time.
//  - baseline/bf16:       the bfloat16 queries, keys and values widened to float32 (timed), the f32
//                         baseline, the output rounded to bfloat16.
//  - relative_bias/f32, /bf16: mixprec/f32 and /bf16 with T5's relative position bias (issue 41): its
//                         rows [H, 2S − 1] (nn::relative_position_bias, 32 buckets, max distance 128)
//                         computed once before the timing, as a model computes them once per forward for
//                         all its layers, and read per tile by the kernel; scratch counts the rows too.
//
// Wall-clock time. Arguments {S, threads}: S 1024 and 4096 (and 128, the case ctest runs), 1 and 2 threads (mixprec
// spreads (batch row, kv head) pairs over its threads; oneDNN runs its OpenMP threads). Counters: GFLOP/s (4·H·S²·D per
// call) and scratch bytes (mixprec: the workspace's high water; baseline: one head's scores).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/core.hpp"
#include "mixprec/kernels/softmax.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/relative_position_bias.hpp"
#include "mixprec/nn/workspace.hpp"
#include "peer_threads.hpp"

#if MIXPREC_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

namespace {

using mixprec::bfloat16;
namespace nn = mixprec::nn;

constexpr std::size_t heads = 16;
constexpr std::size_t head_dim = 64;

template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::vector<T> v(n);
  for (auto& e : v) e = static_cast<T>(normal(rng));
  return v;
}

void set_counters(benchmark::State& state, std::size_t seq, double scratch_bytes) {
  const double flops = 4.0 * heads * static_cast<double>(seq) * static_cast<double>(seq) * head_dim;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["scratch_bytes"] = scratch_bytes;
}

nn::attention_config config() {
  return {.d_model = heads * head_dim, .n_heads = heads, .n_kv_heads = heads, .head_dim = head_dim, .causal = false};
}

template <class C, bool Biased = false>
void mixprec_attention(benchmark::State& state) {
  const auto seq = static_cast<std::size_t>(state.range(0));
  const threads_for threads(static_cast<std::size_t>(state.range(1)));
  const std::size_t width = heads * head_dim;
  const auto q = random_values<C>(seq * width, 1);
  nn::kv_cache<C> cache(1, heads, head_dim, seq);
  cache.append(std::span<const C>(random_values<C>(seq * width, 2)),
               std::span<const C>(random_values<C>(seq * width, 3)), seq, {});
  std::vector<C> out(seq * width);
  nn::workspace ws;
  const nn::attention_config c = config();
  using A = mixprec::accumulator_t<C>;
  std::vector<A> rows;
  mixprec::kernels::score_bias<A> bias;
  if constexpr (Biased) {
    nn::relative_position_bias<mixprec::policy<float, C, float>> table(
        nn::relative_position_bias_config{.n_heads = heads});
    auto& t = table.table();
    const auto values = random_values<float>(t.size(), 4);
    std::copy(values.begin(), values.end(), t.begin());
    rows = table.template rows<float>(seq);
    bias = mixprec::kernels::score_bias<A>::relative(rows, heads);
  }
  for (auto _ : state) {
    nn::scaled_dot_product_attention<C>(std::span<const C>(q), cache, seq, c, bias, std::span<C>(out), {}, ws);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, seq, static_cast<double>(ws.high_water() + rows.size() * sizeof(A)));
}

/// The baseline's two products for one head, on float data in [S, H, D] layout.
class head_products {
 public:
  explicit head_products(std::size_t seq) : seq_(seq) {
#if MIXPREC_HAVE_ONEDNN
    using dt = dnnl::memory::data_type;
    const auto s = static_cast<dnnl::memory::dim>(seq);
    const auto d = static_cast<dnnl::memory::dim>(head_dim);
    const auto ld = static_cast<dnnl::memory::dim>(heads * head_dim);
    q_md_ = dnnl::memory::desc({s, d}, dt::f32, dnnl::memory::dims{ld, 1});
    kt_md_ = dnnl::memory::desc({d, s}, dt::f32, dnnl::memory::dims{1, ld});  // K_hᵀ read in place
    scores_md_ = dnnl::memory::desc({s, s}, dt::f32, dnnl::memory::dims{s, 1});
    v_md_ = dnnl::memory::desc({s, d}, dt::f32, dnnl::memory::dims{ld, 1});
    qk_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_md_, kt_md_, scores_md_), engine_));
    pv_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(scores_md_, v_md_, q_md_), engine_));
#endif
  }

  /// scores [S, S] = q_h · k_hᵀ (q, k point at head h's first element; rows H·D apart).
  void scores(const float* q, const float* k, float* scores) {
#if MIXPREC_HAVE_ONEDNN
    qk_.execute(stream_, {{DNNL_ARG_SRC, memory(q_md_, q)},
                          {DNNL_ARG_WEIGHTS, memory(kt_md_, k)},
                          {DNNL_ARG_DST, memory(scores_md_, scores)}});
    stream_.wait();
#else
    eigen_map(scores, seq_).noalias() = strided(q) * strided(k).transpose();
#endif
  }

  /// out_h [S, D] (rows H·D apart) = p [S, S] · v_h.
  void context(const float* p, const float* v, float* out) {
#if MIXPREC_HAVE_ONEDNN
    pv_.execute(stream_, {{DNNL_ARG_SRC, memory(scores_md_, p)},
                          {DNNL_ARG_WEIGHTS, memory(v_md_, v)},
                          {DNNL_ARG_DST, memory(q_md_, out)}});
    stream_.wait();
#else
    using Stride = Eigen::OuterStride<>;
    Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned, Stride> o(
        out, static_cast<Eigen::Index>(seq_), head_dim, Stride(heads * head_dim));
    o.noalias() = eigen_map(const_cast<float*>(p), seq_) * strided(v);
#endif
  }

 private:
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using StridedMap = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
  // The return type is spelled out: the public members above use it before this definition (a
  // deduced `auto` there does not compile, which only the build without oneDNN sees).
  [[nodiscard]] StridedMap strided(const float* x) const {
    return StridedMap(x, static_cast<Eigen::Index>(seq_), head_dim, Eigen::OuterStride<>(heads * head_dim));
  }
  static Eigen::Map<RowMajor> eigen_map(float* x, std::size_t seq) {
    return {x, static_cast<Eigen::Index>(seq), static_cast<Eigen::Index>(seq)};
  }
  std::size_t seq_;
#if MIXPREC_HAVE_ONEDNN
  dnnl::memory memory(const dnnl::memory::desc& md, const float* p) { return {md, engine_, const_cast<float*>(p)}; }
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::memory::desc q_md_, kt_md_, scores_md_, v_md_;
  dnnl::matmul qk_, pv_;
#endif
};

template <class T>
void baseline(benchmark::State& state) {
  const auto seq = static_cast<std::size_t>(state.range(0));
  const threads_for threads(static_cast<std::size_t>(state.range(1)));
  const std::size_t width = heads * head_dim;
  const auto q = random_values<T>(seq * width, 1);
  const auto k = random_values<T>(seq * width, 2);
  const auto v = random_values<T>(seq * width, 3);
  std::vector<T> out(seq * width);
  std::vector<float> qf(seq * width), kf(seq * width), vf(seq * width), outf(seq * width), scores(seq * seq);
  head_products products(seq);
  const float scale = 1.0F / std::sqrt(static_cast<float>(head_dim));
  for (auto _ : state) {
    const float* qp = nullptr;
    const float* kp = nullptr;
    const float* vp = nullptr;
    float* op = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      qp = q.data();
      kp = k.data();
      vp = v.data();
      op = out.data();
    } else {
      mixprec::convert(std::span<const T>(q), std::span<float>(qf));
      mixprec::convert(std::span<const T>(k), std::span<float>(kf));
      mixprec::convert(std::span<const T>(v), std::span<float>(vf));
      qp = qf.data();
      kp = kf.data();
      vp = vf.data();
      op = outf.data();
    }
    for (std::size_t h = 0; h < heads; ++h) {
      products.scores(qp + h * head_dim, kp + h * head_dim, scores.data());
      for (float& s : scores) s *= scale;
      mixprec::kernels::softmax_rows(std::span<const float>(scores), std::span<float>(scores), seq);
      products.context(scores.data(), vp + h * head_dim, op + h * head_dim);
    }
    if constexpr (!std::is_same_v<T, float>) mixprec::convert(std::span<const float>(outf), std::span<T>(out));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, seq, static_cast<double>(seq * seq * sizeof(float)));
}

void sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"S", "threads"})->Unit(benchmark::kMillisecond)->MinTime(0.5)->UseRealTime();
  b->Args({128, 1});  // ctest's tiny case
  for (const int threads : {1, 2}) {
    for (const int seq : {1024, 4096}) b->Args({seq, threads});
  }
}

}  // namespace

BENCHMARK_TEMPLATE(mixprec_attention, float)->Name("mixprec/f32")->Apply(sizes);
BENCHMARK_TEMPLATE(baseline, float)->Name("baseline/f32")->Apply(sizes);
BENCHMARK_TEMPLATE(mixprec_attention, bfloat16)->Name("mixprec/bf16")->Apply(sizes);
BENCHMARK_TEMPLATE(baseline, bfloat16)->Name("baseline/bf16")->Apply(sizes);
BENCHMARK_TEMPLATE(mixprec_attention, float, true)->Name("relative_bias/f32")->Apply(sizes);
BENCHMARK_TEMPLATE(mixprec_attention, bfloat16, true)->Name("relative_bias/bf16")->Apply(sizes);

BENCHMARK_MAIN();
