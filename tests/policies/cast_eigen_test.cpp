// Tests of mixprec/arrays/eigen.hpp: Eigen matrices and arrays as trees (cast, loss scaling, all_finite), and
// Eigen::NumTraits for the small floats, checked against Eigen's own NumTraits<Eigen::bfloat16> bit
// patterns (Eigen/src/Core/arch/Default/BFloat16.h) and the format definitions.
#include <catch2/catch.hpp>

#include <complex>
#include <limits>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <vector>

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/cast.hpp"
#include "mixprec/policies/loss_scale.hpp"

namespace cast_eigen_test {

using mixprec::bfloat16;
using mixprec::float16;
using MatrixXbf = Eigen::Matrix<bfloat16, Eigen::Dynamic, Eigen::Dynamic>;

TEST_CASE("an Eigen float matrix cast to bfloat16 is an evaluated bfloat16 matrix of the same shape", "[cast][eigen]") {
  Eigen::MatrixXf m(2, 3);
  m << 1.0f, 3.14159274f, -2.0f, 0.5f, 0.1f, 65504.0f;
  const auto h = mixprec::cast_floating<bfloat16>(m);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(h)>, MatrixXbf>);
  REQUIRE(h.rows() == 2);
  REQUIRE(h.cols() == 3);
  CHECK(h(0, 0).bits() == 0x3F80);  // 1.0
  CHECK(h(0, 1).bits() == 0x4049);  // 3.14159274f: low half 0x0FDB rounds down
  CHECK(h(0, 2).bits() == 0xC000);  // -2.0
  CHECK(h(1, 0).bits() == 0x3F00);  // 0.5
  CHECK(h(1, 1).bits() == 0x3DCD);  // 0.1f = 0x3DCCCCCD: low half 0xCCCD rounds up
  CHECK(h(1, 2).bits() == 0x4780);  // 65504 = 0x477FE000: low half 0xE000 rounds up to 65536
}

TEST_CASE("fixed-size, row-major and array types keep their sizes and options", "[cast][eigen]") {
  // A fixed 2-vector: the cast must not mistake (rows, cols) for coefficients.
  const Eigen::Vector2d v(3.0, -0.25);
  const auto vf = mixprec::cast_floating<float>(v);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(vf)>, Eigen::Vector2f>);
  CHECK(vf(0) == 3.0f);
  CHECK(vf(1) == -0.25f);

  Eigen::Matrix<float, 2, 3, Eigen::RowMajor> r;
  r << 1, 2, 3, 4, 5, 6;
  const auto rh = mixprec::cast_floating<float16>(r);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(rh)>, Eigen::Matrix<float16, 2, 3, Eigen::RowMajor>>);
  CHECK(static_cast<float>(rh(0, 2)) == 3.0f);
  CHECK(static_cast<float>(rh(1, 0)) == 4.0f);
  CHECK(rh(1, 2).bits() == 0x4600);  // 6 = 1.5 * 2^2: exponent 17, mantissa 0b1000000000

  const Eigen::ArrayXd a = Eigen::ArrayXd::Constant(4, 0.1);
  const auto af = mixprec::cast_floating<float>(a);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(af)>, Eigen::ArrayXf>);
  CHECK(af.size() == 4);
  CHECK((af == 0.1f).all());
}

TEST_CASE("complex Eigen matrices follow a float or double target", "[cast][eigen]") {
  Eigen::MatrixXcf z(1, 2);
  z << std::complex<float>(1.0f, -1.0f), std::complex<float>(0.5f, 2.0f);
  const auto zd = mixprec::cast_floating<double>(z);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(zd)>, Eigen::MatrixXcd>);
  CHECK(zd(0, 1) == std::complex<double>(0.5, 2.0));
}

TEST_CASE("Eigen containers inside trees, with a policy and with promote", "[cast][eigen]") {
  using P = mixprec::policy<float, bfloat16, float>;
  const auto params = std::tuple{Eigen::MatrixXf::Ones(2, 2).eval(), Eigen::VectorXf::Zero(2).eval(), 3};
  const auto c = mixprec::cast_to_compute<P>(params);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(c)>,
                                std::tuple<MatrixXbf, Eigen::Matrix<bfloat16, Eigen::Dynamic, 1>, int>>);
  CHECK(std::get<0>(c)(1, 1).bits() == 0x3F80);
  CHECK(std::get<1>(c)(0).bits() == 0x0000);
  CHECK(std::get<2>(c) == 3);

  // Flax's promote: a bfloat16 input with float32 weights computes in float32.
  using Q = mixprec::policy<float, mixprec::promote>;
  const MatrixXbf x = MatrixXbf::Constant(1, 2, bfloat16(2.0f));  // evaluated: expressions are not trees
  const auto [xc, wc] = mixprec::cast_to_compute<Q>(std::pair{x, Eigen::MatrixXf::Ones(2, 1).eval()});
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(xc)>, Eigen::MatrixXf>);
  CHECK(xc(0, 1) == 2.0f);
  CHECK((xc * wc)(0, 0) == 4.0f);
}

TEST_CASE("Eigen::NumTraits of the small floats come from their formats", "[eigen][numtraits]") {
  using NT = Eigen::NumTraits<bfloat16>;
  // Eigen's own NumTraits<Eigen::bfloat16>: epsilon 0x3C00 (2^-7), highest 0x7F7F, lowest 0xFF7F,
  // infinity 0x7F80.
  CHECK(NT::epsilon().bits() == 0x3C00);
  CHECK(NT::highest().bits() == 0x7F7F);
  CHECK(NT::lowest().bits() == 0xFF7F);
  CHECK(NT::infinity().bits() == 0x7F80);
  CHECK(isnan(NT::quiet_NaN()));
  CHECK(static_cast<float>(NT::dummy_precision()) == 0.0625f);  // 8 * 2^-7
  STATIC_REQUIRE(NT::IsSigned == 1);
  STATIC_REQUIRE(NT::IsInteger == 0);
  STATIC_REQUIRE(NT::IsComplex == 0);
  STATIC_REQUIRE(std::is_same_v<NT::Real, bfloat16>);
  CHECK(NT::digits() == 8);  // 7 mantissa bits + the implicit one

  // float16: epsilon 2^-10 (exponent field 5: 0x1400), highest 65504 (0x7BFF), lowest -65504 (0xFBFF).
  CHECK(Eigen::NumTraits<float16>::epsilon().bits() == 0x1400);
  CHECK(Eigen::NumTraits<float16>::highest().bits() == 0x7BFF);
  CHECK(Eigen::NumTraits<float16>::lowest().bits() == 0xFBFF);

  // float8_e8m0fnu is unsigned and has no zero: its lowest value is 2^-127 (pattern 0), not -max.
  using E8 = Eigen::NumTraits<mixprec::float8_e8m0fnu>;
  STATIC_REQUIRE(E8::IsSigned == 0);
  CHECK(E8::lowest().bits() == 0x00);
  // float8_e4m3fn: highest 448 = 0x7E, lowest -448 = 0xFE.
  CHECK(Eigen::NumTraits<mixprec::float8_e4m3fn>::highest().bits() == 0x7E);
  CHECK(Eigen::NumTraits<mixprec::float8_e4m3fn>::lowest().bits() == 0xFE);
}

TEST_CASE("Eigen matrices of bfloat16 support everyday operations", "[eigen][numtraits]") {
  MatrixXbf a(2, 2);
  a << bfloat16(1.0f), bfloat16(2.0f), bfloat16(3.0f), bfloat16(4.0f);
  MatrixXbf b = MatrixXbf::Identity(2, 2);
  b(0, 1) = bfloat16(1.0f);

  const MatrixXbf sum = a + b;
  CHECK(static_cast<float>(sum(0, 0)) == 2.0f);
  CHECK(static_cast<float>(sum(0, 1)) == 3.0f);

  // [[1, 2], [3, 4]] * [[1, 1], [0, 1]] = [[1, 3], [3, 7]]
  const MatrixXbf prod = a * b;
  CHECK(static_cast<float>(prod(0, 0)) == 1.0f);
  CHECK(static_cast<float>(prod(0, 1)) == 3.0f);
  CHECK(static_cast<float>(prod(1, 0)) == 3.0f);
  CHECK(static_cast<float>(prod(1, 1)) == 7.0f);

  CHECK(static_cast<float>(a.sum()) == 10.0f);
  CHECK(static_cast<float>((a * bfloat16(0.5f))(1, 1)) == 2.0f);
  CHECK(static_cast<float>((-a).cwiseAbs()(1, 0)) == 3.0f);
  CHECK(a.isApprox(a));
  CHECK_FALSE(a.isApprox(b));
  CHECK(a.allFinite());
  a(0, 0) = std::numeric_limits<bfloat16>::infinity();
  CHECK_FALSE(a.allFinite());

  std::ostringstream out;
  out << b;
  CHECK(out.str().find('1') != std::string::npos);
}

TEST_CASE("all_finite and loss scaling reach into Eigen leaves", "[eigen][all_finite][loss_scale]") {
  Eigen::Matrix<float16, 2, 2> g;
  g << float16(1.0f), float16(-2.0f), float16(0.5f), float16(100.0f);
  const auto t = std::tuple{g, Eigen::VectorXd::Ones(3).eval(), 7};
  CHECK(mixprec::all_finite(t));

  auto broken = t;
  std::get<1>(broken)(2) = std::numeric_limits<double>::quiet_NaN();
  CHECK_FALSE(mixprec::all_finite(broken));
  auto broken16 = t;
  std::get<0>(broken16)(1, 1) = float16(70000.0f);  // above 65504: +Inf
  CHECK_FALSE(mixprec::all_finite(broken16));

  const mixprec::static_loss_scale ls(1024.0f);
  const auto scaled = ls.scale(t);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(scaled)>, std::remove_cvref_t<decltype(t)>>);
  CHECK(std::get<0>(scaled)(1, 1).bits() == 0x7C00);  // 102400 > 65504
  CHECK(std::get<0>(scaled)(0, 1).bits() == 0xE800);  // -2048 = -2^11: exponent 26
  CHECK(std::get<1>(scaled)(0) == 1024.0);
  CHECK(std::get<2>(scaled) == 7);
  CHECK_FALSE(mixprec::all_finite(scaled));
  const auto back = ls.unscale(ls.scale(std::get<1>(t)));
  CHECK(back == std::get<1>(t));
}

TEST_CASE("Eigen::Map is a tree: casts give owning matrices, in-place walks write through", "[cast][eigen][map]") {
  std::vector<float> buffer{1.0f, 3.14159274f, -2.0f, 0.5f, 0.1f, 65504.0f};
  using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<row_matrix> map(buffer.data(), 2, 3);
  const auto h = mixprec::cast_floating<mixprec::bfloat16>(map);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(h)>,
                                Eigen::Matrix<mixprec::bfloat16, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>);
  REQUIRE(h.rows() == 2);
  CHECK(h(0, 1).bits() == 0x4049);  // pi rounded to 8 significand bits
  CHECK(h(1, 2).bits() == 0x4780);  // 65504 rounds up to 2^16
  const Eigen::Map<const Eigen::Array<float, 3, 2>> read_only(buffer.data());
  const auto a = mixprec::cast_floating<double>(read_only);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(a)>, Eigen::Array<double, 3, 2>>);
  CHECK(a(1, 1) == 0.1f);  // column-major: coefficient (1, 1) is buffer[4]
  CHECK(mixprec::all_finite(read_only));

  const mixprec::static_loss_scale ls(2.0f);
  const auto unscaled = ls.unscale(map);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(unscaled)>, row_matrix>);
  CHECK(unscaled(1, 2) == 32752.0f);
  CHECK(buffer[5] == 65504.0f);  // unscale copies
  ls.unscale_in_place(map);
  CHECK(buffer == std::vector<float>{0.5f, 3.14159274f / 2, -1.0f, 0.25f, 0.1f / 2, 32752.0f});
  const auto doubled = mixprec::tree_map([](float x, float y) { return x + y; }, map, map);
  CHECK(doubled(0, 0) == 1.0f);
}

}  // namespace cast_eigen_test
