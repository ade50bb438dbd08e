// libFuzzer target: mixprec::parse_policy on arbitrary bytes. Invariants: it either returns a policy
// whose canonical string parses back to it and whose dtypes visit dispatches (f32, f64, bf16, f16: never
// a float8/float6/float4 one), or throws policy_parse_error whose position lies within the input and
// whose token is part of it; no other exception, crash, leak or UB (ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.hpp"
#include "mixprec/policies/runtime_policy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const mixprec::runtime_policy p = mixprec::parse_policy(text);
    fuzz_check(mixprec::parse_policy(mixprec::to_string(p)) == p, "to_string round trip");
    for (const mixprec::dtype d : {p.param, p.compute, p.output}) {
      fuzz_check(mixprec::detail::visit_index(d) < mixprec::visit_dtypes.size(),
                 "visit dispatches every parsed policy");
    }
  } catch (const mixprec::policy_parse_error& e) {
    fuzz_check(e.position() <= size, "error position inside the input");
    fuzz_check(e.token().size() <= size, "error token taken from the input");
  }
  return 0;
}
