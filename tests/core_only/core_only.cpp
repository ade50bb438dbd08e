// Compiled by tests/core_only/check_core_only.cmake with ONLY mixprec's include/ directory on the
// include path (no Eigen, no xtensor): the light umbrella must not need them.
#include <mixprec/core.hpp>

#include <cstdio>

int main() {
  // 448 is float8_e4m3fn's largest finite value: 1.75 * 2^8 (OCP FP8 spec, E4M3 table).
  const mixprec::float8_e4m3fn max(448.0f);
  // bfloat16 keeps float's exponent: 2^100 is exact, bits 0 | 127+100=0xE3 | 0 -> 0x7180.
  const mixprec::bfloat16 big(0x1p100f);
  if (static_cast<float>(max) != 448.0f || max.bits() != 0x7E || big.bits() != 0x7180) {
    std::printf("core_only FAILED\n");
    return 1;
  }
  std::printf("core_only OK\n");
  return 0;
}
