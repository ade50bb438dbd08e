// mixprec basics: number formats, JAX type promotion, jmp policies, loss scaling.
// Built and run by ./scripts/run-example.sh; README.md shows it.
#include <mixprec/core.hpp>

#include <cmath>
#include <iostream>
#include <vector>

using namespace mixprec;

int main() {
  // Formats: narrowing is explicit and rounds once (to nearest even); widening is implicit and exact.
  bfloat16 w(0.1f);
  float back = w;                                       // 0.100098 (bfloat16 keeps 8 significant bits)
  float8_e4m3fn big(500.0f);                            // NaN: e4m3fn has no Inf
  auto clamped = saturate_cast<float8_e4m3fn>(500.0f);  // 448, its largest finite value
  std::cout << "bfloat16(0.1) = " << back << ", float8_e4m3fn(500) = " << big << ", saturated: " << clamped << '\n';

  // JAX type promotion on dtypes; pairs without a common type throw (or fail to compile).
  std::cout << "bfloat16 + float16 -> " << name(promote_types(dtype::bfloat16, dtype::float16)) << '\n';
  try {
    (void)promote_types(dtype::float8_e4m3fn, dtype::bfloat16);
  } catch (const type_promotion_error& e) {
    std::cout << e.what() << '\n';
  }

  // A jmp policy string, dispatched to the compile-time policy<Param, Compute, Output>. Listing the
  // policies the program supports compiles the lambda three times instead of 64; any other policy
  // string throws a policy_error naming the three.
  runtime_policy p = parse_policy("p=f32,c=bf16,o=f32");
  visit<full_precision, mixed_bfloat16, mixed_float16>(p, []<class P>(P) {
    std::cout << "policy " << to_runtime_policy<P>() << ": compute in "
              << dtype_of_v<typename P::compute_type> << '\n';  // policy p=f32,c=bf16,o=f32: compute in bfloat16
  });

  // Dynamic loss scaling (jmp): non-finite gradients skip the step and halve the scale.
  dynamic_loss_scale ls({.initial_scale = 1024.0f});
  std::vector<bfloat16> grads = ls.unscale(std::vector{bfloat16(512.0f), bfloat16(INFINITY)});
  bool finite = all_finite(grads);
  ls.adjust(finite);
  std::cout << std::boolalpha << "grads[0] = " << grads[0] << ", finite: " << finite  // 0.5, false
            << ", loss scale now " << ls.loss_scale() << '\n';                        // 512
}
