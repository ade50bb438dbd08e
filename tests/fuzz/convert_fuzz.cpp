// libFuzzer target: conversions between float/double and every small float, on arbitrary bit patterns.
// Invariants, per format F: decoding a pattern and encoding the value back gives the same pattern
// (NaN: some NaN); encoding is idempotent (encode(decode(encode(x))) == encode(x)) for float and
// double inputs; the saturating encoder never produces an infinity from a finite input; and the bulk
// `convert` gives the same bits as the scalar conversions for the whole buffer.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <tuple>
#include <vector>

#include "fuzz_check.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/convert.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float4.hpp"
#include "mixprec/formats/float6.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/saturate_cast.hpp"

namespace {

template <class F>
void check_format(const std::uint8_t* data, std::size_t size) {
  using storage = typename F::storage_type;
  // Patterns: consecutive bytes as storage words; values: the same bytes as floats and doubles.
  std::vector<F> patterns;
  for (std::size_t i = 0; i + sizeof(storage) <= size; i += sizeof(storage)) {
    storage bits{};
    std::memcpy(&bits, data + i, sizeof(storage));
    patterns.push_back(F::from_bits(bits));
  }
  std::vector<float> decoded(patterns.size());
  mixprec::convert(std::span<const F>(patterns), std::span<float>(decoded));
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    const F p = F::from_bits(patterns[i].bits());  // from_bits masks unused high bits
    const float v = static_cast<float>(p);
    fuzz_check(std::memcmp(&v, &decoded[i], sizeof v) == 0, "bulk decode equals scalar decode");
    if (std::isnan(v)) {
      fuzz_check(std::isnan(static_cast<float>(F(v))), "NaN stays NaN");
    } else {
      fuzz_check(F(v).bits() == p.bits(), "decode then encode gives the pattern back");
      fuzz_check(F(static_cast<double>(v)).bits() == p.bits(), "the same through double");
    }
  }
  std::vector<float> values;
  for (std::size_t i = 0; i + sizeof(float) <= size; i += sizeof(float)) {
    float x = 0;
    std::memcpy(&x, data + i, sizeof x);
    values.push_back(x);
  }
  std::vector<F> encoded(values.size()), saturated(values.size());
  mixprec::convert(std::span<const float>(values), std::span<F>(encoded));
  mixprec::convert(std::span<const float>(values), std::span<F>(saturated), mixprec::overflow_mode::saturate);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float x = values[i];
    const F e(x);
    fuzz_check(e.bits() == encoded[i].bits() || (std::isnan(x) && std::isnan(static_cast<float>(encoded[i]))),
               "bulk encode equals scalar encode");
    const F s = mixprec::saturate_cast<F>(x);
    fuzz_check(s.bits() == saturated[i].bits() || (std::isnan(x) && std::isnan(static_cast<float>(saturated[i]))),
               "bulk saturating encode equals saturate_cast");
    if (std::isfinite(x)) fuzz_check(!std::isinf(static_cast<float>(s)), "saturate never gives Inf");
    if (!std::isnan(static_cast<float>(e))) {
      fuzz_check(F(static_cast<float>(e)).bits() == e.bits(), "encoding is idempotent");
    }
    const double xd = static_cast<double>(x) * (1.0 + 0x1p-30);  // a double that is not a float
    const F ed(xd);
    if (!std::isnan(static_cast<float>(ed))) {
      fuzz_check(F(static_cast<double>(static_cast<float>(ed))).bits() == ed.bits(), "idempotent from double");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::apply([&](auto... f) { (check_format<decltype(f)>(data, size), ...); },
             std::tuple<mixprec::bfloat16, mixprec::float16, mixprec::float8_e4m3fn, mixprec::float8_e5m2,
                        mixprec::float8_e4m3fnuz, mixprec::float8_e5m2fnuz, mixprec::float8_e4m3b11fnuz,
                        mixprec::float8_e3m4, mixprec::float8_e4m3, mixprec::float8_e8m0fnu, mixprec::float6_e2m3fn,
                        mixprec::float6_e3m2fn, mixprec::float4_e2m1fn>{});
  return 0;
}
