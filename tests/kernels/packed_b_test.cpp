// Tests of the blocked GEMM engine (kernels/detail/gemm_engine.hpp) through its public doors:
// kernels::pack_b / packed_b, the packed matmul and matmul_accumulate overloads, and the unpacked
// kernels::matmul / matmul_accumulate, which take the engine at the AVX2 level and above.
//
// References are float64 loops written here over operands rounded with the number types' own
// conversions; the error bound is the classical |fl(Σ a b) − Σ a b| ≤ γ_k Σ|a b| (Higham, Accuracy and
// Stability of Numerical Algorithms, §3.1), γ_k = k u / (1 − k u), u = 2^-24, plus half an ulp of the
// output type. Properties that need no reference are checked bit for bit: packed = unpacked, a row
// does not depend on the other rows computed with it, and threads do not change a result.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/core.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/packed_b.hpp"
#include "mixprec/kernels/threads.hpp"

namespace packed_b_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::isa;
using mixprec::kernels::a_layout;
using mixprec::kernels::b_layout;

namespace {

/// The levels this CPU supports; their kernels differ (portable, AVX2, AVX-512, VDPBF16PS).
std::vector<isa> kernel_levels() {
  std::vector<isa> levels;
  for (const isa level : mixprec::all_isas) {
    if (level <= mixprec::detected_isa()) levels.push_back(level);
  }
  return levels;
}

std::vector<float> normals(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = normal(rng);
  return v;
}

template <class C>
double as_c(float x) {
  if constexpr (std::is_same_v<C, float>) {
    return x;
  } else {
    return static_cast<double>(static_cast<float>(C(x)));
  }
}

/// Largest finite value of a small float, as a float (for inputs that stay in range).
template <class C>
float finite_max() {
  if constexpr (std::is_same_v<C, float>) {
    return std::numeric_limits<float>::max();
  } else {
    return static_cast<float>(std::numeric_limits<C>::max());
  }
}

/// Checks y (m × n, type Y) against the float64 product of the C-rounded operands, a [m, k] or
/// [k, m], b [k, n] or [n, k], plus `y0` (the values y held before, for accumulation).
template <class C, class Y>
void check_against_reference(const std::vector<float>& a, bool a_km, const std::vector<float>& b, bool b_nk,
                             const std::vector<Y>& y, const std::vector<double>& y0, std::size_t m, std::size_t k,
                             std::size_t n) {
  constexpr double u = 0x1p-24;
  const double gamma = static_cast<double>(k) * u / (1.0 - static_cast<double>(k) * u);
  const double y_ulp = std::is_same_v<Y, float> ? 0x1p-24 : 0x1p-8;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      double sum = 0, abs_sum = 0;
      for (std::size_t p = 0; p < k; ++p) {
        const double av = as_c<C>(a_km ? a[p * m + i] : a[i * k + p]);
        const double bv = as_c<C>(b_nk ? b[j * k + p] : b[p * n + j]);
        sum += av * bv;
        abs_sum += std::fabs(av * bv);
      }
      const double ref = y0.empty() ? sum : y0[i * n + j] + sum;
      const double bound = gamma * abs_sum + y_ulp * std::fabs(ref) + (y0.empty() ? 0.0 : u * std::fabs(ref));
      const double got = static_cast<double>(static_cast<float>(y[i * n + j]));
      if (!(std::fabs(got - ref) <= bound)) {
        if (++bad <= 3) INFO("y(" << i << ", " << j << ") = " << got << ", reference " << ref << ", bound " << bound);
        CHECK(std::fabs(got - ref) <= bound);
      }
    }
  }
  CHECK(bad == 0);
}

struct shape3 {
  std::size_t m, k, n;
};

// Edges of every block size: below and above mr = 6, nr = 16, kc = 256, mc = 96, and a k long
// enough to need several k-slices.
const std::vector<shape3> edge_shapes{{1, 1, 1},    {1, 300, 70}, {5, 17, 15},   {6, 256, 16},
                                      {7, 257, 33}, {13, 3, 100}, {97, 513, 47}, {2, 0, 5}};

}  // namespace

TEMPLATE_TEST_CASE("matmul through the blocked engine meets the float32-accumulation bound on every level",
                   "[kernels][packed_b]", float, bfloat16, float16) {
  using C = TestType;
  for (const isa level : kernel_levels()) {
    const mixprec::isa_limit_scope limit(level);
    for (const auto& s : edge_shapes) {
      for (const b_layout lb : {b_layout::k_n, b_layout::n_k}) {
        CAPTURE(mixprec::name(level), s.m, s.k, s.n, lb == b_layout::n_k);
        const auto a = normals(s.m * s.k, 1);
        const auto b = normals(s.k * s.n, 2);
        std::vector<float> y(s.m * s.n, -7.0f);
        mixprec::kernels::matmul<C>(a, b, y, {s.m, s.k, s.n}, lb);
        check_against_reference<C>(a, false, b, lb == b_layout::n_k, y, {}, s.m, s.k, s.n);
        std::vector<bfloat16> y16(s.m * s.n);
        mixprec::kernels::matmul<C>(a, b, y16, {s.m, s.k, s.n}, lb);
        check_against_reference<C>(a, false, b, lb == b_layout::n_k, y16, {}, s.m, s.k, s.n);
      }
    }
  }
}

TEMPLATE_TEST_CASE("matmul_accumulate adds op(a)·op(b) for all four layouts on every level", "[kernels][packed_b]",
                   float, bfloat16) {
  using C = TestType;
  for (const isa level : kernel_levels()) {
    const mixprec::isa_limit_scope limit(level);
    for (const auto& s : edge_shapes) {
      for (const a_layout la : {a_layout::m_k, a_layout::k_m}) {
        for (const b_layout lb : {b_layout::k_n, b_layout::n_k}) {
          CAPTURE(mixprec::name(level), s.m, s.k, s.n, la == a_layout::k_m, lb == b_layout::n_k);
          const auto a = normals(s.m * s.k, 3);
          const auto b = normals(s.k * s.n, 4);
          std::vector<float> y = normals(s.m * s.n, 5);
          const std::vector<double> y0(y.begin(), y.end());
          mixprec::kernels::matmul_accumulate<C>(a, la, b, lb, y, {s.m, s.k, s.n});
          check_against_reference<C>(a, la == a_layout::k_m, b, lb == b_layout::n_k, y, y0, s.m, s.k, s.n);
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("a packed b gives the unpacked product bit for bit, with and without bias", "[kernels][packed_b]",
                   float, bfloat16, float16, mixprec::float8_e4m3fn, mixprec::float8_e5m2) {
  using C = TestType;
  for (const isa level : kernel_levels()) {
    const mixprec::isa_limit_scope limit(level);
    const std::size_t m = 29, k = 300, n = 45;
    const auto a = normals(m * k, 6);
    const auto b = normals(k * n, 7);
    const auto bias = normals(n, 8);
    for (const b_layout lb : {b_layout::k_n, b_layout::n_k}) {
      CAPTURE(mixprec::name(level), lb == b_layout::n_k);
      const mixprec::kernels::packed_b packed = mixprec::kernels::pack_b<C>(b, k, n, lb);
      CHECK(packed.k() == k);
      CHECK(packed.n() == n);
      CHECK(packed.compute() == mixprec::dtype_of_v<C>);
      std::vector<float> packed_y(m * n), plain_y(m * n);
      mixprec::kernels::matmul<C>(a, packed, packed_y, m);
      if (level == isa::portable) {
        // The unpacked product at the portable level is Eigen's: the same bound, another order.
        check_against_reference<C>(a, false, b, lb == b_layout::n_k, packed_y, {}, m, k, n);
      } else {
        mixprec::kernels::matmul<C>(a, b, plain_y, {m, k, n}, lb);
        CHECK(std::memcmp(packed_y.data(), plain_y.data(), m * n * sizeof(float)) == 0);
        mixprec::kernels::matmul<C>(a, packed, bias, packed_y, m);
        mixprec::kernels::matmul<C>(a, b, bias, plain_y, {m, k, n}, lb);
        CHECK(std::memcmp(packed_y.data(), plain_y.data(), m * n * sizeof(float)) == 0);
        std::vector<float> acc_packed = normals(m * n, 9);
        std::vector<float> acc_plain = acc_packed;
        mixprec::kernels::matmul_accumulate<C>(a, packed, acc_packed, m);
        mixprec::kernels::matmul_accumulate<C>(a, a_layout::m_k, b, lb, acc_plain, {m, k, n});
        CHECK(std::memcmp(acc_packed.data(), acc_plain.data(), m * n * sizeof(float)) == 0);
      }
    }
  }
}

TEMPLATE_TEST_CASE("the SIMD levels' micro-kernels give the same bits, for every panel format and edge tile",
                   "[kernels][packed_b]", float, bfloat16, float16, mixprec::float8_e4m3fn) {
  // One summation order for every level from avx2 up (gemm_avx2.hpp): the AVX-512 kernel's 12 × 32
  // tiles, its 6-row and 16-column edge tiles and the AVX2 kernel's 6 × 16 tiles give the same bits.
  // float8_e4m3fn weights are kept as 1-byte panels (computed in bfloat16, which holds them exactly);
  // the others as the compute type's panels, and packed per call as floats.
  using W = TestType;
  using C = std::conditional_t<std::is_same_v<W, mixprec::float8_e4m3fn>, bfloat16, W>;
  std::vector<isa> simd_levels;
  for (const isa level : kernel_levels()) {
    if (level >= isa::avx2) simd_levels.push_back(level);
  }
  for (const auto& s : std::vector<shape3>{{1, 300, 200},
                                           {1, 513, 16},
                                           {2, 5, 16},
                                           {6, 256, 33},
                                           {7, 300, 70},
                                           {12, 17, 32},
                                           {13, 257, 16},
                                           {95, 40, 47},
                                           {97, 513, 80},
                                           {130, 9, 140}}) {
    const auto a = normals(s.m * s.k, 20);
    const auto bf = normals(s.k * s.n, 21);
    const std::vector<W> b(bf.begin(), bf.end());
    const std::vector<float> b_values(b.begin(), b.end());
    const auto bias = normals(s.n, 22);
    const auto packed = mixprec::kernels::pack_b<C>(b, s.k, s.n, b_layout::k_n);
    std::vector<std::vector<float>> results;
    for (const isa level : simd_levels) {
      const mixprec::isa_limit_scope limit(level);
      CAPTURE(mixprec::name(level), s.m, s.k, s.n);
      std::vector<float> kept(s.m * s.n), per_call(s.m * s.n), accumulated = normals(s.m * s.n, 23);
      const std::vector<double> y0(accumulated.begin(), accumulated.end());
      mixprec::kernels::matmul<C>(a, packed, bias, kept, s.m);
      mixprec::kernels::matmul<C>(a, b, bias, per_call, {s.m, s.k, s.n}, b_layout::k_n);
      mixprec::kernels::matmul_accumulate<C>(a, packed, accumulated, s.m);
      CHECK(std::memcmp(kept.data(), per_call.data(), kept.size() * sizeof(float)) == 0);
      check_against_reference<C>(a, false, b_values, false, accumulated, y0, s.m, s.k, s.n);
      results.push_back(kept);
      results.push_back(accumulated);
    }
    for (std::size_t r = 2; r < results.size(); ++r) {
      CAPTURE(s.m, s.k, s.n, r);
      CHECK(std::memcmp(results[r].data(), results[r % 2].data(), results[r].size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("bfloat16 products at the avx512bf16 level read subnormals as zero, as VDPBF16PS does",
          "[kernels][packed_b]") {
  // VDPBF16PS (Intel SDM) treats subnormal inputs as zero and flushes subnormal results, whatever
  // MXCSR says; the FMA levels keep both exactly (docs/kernels.md). 2^-130 is a bfloat16 subnormal;
  // 2^-70 · 2^-60 is a product of normals whose value is subnormal.
  const float tiny = std::ldexp(1.0f, -130);
  const std::vector<float> a{tiny, std::ldexp(1.0f, -70), 1.0f, 3.0f};  // [m = 4, k = 1]
  const std::vector<float> b{1.0f, std::ldexp(1.0f, -60)};              // [k = 1, n = 2]
  const auto packed = mixprec::kernels::pack_b<bfloat16>(b, 1, 2, b_layout::k_n);
  for (const isa level : kernel_levels()) {
    const mixprec::isa_limit_scope limit(level);
    CAPTURE(mixprec::name(level));
    for (const std::size_t m : {std::size_t{1}, std::size_t{4}}) {  // a single row and the batch tile
      std::vector<float> kept(m * 2), per_call(m * 2);
      const std::vector<float> am(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(m));
      mixprec::kernels::matmul<bfloat16>(am, packed, kept, m);
      mixprec::kernels::matmul<bfloat16>(am, b, per_call, {m, 1, 2}, b_layout::k_n);
      CHECK(kept == per_call);
      const bool flushes = level == isa::avx512bf16;
      CHECK(kept[0] == (flushes ? 0.0f : tiny));  // tiny · 1
      if (m == 4) {
        CHECK(kept[3] == (flushes ? 0.0f : std::ldexp(1.0f, -130)));  // 2^-70 · 2^-60
        CHECK(kept[7] == 3.0f * std::ldexp(1.0f, -60));               // normal: exact
      }
    }
  }
}

TEST_CASE("kept packings hold 16-bit compute types as 16-bit patterns: half the bytes", "[kernels][packed_b]") {
  const std::size_t k = 40, n = 33;  // 3 panels of 16 columns
  const auto b = normals(k * n, 18);
  const std::size_t padded = k * 48;
  CHECK(mixprec::kernels::pack_b<float>(b, k, n, b_layout::k_n).bytes() == padded * 4);
  CHECK(mixprec::kernels::pack_b<bfloat16>(b, k, n, b_layout::k_n).bytes() == padded * 2);
  CHECK(mixprec::kernels::pack_b<float16>(b, k, n, b_layout::n_k).bytes() == padded * 2);
  CHECK(mixprec::kernels::pack_b<mixprec::float8_e4m3fn>(b, k, n, b_layout::n_k).bytes() == padded * 2);
  // Every float8_e5m2 value survives the bfloat16 panels, subnormals (2^-16) and the largest (57344)
  // included: a product with a one-hot a reads b's values back exactly.
  std::vector<float> values;
  for (int bits = 0; bits < 256; ++bits) {
    const auto v = std::bit_cast<mixprec::float8_e5m2>(static_cast<std::uint8_t>(bits));
    if (std::isfinite(static_cast<float>(v))) values.push_back(static_cast<float>(v));
  }
  const std::size_t count = values.size();
  const auto packed = mixprec::kernels::pack_b<mixprec::float8_e5m2>(values, 1, count, b_layout::k_n);
  std::vector<float> y(count);
  const std::vector<float> one{1.0f};
  for (const isa level : kernel_levels()) {
    const mixprec::isa_limit_scope limit(level);
    mixprec::kernels::matmul<mixprec::float8_e5m2>(one, packed, y, 1);
    for (std::size_t j = 0; j < count; ++j) {
      CAPTURE(mixprec::name(level), j, values[j]);
      CHECK(std::bit_cast<std::uint32_t>(y[j]) == std::bit_cast<std::uint32_t>(values[j] + 0.0f));
    }
  }
}

TEST_CASE("kept panels start on a cache line, whatever their size and format", "[kernels][packed_b]") {
  // The micro-kernels' 64-byte panel loads touch one cache line each only from a line boundary; a
  // plain std::vector need not (glibc serves blocks above its mmap threshold 16 bytes past a page).
  const auto aligned = [](const mixprec::kernels::packed_b& p) {
    return reinterpret_cast<std::uintptr_t>(p.view().data) % 64 == 0;
  };
  for (const std::size_t n : {std::size_t{17}, std::size_t{1024}}) {
    const std::size_t k = 1024;  // at n = 1024: 4 MB of float panels, 1 MB of float8 ones
    const auto b = normals(k * n, 31);
    std::vector<mixprec::float8_e4m3fn> b8(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) b8[i] = static_cast<mixprec::float8_e4m3fn>(b[i]);
    CAPTURE(n);
    CHECK(aligned(mixprec::kernels::pack_b<float>(b, k, n, b_layout::k_n)));
    CHECK(aligned(mixprec::kernels::pack_b<bfloat16>(b, k, n, b_layout::k_n)));
    CHECK(aligned(mixprec::kernels::pack_b<float16>(b, k, n, b_layout::n_k)));
    const auto kept8 = mixprec::kernels::pack_b<bfloat16>(b8, k, n, b_layout::n_k);
    CHECK(kept8.element_bytes() == 1);
    CHECK(aligned(kept8));
  }
}

TEST_CASE("a packed b is a snapshot: writing the original afterwards changes nothing", "[kernels][packed_b]") {
  const std::size_t m = 3, k = 20, n = 18;
  const auto a = normals(m * k, 10);
  auto b = normals(k * n, 11);
  const mixprec::kernels::packed_b packed = mixprec::kernels::pack_b<float>(b, k, n, b_layout::k_n);
  std::vector<float> before(m * n), after(m * n);
  mixprec::kernels::matmul<float>(a, packed, before, m);
  for (auto& v : b) v = 1e6f;
  mixprec::kernels::matmul<float>(a, packed, after, m);
  CHECK(before == after);
}

TEMPLATE_TEST_CASE("a row of the product does not depend on the rows computed with it", "[kernels][packed_b]", float,
                   bfloat16, float16) {
  // Batch invariance: a single row (m = 1, its own row kernels: gemm_avx2/gemm_avx512 single_row,
  // VDPBF16PS rows) and prefill (m = 40, the micro-tiles) give the same bits for the same row. n = 200:
  // 13 panels, three groups of four and a ragged one of one in the single-row kernels.
  using C = TestType;
  for (const isa level : kernel_levels()) {
    const mixprec::isa_limit_scope limit(level);
    CAPTURE(mixprec::name(level));
    const std::size_t m = 40, k = 700, n = 200;
    const auto a = normals(m * k, 12);
    const auto b = normals(k * n, 13);
    const mixprec::kernels::packed_b packed = mixprec::kernels::pack_b<C>(b, k, n, b_layout::n_k);
    std::vector<float> all(m * n);
    mixprec::kernels::matmul<C>(a, packed, all, m);
    for (const std::size_t row : {std::size_t{0}, std::size_t{5}, std::size_t{6}, std::size_t{39}}) {
      const std::vector<float> one_a(a.begin() + static_cast<std::ptrdiff_t>(row * k),
                                     a.begin() + static_cast<std::ptrdiff_t>((row + 1) * k));
      std::vector<float> one(n);
      mixprec::kernels::matmul<C>(one_a, packed, one, 1);
      CAPTURE(row);
      CHECK(std::memcmp(one.data(), all.data() + row * n, n * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("threads change no bit of a product", "[kernels][packed_b][threads]") {
  // Big enough for the engine to split: 2 m n k well above 8 MFLOP per thread, several column
  // blocks (k = 1024: 1024 columns per block) and several row blocks (mc = 96).
  const std::size_t m = 200, k = 1024, n = 2100;
  const auto a = normals(m * k, 14);
  const auto b = normals(k * n, 15);
  for (const b_layout lb : {b_layout::k_n, b_layout::n_k}) {
    std::vector<float> serial(m * n), threaded(m * n), wide(m * n);
    const std::size_t previous = mixprec::set_num_threads(1);
    mixprec::kernels::matmul<bfloat16>(a, b, serial, {m, k, n}, lb);
    mixprec::set_num_threads(2);
    mixprec::kernels::matmul<bfloat16>(a, b, threaded, {m, k, n}, lb);
    mixprec::set_num_threads(5);
    mixprec::kernels::matmul<bfloat16>(a, b, wide, {m, k, n}, lb);
    mixprec::set_num_threads(previous);
    CHECK(std::memcmp(serial.data(), threaded.data(), m * n * sizeof(float)) == 0);
    CHECK(std::memcmp(serial.data(), wide.data(), m * n * sizeof(float)) == 0);
  }
}

TEST_CASE("a kept bfloat16 packing in several column blocks gives the per-call packing's bits, on any thread count",
          "[kernels][packed_b][threads]") {
  // n = 2100: three column blocks of a kept packing (1024 columns each), where one thread packs each row
  // block's a pairs once for all of them (the avx512bf16 level); m = 200: row blocks of 96, 96 and 8;
  // k = 601: k-slices of 256, 256 and an odd 89. The per-call packing packs a again per column block.
  const std::size_t m = 200, k = 601, n = 2100;
  const auto a = normals(m * k, 16);
  const auto b = normals(k * n, 17);
  const auto bias = normals(n, 18);
  for (const isa level : kernel_levels()) {
    const mixprec::isa_limit_scope limit(level);
    CAPTURE(mixprec::name(level));
    const mixprec::kernels::packed_b packed = mixprec::kernels::pack_b<bfloat16>(b, k, n, b_layout::n_k);
    std::vector<float> plain(m * n), kept(m * n), kept_threaded(m * n);
    const std::size_t previous = mixprec::set_num_threads(1);
    mixprec::kernels::matmul<bfloat16>(a, b, bias, plain, {m, k, n}, b_layout::n_k);
    mixprec::kernels::matmul<bfloat16>(a, packed, bias, kept, m);
    mixprec::set_num_threads(2);
    mixprec::kernels::matmul<bfloat16>(a, packed, bias, kept_threaded, m);
    mixprec::set_num_threads(previous);
    if (level == isa::portable) {
      // The unpacked product at the portable level is Eigen's (another order): the bound instead, with
      // the bias (rounded to bfloat16) as the value added to the sum.
      std::vector<double> bias_rows(m * n);
      for (std::size_t i = 0; i < m * n; ++i) bias_rows[i] = as_c<bfloat16>(bias[i % n]);
      check_against_reference<bfloat16>(a, false, b, true, kept, bias_rows, m, k, n);
    } else {
      CHECK(std::memcmp(plain.data(), kept.data(), m * n * sizeof(float)) == 0);
    }
    CHECK(std::memcmp(kept.data(), kept_threaded.data(), m * n * sizeof(float)) == 0);
  }
}

TEST_CASE("num_threads: set_num_threads and single_threaded_scope", "[kernels][threads]") {
  const std::size_t previous = mixprec::set_num_threads(3);
  CHECK(mixprec::num_threads() == 3);
  {
    const mixprec::single_threaded_scope single;
    CHECK(mixprec::num_threads() == 1);
  }
  CHECK(mixprec::num_threads() == 3);
  CHECK(mixprec::set_num_threads(0) == 3);
  CHECK(mixprec::num_threads() == 1);  // 0 is taken as 1
  mixprec::set_num_threads(previous);
}

TEST_CASE("packed products reject a wrong compute type or size with a sentence", "[kernels][packed_b]") {
  const std::vector<float> b(12, 1.0f), a(6, 1.0f);
  std::vector<float> y(8);
  CHECK_THROWS_WITH(mixprec::kernels::pack_b<float>(b, 5, 3, b_layout::k_n),
                    Catch::Contains("b has 12 elements") && Catch::Contains("needs 15"));
  const auto packed = mixprec::kernels::pack_b<bfloat16>(b, 3, 4, b_layout::k_n);
  CHECK_THROWS_WITH(mixprec::kernels::matmul<float>(a, packed, y, 2),
                    Catch::Contains("packed for compute type bfloat16") && Catch::Contains("pack_b<float32>"));
  CHECK_THROWS_WITH(mixprec::kernels::matmul<bfloat16>(a, packed, y, 3), Catch::Contains("with m = 3"));
  const std::vector<float> short_bias(3);
  CHECK_THROWS_WITH(mixprec::kernels::matmul<bfloat16>(a, packed, short_bias, y, 2),
                    Catch::Contains("bias has 3 elements"));
  std::vector<float> acc(8);
  CHECK_THROWS_WITH(mixprec::kernels::matmul_accumulate<float>(a, packed, acc, 2),
                    Catch::Contains("packed for compute type bfloat16"));
}

TEST_CASE("the engine keeps Inf and NaN where IEEE arithmetic puts them", "[kernels][packed_b]") {
  // A NaN in a enters only the rows that read it; an Inf in b only the columns it lies in.
  for (const isa level : kernel_levels()) {
    const mixprec::isa_limit_scope limit(level);
    const std::size_t m = 8, k = 10, n = 20;
    auto a = normals(m * k, 16);
    auto b = normals(k * n, 17);
    a[3 * k + 4] = std::numeric_limits<float>::quiet_NaN();
    b[2 * n + 17] = std::numeric_limits<float>::infinity();
    std::vector<float> y(m * n);
    mixprec::kernels::matmul<bfloat16>(a, b, y, {m, k, n}, b_layout::k_n);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        CAPTURE(mixprec::name(level), i, j);
        if (i == 3) {
          CHECK(std::isnan(y[i * n + j]));
        } else if (j == 17) {
          CHECK(std::isinf(y[i * n + j]));
        } else {
          CHECK(std::isfinite(y[i * n + j]));
        }
      }
    }
  }
}

}  // namespace packed_b_test
