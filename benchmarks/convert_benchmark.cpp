// Bulk conversion benchmarks: mixprec::convert against the plain scalar loop (the baseline, same
// binary, same flags), against Eigen's own Eigen::bfloat16 / Eigen::half array casts, and against a
// memcpy that reads and writes as many bytes as the conversion (issue 9's bar: at least 0.8x of it).
// Built twice (benchmarks/CMakeLists.txt): portable, and with the x86 SIMD flags. The scalar loops
// and Eigen convert 1 << 16 elements; convert and memcpy also 2048 x 1024 and 8192 x 4096 elements
// (out of cache). items/s counts elements, bytes/s counts bytes read plus bytes written.
//
//   ./mixprec_convert_benchmark_simd --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/convert.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/saturate_cast.hpp"

namespace {

/// Element counts: in L2 (the scalar loops and Eigen run this one only), 2048 x 1024 and 8192 x 4096.
constexpr std::size_t n = std::size_t{1} << 16;
constexpr std::size_t large_n = std::size_t{8192} * 4096;
const std::vector<std::int64_t> sizes = {static_cast<std::int64_t>(n), 2048 * 1024, static_cast<std::int64_t>(large_n)};

/// large_n deterministic samples of a standard normal distribution (splitmix64 + Box-Muller): the values
/// activations and gradients typically take, mostly normal numbers of every format, a few subnormals.
const std::vector<float>& inputs() {
  static const std::vector<float> values = [] {
    std::vector<float> v(large_n);
    std::uint64_t state = 0x9E3779B97F4A7C15ULL;
    const auto next_unit = [&state] {  // uniform in (0, 1)
      state += 0x9E3779B97F4A7C15ULL;
      std::uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      z ^= z >> 31;
      return (static_cast<double>(z >> 11) + 0.5) * 0x1p-53;
    };
    for (std::size_t i = 0; i < large_n; i += 2) {
      const double r = std::sqrt(-2.0 * std::log(next_unit()));
      const double t = 6.283185307179586 * next_unit();
      v[i] = static_cast<float>(r * std::cos(t));
      v[i + 1] = static_cast<float>(r * std::sin(t));
    }
    return v;
  }();
  return values;
}

/// The inputs rounded to T (the patterns the decoding benchmarks read).
template <class T>
const std::vector<T>& patterns() {
  static const std::vector<T> values = [] {
    std::vector<T> v;
    v.reserve(large_n);
    for (const float x : inputs()) v.push_back(T(x));
    return v;
  }();
  return values;
}

template <class From, class To>
void count(benchmark::State& state, std::size_t elements = n) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(elements));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(elements * (sizeof(From) + sizeof(To))));
}

/// The baseline of issue 9: memcpy of as many bytes as converting state.range(0) elements of From to
/// To reads and writes (half of them read, half written).
template <class From, class To>
void memcpy_same_bytes(benchmark::State& state) {
  const auto elements = static_cast<std::size_t>(state.range(0));
  const std::size_t bytes = elements * (sizeof(From) + sizeof(To)) / 2;
  std::vector<unsigned char> in(bytes, 1);
  std::vector<unsigned char> out(bytes);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), bytes);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(2 * bytes));
}

// float -> T

template <class T>
void encode_scalar_loop(benchmark::State& state) {
  const std::vector<float>& in = inputs();
  std::vector<T> out(n);
  for (auto _ : state) {
    for (std::size_t i = 0; i < n; ++i) out[i] = T(in[i]);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  count<float, T>(state);
}

template <class T>
void encode_saturate_scalar_loop(benchmark::State& state) {
  const std::vector<float>& in = inputs();
  std::vector<T> out(n);
  for (auto _ : state) {
    for (std::size_t i = 0; i < n; ++i) out[i] = mixprec::saturate_cast<T>(in[i]);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  count<float, T>(state);
}

template <class T, mixprec::overflow_mode Mode>
void encode_convert(benchmark::State& state) {
  const auto elements = static_cast<std::size_t>(state.range(0));
  const std::span<const float> in = std::span<const float>(inputs()).first(elements);
  std::vector<T> out(elements);
  for (auto _ : state) {
    mixprec::convert(in, std::span<T>(out), Mode);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  count<float, T>(state, elements);
}

template <class E>
void encode_eigen(benchmark::State& state) {
  const std::vector<float>& in = inputs();
  std::vector<E> out(n);
  const Eigen::Map<const Eigen::ArrayXf> source(in.data(), static_cast<Eigen::Index>(n));
  Eigen::Map<Eigen::Array<E, Eigen::Dynamic, 1>> target(out.data(), static_cast<Eigen::Index>(n));
  for (auto _ : state) {
    target = source.template cast<E>();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  count<float, E>(state);
}

// T -> float

template <class T>
void decode_scalar_loop(benchmark::State& state) {
  const std::vector<T>& in = patterns<T>();
  std::vector<float> out(n);
  for (auto _ : state) {
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  count<T, float>(state);
}

template <class T>
void decode_convert(benchmark::State& state) {
  const auto elements = static_cast<std::size_t>(state.range(0));
  const std::span<const T> in = std::span<const T>(patterns<T>()).first(elements);
  std::vector<float> out(elements);
  for (auto _ : state) {
    mixprec::convert(in, std::span<float>(out));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  count<T, float>(state, elements);
}

template <class E>
void decode_eigen(benchmark::State& state) {
  std::vector<E> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<E>(inputs()[i]);
  std::vector<float> out(n);
  const Eigen::Map<const Eigen::Array<E, Eigen::Dynamic, 1>> source(in.data(), static_cast<Eigen::Index>(n));
  Eigen::Map<Eigen::ArrayXf> target(out.data(), static_cast<Eigen::Index>(n));
  for (auto _ : state) {
    target = source.template cast<float>();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  count<E, float>(state);
}

template <class T>
void register_format(const std::string& name, bool both_modes) {
  using mixprec::overflow_mode;
  benchmark::RegisterBenchmark(("float->" + name + "/scalar_loop").c_str(), encode_scalar_loop<T>);
  benchmark::RegisterBenchmark(("float->" + name + "/convert").c_str(), encode_convert<T, overflow_mode::to_inf_or_nan>)
      ->ArgsProduct({sizes});
  if (both_modes) {
    benchmark::RegisterBenchmark(("float->" + name + "/saturate/scalar_loop").c_str(), encode_saturate_scalar_loop<T>);
    benchmark::RegisterBenchmark(("float->" + name + "/saturate/convert").c_str(),
                                 encode_convert<T, overflow_mode::saturate>)
        ->ArgsProduct({sizes});
  }
  benchmark::RegisterBenchmark((name + "->float/scalar_loop").c_str(), decode_scalar_loop<T>);
  benchmark::RegisterBenchmark((name + "->float/convert").c_str(), decode_convert<T>)->ArgsProduct({sizes});
}

}  // namespace

int main(int argc, char** argv) {
  register_format<mixprec::bfloat16>("bfloat16", false);
  benchmark::RegisterBenchmark("float->bfloat16/eigen", encode_eigen<Eigen::bfloat16>);
  benchmark::RegisterBenchmark("bfloat16->float/eigen", decode_eigen<Eigen::bfloat16>);
  register_format<mixprec::float16>("float16", false);
  benchmark::RegisterBenchmark("float->float16/eigen", encode_eigen<Eigen::half>);
  benchmark::RegisterBenchmark("float16->float/eigen", decode_eigen<Eigen::half>);
  register_format<mixprec::float8_e4m3fn>("float8_e4m3fn", true);
  register_format<mixprec::float8_e5m2>("float8_e5m2", false);
  // memcpy of the bytes of a 16-bit and of an 8-bit conversion (float <-> 2 bytes: 6 bytes per element).
  benchmark::RegisterBenchmark("memcpy/bytes_of_16bit_conversion", memcpy_same_bytes<float, mixprec::bfloat16>)
      ->ArgsProduct({sizes});
  benchmark::RegisterBenchmark("memcpy/bytes_of_8bit_conversion", memcpy_same_bytes<float, mixprec::float8_e4m3fn>)
      ->ArgsProduct({sizes});

  benchmark::AddCustomContext("mixprec::convert_instruction_sets", std::string(mixprec::convert_instruction_sets));
  benchmark::AddCustomContext("elements", std::to_string(n));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
