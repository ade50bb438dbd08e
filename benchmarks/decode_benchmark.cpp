// Google Benchmark: memory-bound decoding (issue 9). A llama-shaped model (examples/llama/model.hpp:
// mixprec's embedding, fused rms_norm, grouped-query attention with a KV cache and SwiGLU
// feed-forward) with random weights large enough to leave the caches decodes one token per
// iteration, for weights stored as float32, bfloat16 and float16. (The former float8_e4m3fn row,
// policy<float8_e4m3fn, bfloat16, float>, is gone: no policy holds a float8 type, docs/policies.md
// "float8 and smaller formats"; weight-only float8 is scaled::float8_weight_dot.) Beside it, in the
// same run, a read of a buffer as large as the weights measures the machine's read bandwidth.
//
// Counters: tokens/s, and W_bytes/s = bytes of weights a token reads (the packed panels of the
// products, 4 bytes per weight for float32 compute and 2 for bfloat16/float16 compute, and the
// embedding row) per second.
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

/// Weights a decoded token reads: every projection of every layer and the classifier (tied to the
/// embedding) in full, one embedding row.
double weights_per_token(const llama2c::model_config& c) {
  const double d = c.dim, h = c.hidden_dim, kv = c.kv_dim(), v = c.vocab_size, layers = c.n_layers;
  return layers * (2 * d * d + 2 * d * kv + 3 * d * h) + v * d + d;
}

/// Frees the model of the policy benchmarked before (one model lives at a time: the float32 one of the
/// default size takes 7 GB with its packed weights).
std::function<void()>& release_previous_model() {
  static std::function<void()> release;
  return release;
}

/// The model of policy P, built once for all the repetitions and thread counts of P's benchmarks.
template <class P>
llama::model<P>& model_for() {
  static std::unique_ptr<llama::model<P>> m;
  if (!m) {
    if (release_previous_model()) release_previous_model()();
    m = std::make_unique<llama::model<P>>(random_checkpoint(config()));
    release_previous_model() = [] { m.reset(); };
  }
  return *m;
}

template <class P>
void decode(benchmark::State& state) {
  const threads_for threads(static_cast<std::size_t>(state.range(0)));
  const llama2c::model_config& c = config();
  llama::model<P>& m = model_for<P>();
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
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_bytes/s"] =
      benchmark::Counter(bytes_per_weight * weights_per_token(c), benchmark::Counter::kIsIterationInvariantRate);
}

/// The machine's read bandwidth: an XOR over 32-bit words as many as the f32 model's weights, split over
/// the threads (integer XOR is associative, so the compiler vectorises it with the baseline SSE2).
void read_bandwidth(benchmark::State& state) {
  const auto threads = static_cast<std::size_t>(state.range(0));
  const auto n = static_cast<std::size_t>(weights_per_token(config()));
  std::vector<std::uint32_t> data(n);
  std::iota(data.begin(), data.end(), 0U);
  std::vector<std::uint32_t> partial(threads);
  const std::size_t part = (n + threads - 1) / threads;
  for (auto _ : state) {
    mixprec::kernels::detail::parallel_for(threads, threads, [&](std::size_t t) {
      const std::size_t begin = std::min(n, t * part);
      const std::size_t end = std::min(n, begin + part);
      std::uint32_t x = 0;
      for (std::size_t i = begin; i < end; ++i) x ^= data[i];
      partial[t] = x;
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

int main(int argc, char** argv) {
  parse_model_flags(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
