// Tests of the 1-byte float8_e4m3fn b panels of the blocked GEMM (kernels/detail/gemm_pack.hpp,
// gemm_avx2.hpp, gemm_avx512.hpp): kernels::pack_b keeps weights stored as float8_e4m3fn as their own
// bytes, and every level decodes them exactly — the single-row product (m = 1: on the FMA levels with
// the row scaled by 2^8 instead of the weights; at avx512bf16 with AVX512_VBMI by byte lookups to
// bfloat16 pairs for VDPBF16PS), the GEMM micro-kernels (there, each column block decoded to pairs), and
// the portable loops.
//
// References: the OCP FP8 spec's e4m3fn values, computed here from the bit fields (not through the
// library's conversions), and float64 products over the rounded operands with the float32-summation
// bound γ_k Σ|a b| (Higham §3.1).
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

#include "mixprec/arch/isa.hpp"
#include "mixprec/core.hpp"
#include "mixprec/kernels/packed_b.hpp"
#include "mixprec/kernels/threads.hpp"

namespace float8_panels_test {

using mixprec::bfloat16;
using mixprec::float8_e4m3fn;
using mixprec::isa;
using mixprec::kernels::b_layout;

namespace {

/// Every level this CPU supports: the e4m3 decode differs at portable, avx2 and avx512.
std::vector<isa> levels() {
  std::vector<isa> out;
  for (const isa level : mixprec::all_isas) {
    if (level <= mixprec::detected_isa()) out.push_back(level);
  }
  return out;
}

/// The value of an e4m3fn pattern from its fields (OCP FP8 spec: bias 7, no infinities, S.1111.111 is
/// NaN): (-1)^s · 2^(e-7) · (1 + m/8), or (-1)^s · 2^-6 · m/8 for e = 0.
double e4m3_value(unsigned bits) {
  const unsigned e = (bits >> 3) & 15U, m = bits & 7U;
  const double magnitude = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, static_cast<int>(e) - 7);
  return (bits & 0x80U) != 0 ? -magnitude : magnitude;
}

/// Every non-NaN e4m3fn pattern, as weights.
std::vector<float8_e4m3fn> all_finite_e4m3() {
  std::vector<float8_e4m3fn> out;
  for (unsigned bits = 0; bits < 256; ++bits) {
    if ((bits & 0x7FU) != 0x7FU) out.push_back(float8_e4m3fn::from_bits(static_cast<std::uint8_t>(bits)));
  }
  return out;
}

std::vector<float> normals(std::size_t count, unsigned seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(count);
  for (auto& x : v) x = normal(rng);
  return v;
}

std::vector<float8_e4m3fn> e4m3_weights(std::size_t count, unsigned seed) {
  const auto v = normals(count, seed, 30.0f);
  std::vector<float8_e4m3fn> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = mixprec::saturate_cast<float8_e4m3fn>(v[i]);
  return out;
}

/// y [m, n] against the float64 product of a rounded to bfloat16 and the e4m3fn weights w [k, n]
/// (values from the bit fields), within γ_k Σ|a b| and half an ulp of the float result.
void check_product(const std::vector<float>& a, const std::vector<float8_e4m3fn>& w, const std::vector<float>& y,
                   std::size_t m, std::size_t k, std::size_t n) {
  constexpr double u = 0x1p-24;
  const double gamma = static_cast<double>(k) * u / (1.0 - static_cast<double>(k) * u);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      double sum = 0.0, abs_sum = 0.0;
      for (std::size_t p = 0; p < k; ++p) {
        const double t =
            static_cast<double>(static_cast<float>(bfloat16(a[i * k + p]))) * e4m3_value(w[p * n + j].bits());
        sum += t;
        abs_sum += std::fabs(t);
      }
      const double got = y[i * n + j];
      if (!(std::fabs(got - sum) <= gamma * abs_sum + u * std::fabs(sum))) {
        ++bad;
        if (bad <= 3) {
          CAPTURE(i, j, got, sum);
          CHECK(std::fabs(got - sum) <= gamma * abs_sum + u * std::fabs(sum));
        }
      }
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("float8_e4m3fn weights keep 1-byte panels, but a NaN among them keeps bfloat16 panels", "[kernels][float8]") {
  const std::size_t k = 40, n = 33;  // 3 panels of 16 columns
  const std::size_t padded = k * 48;
  auto w = e4m3_weights(k * n, 1);
  const auto packed = mixprec::kernels::pack_b<bfloat16>(w, k, n, b_layout::k_n);
  CHECK(packed.element_bytes() == 1);
  CHECK(packed.bytes() == padded);
  CHECK(mixprec::kernels::pack_b<float>(w, k, n, b_layout::n_k).bytes() == padded);
  CHECK(mixprec::kernels::pack_b<mixprec::float16>(w, k, n, b_layout::n_k).bytes() == padded);
  // The same values as floats are not float8 weights: 2 bytes under bfloat16.
  std::vector<float> as_float(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) as_float[i] = static_cast<float>(w[i]);
  CHECK(mixprec::kernels::pack_b<bfloat16>(as_float, k, n, b_layout::k_n).element_bytes() == 2);

  // A NaN weight (the 1-byte decoding has no NaN) makes the packing bfloat16, and its column NaN.
  w[5 * n + 20] = std::numeric_limits<float8_e4m3fn>::quiet_NaN();
  const auto with_nan = mixprec::kernels::pack_b<bfloat16>(w, k, n, b_layout::k_n);
  CHECK(with_nan.element_bytes() == 2);
  const auto a = normals(2 * k, 2);
  for (const isa level : levels()) {
    const mixprec::isa_limit_scope limit(level);
    CAPTURE(mixprec::name(level));
    for (const std::size_t m : {std::size_t{1}, std::size_t{2}}) {
      const std::vector<float> am(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(m * k));
      std::vector<float> y(m * n);
      mixprec::kernels::matmul<bfloat16>(am, with_nan, y, m);
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < n; ++j) CHECK(std::isnan(y[i * n + j]) == (j == 20));
      }
    }
  }
}

TEST_CASE("every float8_e4m3fn pattern is read back exactly from 1-byte panels on every level", "[kernels][float8]") {
  // b(k = 1, n = 254): every finite pattern once (plus shifted copies, so that patterns land in every
  // column position of a panel and in the single row's groups of 4 and 8 panels and its tail);
  // a = 1 reads each weight back (+0 for -0: the accumulator starts at +0).
  const auto values = all_finite_e4m3();
  for (const std::size_t shift : {std::size_t{0}, std::size_t{7}, std::size_t{100}}) {
    for (const std::size_t n : {values.size(), std::size_t{70}}) {
      std::vector<float8_e4m3fn> w(n);
      for (std::size_t j = 0; j < n; ++j) w[j] = values[(j + shift) % values.size()];
      const auto packed = mixprec::kernels::pack_b<bfloat16>(w, 1, n, b_layout::k_n);
      REQUIRE(packed.element_bytes() == 1);
      for (const isa level : levels()) {
        const mixprec::isa_limit_scope limit(level);
        for (const std::size_t m : {std::size_t{1}, std::size_t{3}}) {  // a single row, and the GEMM micro-kernel
          const std::vector<float> one(m, 1.0f);
          std::vector<float> y(m * n);
          mixprec::kernels::matmul<bfloat16>(one, packed, y, m);
          for (std::size_t i = 0; i < m; ++i) {
            for (std::size_t j = 0; j < n; ++j) {
              const auto expected = static_cast<float>(e4m3_value(w[j].bits()) + 0.0);
              CAPTURE(mixprec::name(level), shift, n, m, i, j, w[j].bits());
              CHECK(std::bit_cast<std::uint32_t>(y[i * n + j]) == std::bit_cast<std::uint32_t>(expected + 0.0f));
            }
          }
        }
      }
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
TEST_CASE("1-byte panels decode the subnormal e4m3fn weights under FTZ and DAZ", "[kernels][float8]") {
  // e4m3fn's subnormals (2^-9 .. 7·2^-9) are normal floats: flushing modes must not touch them. The
  // decoding passes through float16 subnormals (VCVTPH2PS ignores DAZ); this checks it.
  std::vector<float8_e4m3fn> w;
  for (unsigned bits : {0x01U, 0x02U, 0x07U, 0x81U, 0x86U, 0x08U}) w.push_back(float8_e4m3fn::from_bits(bits));
  const std::size_t n = w.size();
  const auto packed = mixprec::kernels::pack_b<bfloat16>(w, 1, n, b_layout::k_n);
  const unsigned saved = _mm_getcsr();
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  std::vector<std::vector<float>> results;
  for (const isa level : levels()) {
    const mixprec::isa_limit_scope limit(level);
    for (const std::size_t m : {std::size_t{1}, std::size_t{2}}) {
      std::vector<float> y(m * n);
      mixprec::kernels::matmul<bfloat16>(std::vector<float>(m, 1.0f), packed, y, m);
      results.push_back(y);
    }
  }
  _mm_setcsr(saved);
  for (const auto& y : results) {
    for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == static_cast<float>(e4m3_value(w[i % n].bits())));
  }
}
#endif

TEST_CASE("1-byte panels on VDPBF16PS read subnormal activations as zero, in a single row and in a batch alike",
          "[kernels][float8]") {
  // At the avx512bf16 level with AVX512_VBMI, e4m3 weights are decoded to bfloat16 pairs and multiplied
  // by VDPBF16PS, which reads a subnormal bfloat16 input as zero and flushes a subnormal result
  // (docs/kernels.md); the FMA levels keep both. The weights are never subnormal there (2^-9 is a
  // normal bfloat16). 2^-130 is a bfloat16 subnormal; 3 · 2^-9 and 2^-130 · 1 are exact products.
  const float tiny = std::ldexp(1.0f, -130);
  const std::vector<float> a{tiny, 3.0f};                                                              // [m = 2, k = 1]
  const std::vector<float8_e4m3fn> w{float8_e4m3fn::from_bits(0x38), float8_e4m3fn::from_bits(0x01)};  // 1, 2^-9
  const auto packed = mixprec::kernels::pack_b<bfloat16>(w, 1, 2, b_layout::k_n);
  REQUIRE(packed.element_bytes() == 1);
  for (const isa level : levels()) {
    const mixprec::isa_limit_scope limit(level);
    const bool flushes = level == isa::avx512bf16 && mixprec::detail::cpu_has_avx512_vbmi();
    for (const std::size_t m : {std::size_t{1}, std::size_t{2}}) {  // a single row, and the batch's tile
      CAPTURE(mixprec::name(level), m);
      std::vector<float> y(m * 2);
      mixprec::kernels::matmul<bfloat16>(std::vector<float>(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(m)),
                                         packed, y, m);
      CHECK(y[0] == (flushes ? 0.0f : tiny));                    // tiny · 1
      CHECK(y[1] == (flushes ? 0.0f : std::ldexp(1.0f, -139)));  // tiny · 2^-9: a subnormal float
      if (m == 2) {
        CHECK(y[2] == 3.0f);
        CHECK(y[3] == 3.0f * std::ldexp(1.0f, -9));
      }
    }
  }
}

TEST_CASE("products with 1-byte panels meet the float32-accumulation bound, the same bits on every SIMD level",
          "[kernels][float8]") {
  struct shape {
    std::size_t m, k, n;
  };
  // One row (the single-row kernels: groups of 4 and 8 panels and a tail), several k-slices (kc = 256),
  // GEMM tiles (whose rows are also computed one by one: the single row against the micro-kernel). The
  // VDPBF16PS decoding reads four panel rows at a time: slices ending 1, 2 and 3 rows past a multiple of
  // four (k = 17 and 257, 6, 7 and 259) take its masked tail, in a single row and in the slices decoded
  // for a batch.
  for (const shape s : {shape{1, 300, 70}, shape{1, 1000, 200}, shape{1, 17, 16}, shape{1, 259, 40}, shape{5, 257, 33},
                        shape{3, 6, 33}, shape{4, 7, 20}, shape{8, 64, 130}}) {
    CAPTURE(s.m, s.k, s.n);
    const auto a = normals(s.m * s.k, 3);
    const auto w = e4m3_weights(s.k * s.n, 4);
    std::vector<float8_e4m3fn> w_t(s.k * s.n);  // the same weights stored [n, k]
    for (std::size_t p = 0; p < s.k; ++p) {
      for (std::size_t j = 0; j < s.n; ++j) w_t[j * s.k + p] = w[p * s.n + j];
    }
    std::vector<float> simd_result;
    for (const isa level : levels()) {
      const mixprec::isa_limit_scope limit(level);
      CAPTURE(mixprec::name(level));
      for (const b_layout layout : {b_layout::k_n, b_layout::n_k}) {
        const auto packed = mixprec::kernels::pack_b<bfloat16>(layout == b_layout::k_n ? w : w_t, s.k, s.n, layout);
        REQUIRE(packed.element_bytes() == 1);
        std::vector<float> y(s.m * s.n);
        mixprec::kernels::matmul<bfloat16>(a, packed, y, s.m);
        check_product(a, w, y, s.m, s.k, s.n);
        if (level >= isa::avx2) {  // one FMA per term in the same order (VDPBF16PS: two, the same)
          if (simd_result.empty()) simd_result = y;
          CHECK(std::memcmp(simd_result.data(), y.data(), y.size() * sizeof(float)) == 0);
        }
        // Each row alone (the single-row kernels: the row scaled by 2^8 and the weights read / 2^8, or the
        // VDPBF16PS row) gives the bits of the same row of the batch (the GEMM micro-kernels).
        for (std::size_t i = 0; s.m > 1 && i < s.m; ++i) {
          const std::vector<float> row(a.begin() + static_cast<std::ptrdiff_t>(i * s.k),
                                       a.begin() + static_cast<std::ptrdiff_t>((i + 1) * s.k));
          std::vector<float> alone(s.n);
          mixprec::kernels::matmul<bfloat16>(row, packed, alone, 1);
          CAPTURE(i);
          CHECK(std::memcmp(alone.data(), y.data() + i * s.n, s.n * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE(
    "batches with 1-byte panels over several column blocks give the same bits on 1 and 2 threads and every "
    "SIMD level",
    "[kernels][float8][threads]") {
  // m = 200 (row blocks of 96, 96 and 8), k = 259 (slices of 256 and 3: the decoded slices' tail),
  // n = 1100 (two column blocks): on one thread each row block's a pairs are packed once for both
  // column blocks; on two, each thread takes a column block. Normal operands: every SIMD level, the
  // VDPBF16PS one included, gives the same bits (docs/kernels.md), within the float32 bound.
  const std::size_t m = 200, k = 259, n = 1100;
  const auto a = normals(m * k, 8);
  const auto w = e4m3_weights(k * n, 9);
  const auto packed = mixprec::kernels::pack_b<bfloat16>(w, k, n, b_layout::k_n);
  REQUIRE(packed.element_bytes() == 1);
  std::vector<float> first;
  for (const isa level : levels()) {
    if (level < isa::avx2) continue;
    const mixprec::isa_limit_scope limit(level);
    for (const std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
      CAPTURE(mixprec::name(level), threads);
      const std::size_t previous = mixprec::set_num_threads(threads);
      std::vector<float> y(m * n);
      mixprec::kernels::matmul<bfloat16>(a, packed, y, m);
      mixprec::set_num_threads(previous);
      if (first.empty()) {
        check_product(a, w, y, m, k, n);
        first = y;
      }
      CHECK(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("the single-row product with 1-byte panels stays finite for activations near the float range",
          "[kernels][float8]") {
  // A single row is multiplied by 2^8 instead of every weight; a row holding |a| >= 2^120 would
  // overflow, so it takes the unscaled decoding: the product is finite where the reference is.
  const std::size_t k = 64, n = 80;
  auto a = normals(k, 5);
  a[3] = 0x1p121f;
  a[9] = -0x1p125f;
  std::vector<float8_e4m3fn> w(k * n);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = float8_e4m3fn::from_bits(static_cast<std::uint8_t>(0x18 + i % 5));
  const auto packed = mixprec::kernels::pack_b<bfloat16>(w, k, n, b_layout::k_n);
  for (const isa level : levels()) {
    const mixprec::isa_limit_scope limit(level);
    CAPTURE(mixprec::name(level));
    std::vector<float> y(n);
    mixprec::kernels::matmul<bfloat16>(a, packed, y, 1);
    for (const float v : y) REQUIRE(std::isfinite(v));
    check_product(a, w, y, 1, k, n);
  }
}

TEST_CASE("the single-row product with 1-byte panels gives the same bits on 1 and 2 threads",
          "[kernels][float8][threads]") {
  // n · k above 2 Mi weights: the single-row product takes a second thread.
  const std::size_t k = 1024, n = 2100;
  const auto a = normals(k, 6);
  const auto packed = mixprec::kernels::pack_b<bfloat16>(e4m3_weights(k * n, 7), k, n, b_layout::n_k);
  std::vector<float> one(n), two(n);
  const std::size_t previous = mixprec::set_num_threads(1);
  mixprec::kernels::matmul<bfloat16>(a, packed, one, 1);
  mixprec::set_num_threads(2);
  mixprec::kernels::matmul<bfloat16>(a, packed, two, 1);
  mixprec::set_num_threads(previous);
  CHECK(std::memcmp(one.data(), two.data(), n * sizeof(float)) == 0);
}

}  // namespace float8_panels_test
