// libFuzzer target: mixprec::promote_types on arbitrary dtype values, out-of-range ones included.
// Invariants: an out-of-range value is a std::invalid_argument; otherwise the result is symmetric, an
// upper bound of both (promoting it with either input gives it back), or type_promotion_error both ways.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "fuzz_check.hpp"
#include "mixprec/dtypes/promotion.hpp"

namespace {

bool in_range(mixprec::dtype d) { return static_cast<std::size_t>(d) < mixprec::dtype_count; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const auto a = static_cast<mixprec::dtype>(data[0]);
  const auto b = static_cast<mixprec::dtype>(data[1]);
  if (!in_range(a) || !in_range(b)) {
    bool threw = false;
    try {
      (void)mixprec::promote_types(a, b);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    fuzz_check(threw, "an out-of-range dtype is rejected");
    return 0;
  }
  bool ab_ok = true, ba_ok = true;
  mixprec::dtype ab{}, ba{};
  try {
    ab = mixprec::promote_types(a, b);
  } catch (const mixprec::type_promotion_error&) {
    ab_ok = false;
  }
  try {
    ba = mixprec::promote_types(b, a);
  } catch (const mixprec::type_promotion_error&) {
    ba_ok = false;
  }
  fuzz_check(ab_ok == ba_ok, "defined both ways or neither");
  if (ab_ok) {
    fuzz_check(ab == ba, "symmetric");
    fuzz_check(mixprec::promote_types(ab, a) == ab && mixprec::promote_types(ab, b) == ab, "an upper bound");
  }
  return 0;
}
