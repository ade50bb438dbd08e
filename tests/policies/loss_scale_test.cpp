// Tests of mixprec/policies/loss_scale.hpp against jmp's published behaviour (jmp/_src/loss_scale_test.py:
// test_static_loss_scale, test_dynamic_loss_scale_adjust_increases_on_finite,
// ..._reduce_on_non_finite, ..._explicit_min_loss_scale), plus the parts mixprec adds: a ceiling,
// validation, checkpoints that keep every field, and scaling that keeps leaf types.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/intn.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/loss_scale.hpp"

namespace loss_scale_test {

using Catch::Matchers::Contains;
using Catch::Matchers::WithinRel;
using mixprec::bfloat16;
using mixprec::dynamic_loss_scale;
using mixprec::dynamic_loss_scale_options;
using mixprec::float16;

TEST_CASE("every loss scale models loss_scale_like", "[loss_scale]") {
  STATIC_REQUIRE(mixprec::loss_scale_like<mixprec::no_op_loss_scale>);
  STATIC_REQUIRE(mixprec::loss_scale_like<mixprec::static_loss_scale>);
  STATIC_REQUIRE(mixprec::loss_scale_like<dynamic_loss_scale>);
}

TEST_CASE("no_op_loss_scale leaves trees as they are", "[loss_scale]") {
  mixprec::no_op_loss_scale ls;
  const auto tree = std::map<std::string, float>{{"a", 1.0f}};
  CHECK(ls.scale(tree) == tree);
  CHECK(ls.unscale(tree) == tree);
  CHECK(ls.loss_scale() == 1.0f);
  ls.adjust(false);
  CHECK(ls == mixprec::no_op_loss_scale{});
}

TEST_CASE("static and dynamic loss scales multiply and divide as jmp's test_static_loss_scale", "[loss_scale]") {
  for (const float s : {2.0f, 3.0f, 4.0f}) {
    CAPTURE(s);
    const std::map<std::string, float> tree{{"a", 1.0f}};
    const std::map<std::string, float> scaled{{"a", 1.0f * s}};
    const mixprec::static_loss_scale st(s);
    CHECK(st.scale(tree) == scaled);
    CHECK(st.unscale(scaled) == tree);
    const dynamic_loss_scale dy(s);
    CHECK(dy.scale(tree) == scaled);
    CHECK(dy.unscale(scaled) == tree);
  }
}

TEST_CASE("static_loss_scale rejects a scale that is not positive and finite", "[loss_scale]") {
  CHECK_THROWS_WITH(mixprec::static_loss_scale(0.0f), Contains("scale = 0") && Contains("positive finite"));
  CHECK_THROWS_WITH(mixprec::static_loss_scale(-2.0f), Contains("scale = -2"));
  CHECK_THROWS_AS(mixprec::static_loss_scale(std::numeric_limits<float>::infinity()), std::invalid_argument);
  CHECK_THROWS_AS(mixprec::static_loss_scale(std::numeric_limits<float>::quiet_NaN()), std::invalid_argument);
}

TEST_CASE("dynamic_loss_scale increases by factor after period finite steps (jmp)", "[loss_scale][dynamic]") {
  struct params {
    int period;
    float factor;
  };
  for (const params p : {params{20, 2.0f}, params{30, 3.0f}}) {
    CAPTURE(p.period, p.factor);
    dynamic_loss_scale ls({.initial_scale = 10.0f, .period = p.period, .factor = p.factor});
    for (int i = 1; i < p.period; ++i) {
      ls.adjust(true);
      CHECK(ls.loss_scale() == 10.0f);
      CHECK(ls.counter() == i);
    }
    ls.adjust(true);  // the counter wraps and the scale grows
    CHECK(ls.loss_scale() == 10.0f * p.factor);
    CHECK(ls.counter() == 0);
    CHECK(ls.options().period == p.period);
    CHECK(ls.options().factor == p.factor);
  }
}

TEST_CASE("dynamic_loss_scale: 8 finite steps with period 2 take 2 to 32", "[loss_scale][dynamic]") {
  dynamic_loss_scale ls({.initial_scale = 2.0f, .period = 2});
  for (int i = 0; i < 8; ++i) ls.adjust(true);
  CHECK(ls.loss_scale() == 32.0f);  // 2 * 2^(8 / 2)
  CHECK(ls.counter() == 0);
}

TEST_CASE("dynamic_loss_scale: 4 non-finite steps with factor 2 take 400 to 25", "[loss_scale][dynamic]") {
  dynamic_loss_scale ls({.initial_scale = 400.0f, .factor = 2.0f});
  for (int i = 0; i < 4; ++i) ls.adjust(false);
  CHECK(ls.loss_scale() == 25.0f);  // 400 / 2^4
}

TEST_CASE("dynamic_loss_scale decreases on non-finite steps down to min_loss_scale (jmp)", "[loss_scale][dynamic]") {
  struct params {
    int period;
    float factor;
    float min_loss_scale;
  };
  // jmp's cases: the default floor 1, and explicit floors .3125 and .37. (jmp also runs min 0;
  // mixprec rejects a zero floor, see the validation test.)
  for (const params p :
       {params{20, 2.0f, 1.0f}, params{30, 3.0f, 1.0f}, params{20, 2.0f, 0.3125f}, params{30, 3.0f, 0.37f}}) {
    CAPTURE(p.period, p.factor, p.min_loss_scale);
    dynamic_loss_scale ls(
        {.initial_scale = 10.0f, .period = p.period, .factor = p.factor, .min_loss_scale = p.min_loss_scale});
    REQUIRE(10.0 / std::pow(static_cast<double>(p.factor), 100) < 1.0);  // jmp: "should cover max(1, S)"
    for (int i = 0; i < 100; ++i) {
      ls.adjust(false);
      const double expected =
          std::max(static_cast<double>(p.min_loss_scale), 10.0 / std::pow(static_cast<double>(p.factor), i + 1));
      CHECK_THAT(static_cast<double>(ls.loss_scale()), WithinRel(expected, 1e-5));
      CHECK(ls.counter() == 0);
    }
    CHECK(ls.loss_scale() == p.min_loss_scale);
  }
}

TEST_CASE("a non-finite step resets the counter", "[loss_scale][dynamic]") {
  dynamic_loss_scale ls({.initial_scale = 8.0f, .period = 3});
  ls.adjust(true);
  ls.adjust(true);
  CHECK(ls.counter() == 2);
  ls.adjust(false);
  CHECK(ls.counter() == 0);
  CHECK(ls.loss_scale() == 4.0f);
  ls.adjust(true);
  ls.adjust(true);
  CHECK(ls.loss_scale() == 4.0f);  // two finite steps after the reset: not yet three
  ls.adjust(true);
  CHECK(ls.loss_scale() == 8.0f);
}

TEST_CASE("dynamic_loss_scale never grows past max_loss_scale", "[loss_scale][dynamic]") {
  SECTION("an explicit ceiling keeps the scale on its geometric grid") {
    dynamic_loss_scale ls({.initial_scale = 2.0f, .period = 1, .min_loss_scale = 1.0f, .max_loss_scale = 10.0f});
    ls.adjust(true);
    CHECK(ls.loss_scale() == 4.0f);
    ls.adjust(true);
    CHECK(ls.loss_scale() == 8.0f);
    for (int i = 0; i < 10; ++i) ls.adjust(true);
    CHECK(ls.loss_scale() == 8.0f);  // 16 would exceed 10: the scale stays
  }
  SECTION("a ceiling that is on the grid is reached") {
    dynamic_loss_scale ls({.initial_scale = 32768.0f, .period = 1, .max_loss_scale = 65536.0f});
    ls.adjust(true);
    ls.adjust(true);
    CHECK(ls.loss_scale() == 65536.0f);
  }
  SECTION("the default ceiling stops at 2^127, where jmp's first_finite stops") {
    dynamic_loss_scale ls({.initial_scale = std::ldexp(1.0f, 126), .period = 1});
    ls.adjust(true);
    CHECK(ls.loss_scale() == std::ldexp(1.0f, 127));
    ls.adjust(true);  // 2^128 is not a finite float
    CHECK(ls.loss_scale() == std::ldexp(1.0f, 127));
    CHECK(std::isfinite(ls.loss_scale()));
  }
}

TEST_CASE("dynamic_loss_scale copies are independent", "[loss_scale][dynamic]") {
  dynamic_loss_scale a({.initial_scale = 16.0f, .period = 2});
  dynamic_loss_scale b = a;
  a.adjust(false);
  CHECK(a.loss_scale() == 8.0f);
  CHECK(b.loss_scale() == 16.0f);
  b.adjust(true);
  CHECK(b.counter() == 1);
  CHECK(a.counter() == 0);
  CHECK(a != b);
}

TEST_CASE("state() and the state constructor round-trip every field", "[loss_scale][dynamic]") {
  const dynamic_loss_scale_options options{
      .initial_scale = 64.0f, .period = 3, .factor = 4.0f, .min_loss_scale = 0.5f, .max_loss_scale = 1024.0f};
  dynamic_loss_scale ls(options);
  ls.adjust(true);
  ls.adjust(true);  // counter 2
  const mixprec::dynamic_loss_scale_state saved = ls.state();
  CHECK(saved.loss_scale == 64.0f);
  CHECK(saved.counter == 2);
  CHECK(saved.options == options);

  const dynamic_loss_scale restored(saved);
  CHECK(restored == ls);
  // jmp's tree_flatten drops min_loss_scale; here every field survives.
  CHECK(restored.options().min_loss_scale == 0.5f);
  CHECK(restored.options().max_loss_scale == 1024.0f);
  CHECK(restored.options().initial_scale == 64.0f);
  CHECK(restored.options().factor == 4.0f);
  CHECK(restored.options().period == 3);
  CHECK(restored.counter() == 2);

  // Both continue identically: the next finite step grows 64 * 4 = 256; three shrinks floor at 0.5.
  dynamic_loss_scale a = ls;
  dynamic_loss_scale b = restored;
  a.adjust(true);
  b.adjust(true);
  CHECK(a.loss_scale() == 256.0f);
  CHECK(a == b);
  for (int i = 0; i < 6; ++i) {
    a.adjust(false);
    b.adjust(false);
  }
  CHECK(a.loss_scale() == 0.5f);  // 256 / 4^5 = 0.25 would be below the floor
  CHECK(a == b);
}

TEST_CASE("dynamic_loss_scale options are validated with the field and value in the message", "[loss_scale][dynamic]") {
  using O = dynamic_loss_scale_options;
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.initial_scale = 0.0f}), Contains("initial_scale = 0"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.initial_scale = -3.0f}), Contains("initial_scale = -3"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.initial_scale = std::numeric_limits<float>::infinity()}),
                    Contains("initial_scale = inf"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.period = 0}), Contains("period = 0") && Contains("at least 1"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.period = -5}), Contains("period = -5"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.factor = 1.0f}), Contains("factor = 1") && Contains("greater than 1"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.factor = 0.5f}), Contains("factor = 0.5"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.factor = std::numeric_limits<float>::quiet_NaN()}), Contains("factor = nan"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.min_loss_scale = 0.0f}), Contains("min_loss_scale = 0"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.initial_scale = 8.0f, .min_loss_scale = 16.0f, .max_loss_scale = 4.0f}),
                    Contains("min_loss_scale = 16") && Contains("max_loss_scale = 4"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.initial_scale = 0.5f}),
                    Contains("initial_scale = 0.5") && Contains("[min_loss_scale, max_loss_scale]"));
  CHECK_THROWS_WITH(dynamic_loss_scale(O{.initial_scale = 100.0f, .max_loss_scale = 64.0f}),
                    Contains("initial_scale = 100"));
  CHECK_THROWS_AS(dynamic_loss_scale(O{.max_loss_scale = std::numeric_limits<float>::infinity()}),
                  std::invalid_argument);
  CHECK_NOTHROW(dynamic_loss_scale(O{}));  // jmp's defaults with 2^15

  const O ok{.initial_scale = 8.0f, .period = 4};
  CHECK_THROWS_WITH(dynamic_loss_scale(mixprec::dynamic_loss_scale_state{8.0f, 4, ok}),
                    Contains("counter = 4") && Contains("[0, 4)"));
  CHECK_THROWS_WITH(dynamic_loss_scale(mixprec::dynamic_loss_scale_state{8.0f, -1, ok}), Contains("counter = -1"));
  CHECK_THROWS_WITH(dynamic_loss_scale(mixprec::dynamic_loss_scale_state{0.25f, 0, ok}), Contains("loss_scale = 0.25"));
}

TEST_CASE("the default options are jmp's", "[loss_scale][dynamic]") {
  const dynamic_loss_scale_options o;
  CHECK(o.period == 2000);
  CHECK(o.factor == 2.0f);
  CHECK(o.min_loss_scale == 1.0f);
  CHECK(o.initial_scale == 32768.0f);  // 2^15, jmp's docstring
  CHECK(o.max_loss_scale == std::numeric_limits<float>::max());
  const dynamic_loss_scale ls;
  CHECK(ls.loss_scale() == 32768.0f);
  CHECK(ls.counter() == 0);
}

TEST_CASE("scale and unscale touch floating and complex leaves only and keep every type", "[loss_scale]") {
  const auto grads = std::tuple{std::vector<float>{1.0f, -2.5f},
                                std::int32_t{7},
                                bfloat16(3.0f),
                                std::complex<float>(1.0f, -2.0f),
                                true,
                                0.1,
                                mixprec::int4(-3)};
  const mixprec::static_loss_scale ls(1024.0f);
  const auto scaled = ls.scale(grads);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(scaled)>, std::remove_cvref_t<decltype(grads)>>);
  CHECK(std::get<0>(scaled) == std::vector<float>{1024.0f, -2560.0f});
  CHECK(std::get<1>(scaled) == 7);
  CHECK(std::get<2>(scaled).bits() == 0x4540);  // 3072 = 1.5 * 2^11: exponent 138, mantissa 0b1000000
  CHECK(std::get<3>(scaled) == std::complex<float>(1024.0f, -2048.0f));
  CHECK(std::get<4>(scaled) == true);
  CHECK(std::get<5>(scaled) == 102.4);  // 0.1 * 2^10: exact in double, so it equals the literal 102.4
  CHECK(static_cast<int>(std::get<6>(scaled)) == -3);

  const auto back = ls.unscale(scaled);  // a power of two: the round trip is exact
  CHECK(back == grads);
}

TEST_CASE("unscale by a scale that is not a power of two divides, rounding once", "[loss_scale]") {
  const mixprec::static_loss_scale ls(3.0f);
  // 5/3 = 1.101010...b: float keeps 23 fraction bits 0b10101010101010101010101, the rest (0101...) is
  // below half an ulp: 0x3FD55555. jmp's 5 * (1/3) rounds 1/3 up first and lands on 0x3FD55556.
  CHECK(std::bit_cast<std::uint32_t>(ls.unscale(5.0f)) == 0x3FD55555);
  CHECK(ls.unscale(3.0f) == 1.0f);
  // bfloat16: 1/3 = 1.0101010|1010...b * 2^-2 rounds up to 1.0101011b * 2^-2: 0x3EAB.
  CHECK(ls.unscale(bfloat16(1.0f)).bits() == 0x3EAB);
  CHECK(ls.unscale(bfloat16(3.0f)).bits() == 0x3F80);
  // double: 1/3 correctly rounded is 0x3FD5555555555555.
  CHECK(std::bit_cast<std::uint64_t>(ls.unscale(1.0)) == 0x3FD5555555555555ULL);
}

TEST_CASE("unscale_in_place divides the leaves where they are (PyTorch's unscale_)", "[loss_scale][in_place]") {
  auto grads = std::tuple{std::vector<float>{8.0f, -2.0f}, std::int32_t{5}, bfloat16(3.0f),
                          std::complex<double>(4.0, -8.0), std::vector<bool>{true, false}};
  const float* data = std::get<0>(grads).data();
  const mixprec::static_loss_scale ls(4.0f);
  ls.unscale_in_place(grads);
  CHECK(std::get<0>(grads).data() == data);  // the same buffer: no copy
  CHECK(std::get<0>(grads) == std::vector<float>{2.0f, -0.5f});
  CHECK(std::get<1>(grads) == 5);              // integers stay
  CHECK(std::get<2>(grads).bits() == 0x3F40);  // 0.75 = 1.5 * 2^-1: exponent 126, mantissa 0b1000000
  CHECK(std::get<3>(grads) == std::complex<double>(1.0, -2.0));
  CHECK(std::get<4>(grads) == std::vector<bool>{true, false});  // bools stay
}

TEST_CASE("unscale_in_place by a scale that is not a power of two rounds once, as unscale", "[loss_scale][in_place]") {
  const mixprec::static_loss_scale ls(3.0f);
  std::vector<float> f{5.0f, 3.0f};
  ls.unscale_in_place(f);
  CHECK(std::bit_cast<std::uint32_t>(f[0]) == 0x3FD55555);  // see the unscale test above
  CHECK(f[1] == 1.0f);
  std::vector<bfloat16> b{bfloat16(1.0f), bfloat16(3.0f)};
  ls.unscale_in_place(b);
  CHECK(b[0].bits() == 0x3EAB);
  CHECK(b[1].bits() == 0x3F80);
  std::map<std::string, double> d{{"w", 1.0}};
  ls.unscale_in_place(d);
  CHECK(std::bit_cast<std::uint64_t>(d.at("w")) == 0x3FD5555555555555ULL);
}

TEST_CASE("unscale_in_place gives the bits of unscale for every loss scale", "[loss_scale][in_place]") {
  const auto grads = std::tuple{std::vector<float>{1.0f, -7.0f, 1e-3f}, float16(6.0f), bfloat16(-10.0f), 0.3};
  dynamic_loss_scale dynamic({.initial_scale = 1000.0f, .period = 1});
  dynamic.adjust(true);  // 2000: the in-place form uses the current scale
  const auto expected_dynamic = dynamic.unscale(grads);
  auto in_place = grads;
  dynamic.unscale_in_place(in_place);
  CHECK(std::bit_cast<std::uint32_t>(std::get<0>(in_place)[2]) ==
        std::bit_cast<std::uint32_t>(std::get<0>(expected_dynamic)[2]));
  CHECK(std::get<0>(in_place) == std::get<0>(expected_dynamic));
  CHECK(std::get<1>(in_place).bits() == std::get<1>(expected_dynamic).bits());
  CHECK(std::get<2>(in_place).bits() == std::get<2>(expected_dynamic).bits());
  CHECK(std::bit_cast<std::uint64_t>(std::get<3>(in_place)) ==
        std::bit_cast<std::uint64_t>(std::get<3>(expected_dynamic)));
  // Hand-worked: -7 / 2000 = -0.0035 and 6 / 2000 = 0.003 in float16 is 0x1A25 (1.536 * 2^-9, mantissa
  // 0.536 * 1024 = 548.9 -> 549 = 0x225).
  CHECK(std::get<1>(in_place).bits() == 0x1A25);

  auto unchanged = grads;
  mixprec::no_op_loss_scale::unscale_in_place(unchanged);
  CHECK(unchanged == grads);
}

TEST_CASE("scaling float16 gradients past 65504 gives Inf, which all_finite reports", "[loss_scale]") {
  dynamic_loss_scale ls({.initial_scale = 4.0f});
  const std::vector<float16> g{float16(20000.0f), float16(1.0f)};
  const auto scaled = ls.scale(g);
  CHECK(scaled[0].bits() == 0x7C00);  // 80000 > 65504: +Inf
  CHECK(scaled[1].bits() == 0x4400);  // 4 = 2^2: exponent 17
  CHECK_FALSE(mixprec::all_finite(scaled));
  ls.adjust(mixprec::all_finite(scaled));
  CHECK(ls.loss_scale() == 2.0f);
  const auto rescaled = ls.scale(g);
  CHECK(rescaled[0].bits() == 0x78E2);  // 40000 = 1.220703125 * 2^15: exponent 30, mantissa 226
  CHECK(mixprec::all_finite(rescaled));
}

TEST_CASE("a training loop skips non-finite steps and settles the scale", "[loss_scale][dynamic]") {
  // Gradients overflow float16 whenever 1000 * scale > 65504, i.e. scale > 65.5.
  dynamic_loss_scale ls({.initial_scale = 1024.0f, .period = 4});
  int applied = 0;
  for (int step = 0; step < 40; ++step) {
    const auto grads = ls.scale(std::vector<float16>{float16(1000.0f), float16(-0.5f)});
    const auto unscaled = ls.unscale(grads);
    const bool finite = mixprec::all_finite(unscaled);
    ls.adjust(finite);
    if (finite) {
      ++applied;
      CHECK(static_cast<float>(unscaled[0]) == 1000.0f);  // power-of-two scales: exact round trip
    }
  }
  // 1024 -> 512 -> ... -> 64 (4 overflows), then it alternates: 4 finite steps at 64 grow it to 128,
  // which overflows and falls back to 64.
  CHECK(ls.loss_scale() <= 128.0f);
  CHECK(ls.loss_scale() >= 64.0f);
  CHECK(applied > 25);
}

TEST_CASE("unscale_in_place takes a vector of spans and writes through them", "[loss_scale][in_place]") {
  std::vector<float> a{8.0f, 3.0f}, b{-1.0f};
  std::vector<std::span<float>> spans{std::span<float>(a), std::span<float>(b)};
  const std::vector<std::vector<float>> expected{mixprec::dynamic_loss_scale(3.0f).unscale(a),
                                                 mixprec::dynamic_loss_scale(3.0f).unscale(b)};
  mixprec::dynamic_loss_scale(3.0f).unscale_in_place(spans);
  CHECK(a == expected[0]);
  CHECK(b == expected[1]);
  mixprec::static_loss_scale(2.0f).unscale_in_place(spans);
  CHECK(b[0] == expected[1][0] / 2);
  std::optional<std::vector<float>> opt{{4.0f}};
  mixprec::static_loss_scale(4.0f).unscale_in_place(opt);
  CHECK((*opt)[0] == 1.0f);
}

}  // namespace loss_scale_test
