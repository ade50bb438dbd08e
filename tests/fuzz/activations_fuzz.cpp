// libFuzzer target: the vectorised element-wise activations and their derivatives (sigmoid, SiLU,
// tanh-GELU, erf-GELU; kernels/detail/activation_rows.hpp) on arbitrary floats: the input bytes as
// float bit patterns, and the same words mapped uniformly onto [-30, 30], where the functions bend.
// Invariants, for each function:
//   - every SIMD level this CPU runs gives the same bits (the kernels' contract);
//   - at the first SIMD level, the result is a NaN exactly where the scalar function's is, an
//     infinity of the same sign where it is one, and otherwise within 2^-12 |scalar| of it, plus
//     2^-20 near 0 for the derivatives (which cross zero there, so their error is relative to their
//     terms) and (1 + |x|) 2^-120 where results leave float's normal range. Loose on purpose: the
//     references' bounds are tested in tests/kernels/activations_test.cpp; this catches a wrong lane,
//     special-value path or formula on inputs nobody wrote down.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fuzz_check.hpp"
#include "mixprec/arch/isa.hpp"
#include "mixprec/kernels/activations.hpp"

namespace {

namespace kernels = mixprec::kernels;
using kernels::gelu_approximation;

/// One function: its range form and its scalar form, and whether it is a derivative.
struct function {
  const char* name;
  void (*range)(const std::vector<float>&, std::vector<float>&);
  float (*scalar)(float);
  bool derivative;
};

const function functions[] = {
    {"sigmoid", [](const std::vector<float>& x, std::vector<float>& y) { kernels::sigmoid(x, y); },
     [](float x) { return kernels::sigmoid(x); }, false},
    {"silu", [](const std::vector<float>& x, std::vector<float>& y) { kernels::silu(x, y); },
     [](float x) { return kernels::silu(x); }, false},
    {"gelu_tanh",
     [](const std::vector<float>& x, std::vector<float>& y) { kernels::gelu(x, y, gelu_approximation::tanh); },
     [](float x) { return kernels::gelu(x, gelu_approximation::tanh); }, false},
    {"gelu_erf", [](const std::vector<float>& x, std::vector<float>& y) { kernels::gelu(x, y); },
     [](float x) { return kernels::gelu(x); }, false},
    {"sigmoid_derivative",
     [](const std::vector<float>& x, std::vector<float>& y) { kernels::sigmoid_derivative(x, y); },
     [](float x) { return kernels::sigmoid_derivative(x); }, true},
    {"silu_derivative", [](const std::vector<float>& x, std::vector<float>& y) { kernels::silu_derivative(x, y); },
     [](float x) { return kernels::silu_derivative(x); }, true},
    {"gelu_tanh_derivative",
     [](const std::vector<float>& x, std::vector<float>& y) {
       kernels::gelu_derivative(x, y, gelu_approximation::tanh);
     },
     [](float x) { return kernels::gelu_derivative(x, gelu_approximation::tanh); }, true},
    {"gelu_erf_derivative", [](const std::vector<float>& x, std::vector<float>& y) { kernels::gelu_derivative(x, y); },
     [](float x) { return kernels::gelu_derivative(x); }, true},
};

/// Whether the vectorised result `v` agrees with the scalar result `s` at x (see the file comment).
bool agrees(float x, float v, float s, bool derivative) {
  if (std::isnan(s) || std::isnan(v)) return std::isnan(s) && std::isnan(v);
  if (std::isinf(s) || std::isinf(v)) return v == s;
  const double ax = std::abs(static_cast<double>(x));
  const double tolerance = std::ldexp(std::abs(static_cast<double>(s)), -12) +
                           (derivative && ax <= 4.0 ? std::ldexp(1.0, -20) : 0.0) + (1.0 + ax) * std::ldexp(1.0, -120);
  return std::abs(static_cast<double>(v) - static_cast<double>(s)) <= tolerance;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<float> x;
  for (std::size_t i = 0; i + sizeof(std::uint32_t) <= size; i += sizeof(std::uint32_t)) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, data + i, sizeof bits);
    x.push_back(std::bit_cast<float>(bits));
    x.push_back(static_cast<float>(static_cast<double>(bits >> 8) * 0x1p-24 * 60.0 - 30.0));
  }
  std::vector<mixprec::isa> simd_levels;
  for (const mixprec::isa level : mixprec::all_isas) {
    if (level >= mixprec::isa::avx2 && level <= mixprec::detected_isa()) simd_levels.push_back(level);
  }
  if (x.empty() || simd_levels.empty()) return 0;  // nothing to compare
  for (const function& f : functions) {
    std::vector<float> first(x.size());
    {
      const mixprec::isa_limit_scope limit(simd_levels.front());
      f.range(x, first);
    }
    for (std::size_t l = 1; l < simd_levels.size(); ++l) {
      const mixprec::isa_limit_scope limit(simd_levels[l]);
      std::vector<float> y(x.size());
      f.range(x, y);
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(y[i]) != std::bit_cast<std::uint32_t>(first[i])) {
          std::fprintf(stderr, "%s(%a): %a at level %d, %a at level %d\n", f.name, static_cast<double>(x[i]),
                       static_cast<double>(first[i]), static_cast<int>(simd_levels.front()), static_cast<double>(y[i]),
                       static_cast<int>(simd_levels[l]));
          fuzz_check(false, "every SIMD level gives the same bits");
        }
      }
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!agrees(x[i], first[i], f.scalar(x[i]), f.derivative)) {
        std::fprintf(stderr, "%s(%a): vectorised %a, scalar %a\n", f.name, static_cast<double>(x[i]),
                     static_cast<double>(first[i]), static_cast<double>(f.scalar(x[i])));
        fuzz_check(false, "the vectorised kernel agrees with the scalar function");
      }
    }
  }
  return 0;
}
