// libFuzzer target: mixprec::parse_dtype on arbitrary bytes. Invariant: a parsed dtype's canonical name
// parses back to it; nothing crashes.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "fuzz_check.hpp"
#include "mixprec/dtypes/dtype.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (const std::optional<mixprec::dtype> d = mixprec::parse_dtype(text)) {
    fuzz_check(mixprec::parse_dtype(mixprec::name(*d)) == d, "name round trip");
  }
  return 0;
}
