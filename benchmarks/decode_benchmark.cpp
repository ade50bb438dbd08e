// Google Benchmark: memory-bound decoding (issue 9). A llama-shaped model (examples/llama/model.hpp:
// mixprec's embedding, fused rms_norm, grouped-query attention with a KV cache and SwiGLU
// feed-forward) with random weights large enough to leave the caches decodes one token per
// iteration, for weights stored as float32, bfloat16 and float16, and for weight-only float8:
// `scaled::float8_weight_dot` injected into every projection of a p=f32,c=bf16 model (e4m3fn with a
// scale per output channel, kept as 1-byte panels; the classifier, the tied embedding, stays in
// bfloat16). Beside it, in the same run, a read of a buffer as large as the float32 weights measures
// the machine's read bandwidth.
//
// Counters: tokens/s, and W_bytes/s = bytes of weights a token reads (the packed panels of the
// projections — 4 bytes per weight for float32 compute, 2 for bfloat16/float16, 1 for float8 — and
// of the classifier, and the embedding row) per second.
//
// Model size flags, parsed before Google Benchmark's own: --dim=2048 --hidden=5632 --layers=16
// --heads=16 --kv_heads=16 --vocab=32000 (defaults: 0.87 B parameters, Llama-2-1B-like).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/kernels/threads.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/scaled/float8_dot.hpp"
#include "model.hpp"
#include "peer_threads.hpp"

namespace {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;

/// The model's shape (command-line flags).
llama2c::model_config& config() {
  static llama2c::model_config c{2048, 5632, 16, 16, 16, 32000, 256, true};
  return c;
}

/// Weights of a random checkpoint: normal with the spread of a trained model's (0.02; RMSNorm gains 1).
llama2c::checkpoint random_checkpoint(const llama2c::model_config& c) {
  llama2c::checkpoint ck;
  ck.config = c;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0F, 0.02F);
  for (const auto& spec : llama2c::detail::checkpoint_layout(c)) {
    llama2c::tensor& t = ck.*spec.member;
    t.shape = spec.shape;
    t.values.resize(std::accumulate(spec.shape.begin(), spec.shape.end(), std::size_t{1}, std::multiplies<>()));
    const bool gain = spec.name.starts_with("rms");
    for (float& v : t.values) v = gain ? 1.0F : normal(rng);
  }
  return ck;
}

/// Weights of the projections of every layer (a decoded token reads each once).
double projection_weights(const llama2c::model_config& c) {
  const double d = c.dim, h = c.hidden_dim, kv = c.kv_dim(), layers = c.n_layers;
  return layers * (2 * d * d + 2 * d * kv + 3 * d * h);
}

/// Weights a decoded token reads: every projection of every layer and the classifier (tied to the
/// embedding) in full, one embedding row.
double weights_per_token(const llama2c::model_config& c) {
  const double d = c.dim, v = c.vocab_size;
  return projection_weights(c) + v * d + d;
}

/// Bytes of weights a decoded token reads: the projections at `projection_bytes` per weight, the
/// classifier and the embedding row at `classifier_bytes`.
double bytes_per_token(const llama2c::model_config& c, double projection_bytes, double classifier_bytes) {
  const double p = projection_weights(c);
  return projection_bytes * p + classifier_bytes * (weights_per_token(c) - p);
}

/// Frees the model of the policy benchmarked before (one model lives at a time: the float32 one of the
/// default size takes 7 GB with its packed weights).
std::function<void()>& release_previous_model() {
  static std::function<void()> release;
  return release;
}

/// The model of policy P, built once for all the repetitions and thread counts of P's benchmarks.
/// The weights of a model: as its policy stores them, or weight-only float8 in every projection.
enum class weights { policy, float8 };

/// The model of policy P (with weight-only float8 projections for weights::float8), built once for
/// all the repetitions and thread counts of its benchmarks.
template <class P, weights W>
llama::model<P>& model_for() {
  static std::unique_ptr<llama::model<P>> m;
  if (!m) {
    if (release_previous_model()) release_previous_model()();
    m = std::make_unique<llama::model<P>>(random_checkpoint(config()));
    if constexpr (W == weights::float8) {
      m->for_each_projection(
          [](auto& layer) { layer.set_dot(std::make_shared<mixprec::scaled::float8_weight_dot>()); });
    }
    release_previous_model() = [] { m.reset(); };
  }
  return *m;
}

template <class P, weights W = weights::policy>
void decode(benchmark::State& state) {
  const threads_for threads(static_cast<std::size_t>(state.range(0)));
  const llama2c::model_config& c = config();
  llama::model<P>& m = model_for<P, W>();
  m.reset();
  benchmark::DoNotOptimize(m.forward(1));  // packs the weights the first time (kept by the layers)
  int position = 1;
  for (auto _ : state) {
    if (position == c.seq_len) {
      state.PauseTiming();
      m.reset();
      position = 0;
      state.ResumeTiming();
    }
    auto logits = m.forward(position % c.vocab_size);
    benchmark::DoNotOptimize(logits.data());
    ++position;
  }
  using C = typename P::compute_type;
  const double bytes_per_weight = std::is_same_v<C, float> ? 4.0 : 2.0;
  const double projection_bytes = W == weights::float8 ? 1.0 : bytes_per_weight;
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_bytes/s"] = benchmark::Counter(bytes_per_token(c, projection_bytes, bytes_per_weight),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

/// The machine's read bandwidth: an XOR over 32-bit words as many as the f32 model's weights, split over
/// the threads (integer XOR is associative, so the compiler vectorises it with the baseline SSE2),
/// into 32 independent lanes (eight SSE2 registers): with one, a core of 2026 (Zen 5) is bound by the loop, below
/// the memory's rate (measured: 22 GB/s against the f32 decode's 34).
void read_bandwidth(benchmark::State& state) {
  const auto threads = static_cast<std::size_t>(state.range(0));
  const auto n = static_cast<std::size_t>(weights_per_token(config()));
  std::vector<std::uint32_t> data(n);
  std::iota(data.begin(), data.end(), 0U);
  std::vector<std::uint32_t> partial(threads);
  const std::size_t part = (n + threads - 1) / threads;
  for (auto _ : state) {
    mixprec::internal::parallel_for(threads, threads, [&](std::size_t t) {
      const std::size_t begin = std::min(n, t * part);
      const std::size_t end = std::min(n, begin + part);
      constexpr std::size_t lanes = 32;
      std::uint32_t x[lanes] = {};
      std::size_t i = begin;
      for (; i + lanes <= end; i += lanes) {
        for (std::size_t l = 0; l < lanes; ++l) x[l] ^= data[i + l];
      }
      for (; i < end; ++i) x[0] ^= data[i];
      std::uint32_t all = 0;
      for (const std::uint32_t v : x) all ^= v;
      partial[t] = all;
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["W_bytes/s"] =
      benchmark::Counter(4.0 * static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

void threads_1_2(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
}

/// Takes --dim=N style flags out of argv (Google Benchmark rejects flags it does not know).
void parse_model_flags(int& argc, char** argv) {
  llama2c::model_config& c = config();
  const std::pair<const char*, int*> flags[] = {
      {"--dim=", &c.dim},       {"--hidden=", &c.hidden_dim},   {"--layers=", &c.n_layers},
      {"--heads=", &c.n_heads}, {"--kv_heads=", &c.n_kv_heads}, {"--vocab=", &c.vocab_size}};
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    bool used = false;
    for (const auto& [name, value] : flags) {
      if (std::strncmp(argv[i], name, std::strlen(name)) == 0) {
        *value = std::atoi(argv[i] + std::strlen(name));
        used = true;
      }
    }
    if (!used) argv[kept++] = argv[i];
  }
  argc = kept;
}

}  // namespace

BENCHMARK(read_bandwidth)->Apply(threads_1_2);
BENCHMARK_TEMPLATE(decode, policy<float>)->Name("decode/p=f32")->Apply(threads_1_2);
BENCHMARK_TEMPLATE(decode, policy<bfloat16, bfloat16, float>)->Name("decode/p=bf16")->Apply(threads_1_2);
BENCHMARK_TEMPLATE(decode, policy<float16, float16, float>)->Name("decode/p=f16")->Apply(threads_1_2);
BENCHMARK_TEMPLATE(decode, policy<float, bfloat16, float>, weights::float8)
    ->Name("decode/float8_weights")
    ->Apply(threads_1_2);

int main(int argc, char** argv) {
  parse_model_flags(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
