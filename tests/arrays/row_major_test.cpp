// Tests of mixprec/arrays/row_major.hpp: which sources are read in place (the view's data() is the
// source's own element (0, ..., 0)) and which are copied, and that every element lands at its
// row-major index — checked against values written as a formula of the indices here.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>
#include <xtensor/xadapt.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xview.hpp>

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/arrays/row_major.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/formats/bfloat16.hpp"

namespace row_major_test {

using mixprec::as_row_major;
using mixprec::dynamic_rank;
using mixprec::row_major_view;

namespace {
/// Element (i, j) of the test matrices: distinct for every (i, j) of a matrix with fewer than 100 columns.
constexpr float value(std::size_t i, std::size_t j) { return static_cast<float>(100 * i + j); }

/// True when `v` holds rows × cols elements with v[i * cols + j] == value(row0 + i * row_step, col0 + j * col_step).
template <class V>
bool holds(const V& v, std::size_t rows, std::size_t cols, std::size_t row0 = 0, std::size_t col0 = 0,
           std::size_t row_step = 1, std::size_t col_step = 1) {
  if (v.size() != rows * cols) return false;
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      if (v.data()[i * cols + j] != value(row0 + i * row_step, col0 + j * col_step)) return false;
    }
  }
  return true;
}

xt::xtensor<float, 2> matrix(std::size_t rows, std::size_t cols) {
  auto m = xt::xtensor<float, 2>::from_shape({rows, cols});
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) m(i, j) = value(i, j);
  }
  return m;
}
}  // namespace

TEST_CASE("as_row_major reads xtensor containers and adaptors in place", "[arrays][row_major]") {
  const auto m = matrix(3, 5);
  SECTION("xt::xtensor: static rank, same buffer") {
    const auto v = as_row_major(m);
    STATIC_REQUIRE(std::is_same_v<std::remove_const_t<decltype(v)>, row_major_view<float, 2>>);
    CHECK(v.data() == m.data());
    CHECK_FALSE(v.owns_copy());
    CHECK(v.shape() == std::array<std::size_t, 2>{3, 5});
    CHECK(v.dimension() == 2);
    CHECK(holds(v, 3, 5));
  }
  SECTION("xt::xarray: dynamic rank") {
    const xt::xarray<float> a = m;
    const auto v = as_row_major(a);
    STATIC_REQUIRE(std::is_same_v<std::remove_const_t<decltype(v)>, row_major_view<float, dynamic_rank>>);
    CHECK(v.data() == a.data());
    CHECK(v.dimension() == 2);
    CHECK(holds(v, 3, 5));
  }
  SECTION("xt::adapt over a pointer, static and dynamic shapes") {
    std::vector<float> buffer(m.begin(), m.end());
    const auto a = xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::array<std::size_t, 2>{3, 5});
    const auto v = as_row_major(a);
    STATIC_REQUIRE(std::is_same_v<std::remove_const_t<decltype(v)>, row_major_view<float, 2>>);
    CHECK(v.data() == buffer.data());
    CHECK(holds(v, 3, 5));
    const auto d = xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::vector<std::size_t>{3, 5});
    const auto w = as_row_major(d);
    STATIC_REQUIRE(std::is_same_v<std::remove_const_t<decltype(w)>, row_major_view<float, dynamic_rank>>);
    CHECK(w.data() == buffer.data());
  }
  SECTION("xt::adapt over a const pointer and over a std::vector") {
    const std::vector<float> buffer(m.begin(), m.end());
    const auto a = xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::array<std::size_t, 2>{3, 5});
    CHECK(as_row_major(a).data() == buffer.data());
    std::vector<float> owned(m.begin(), m.end());
    const auto b = xt::adapt(owned, std::array<std::size_t, 2>{3, 5});
    CHECK(as_row_major(b).data() == owned.data());
  }
  SECTION("xt::xtensor_fixed") {
    xt::xtensor_fixed<float, xt::xshape<3, 5>> f = m;
    const auto v = as_row_major(f);
    STATIC_REQUIRE(std::is_same_v<std::remove_const_t<decltype(v)>, row_major_view<float, 2>>);
    CHECK(v.data() == f.data());
    CHECK(holds(v, 3, 5));
  }
  SECTION("contiguous views: a range of rows, one row, a strided view of whole rows") {
    const auto rows = xt::view(m, xt::range(1, 3), xt::all());
    const auto v = as_row_major(rows);
    CHECK(v.data() == &m(1, 0));
    CHECK_FALSE(v.owns_copy());
    CHECK(holds(v, 2, 5, 1));
    const auto row = xt::view(m, 2);
    const auto r = as_row_major(row);
    CHECK(r.data() == &m(2, 0));
    CHECK(r.dimension() == 1);
    CHECK(holds(r, 1, 5, 2));
    const auto s = xt::strided_view(m, {xt::range(1, 3)});
    CHECK(as_row_major(s).data() == &m(1, 0));
  }
}

TEST_CASE("as_row_major copies what is not contiguous row-major, in row-major order", "[arrays][row_major]") {
  const auto m = matrix(4, 6);
  SECTION("a column, every other column, a transposed view") {
    const auto column = as_row_major(xt::view(m, xt::all(), 1));
    CHECK(column.owns_copy());
    CHECK(column.dimension() == 1);
    CHECK(holds(column, 4, 1, 0, 1));
    const auto every_other = as_row_major(xt::view(m, xt::all(), xt::range(0, 6, 2)));
    CHECK(every_other.owns_copy());
    CHECK(holds(every_other, 4, 3, 0, 0, 1, 2));
    const auto t = as_row_major(xt::transpose(m));
    CHECK(t.owns_copy());
    REQUIRE(t.shape() == std::array<std::size_t, 2>{6, 4});
    for (std::size_t i = 0; i < 6; ++i) {
      for (std::size_t j = 0; j < 4; ++j) CHECK(t.data()[i * 4 + j] == value(j, i));
    }
  }
  SECTION("a column-major container") {
    const xt::xtensor<float, 2, xt::layout_type::column_major> c = m;
    const auto v = as_row_major(c);
    CHECK(v.owns_copy());
    CHECK(holds(v, 4, 6));
  }
  SECTION("a lazy expression is evaluated once") {
    const auto v = as_row_major(m + 0.0f);
    CHECK(v.owns_copy());
    CHECK(holds(v, 4, 6));
  }
  SECTION("a moved view keeps its copy") {
    auto v = as_row_major(xt::view(m, xt::all(), 2));
    const float* data = v.data();
    const row_major_view<float, 1> moved = std::move(v);
    CHECK(moved.data() == data);
    CHECK(holds(moved, 4, 1, 0, 2));
  }
}

TEST_CASE("as_row_major reads Eigen matrices with row-major strides in place and copies the others",
          "[arrays][row_major][eigen]") {
  using row_major_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  row_major_matrix r(3, 4);
  for (Eigen::Index i = 0; i < 3; ++i) {
    for (Eigen::Index j = 0; j < 4; ++j) r(i, j) = value(static_cast<std::size_t>(i), static_cast<std::size_t>(j));
  }
  SECTION("a row-major matrix and a map of one: [rows, cols], same buffer") {
    const auto v = as_row_major(r);
    STATIC_REQUIRE(std::is_same_v<std::remove_const_t<decltype(v)>, row_major_view<float, 2>>);
    CHECK(v.data() == r.data());
    CHECK(v.shape() == std::array<std::size_t, 2>{3, 4});
    CHECK(holds(v, 3, 4));
    const Eigen::Map<const row_major_matrix> map(r.data(), 3, 4);
    CHECK(as_row_major(map).data() == r.data());
    const Eigen::Ref<const row_major_matrix> ref(r);
    CHECK(as_row_major(ref).data() == r.data());
  }
  SECTION("whole rows of a row-major matrix; a column vector; a row vector") {
    const auto rows = as_row_major(r.middleRows(1, 2));
    CHECK(rows.data() == r.data() + 4);
    CHECK(holds(rows, 2, 4, 1));
    const Eigen::VectorXf c = r.col(1);
    const auto cv = as_row_major(c);
    CHECK(cv.data() == c.data());
    CHECK(cv.shape() == std::array<std::size_t, 2>{3, 1});
    const Eigen::RowVectorXf rv = r.row(2);
    CHECK(as_row_major(rv).data() == rv.data());
    CHECK(holds(as_row_major(rv), 1, 4, 2));
  }
  SECTION("column-major matrices, column blocks and strided maps are copied in row-major order") {
    const Eigen::MatrixXf c = r;
    const auto v = as_row_major(c);
    CHECK(v.owns_copy());
    CHECK(holds(v, 3, 4));
    const auto block = as_row_major(r.middleCols(1, 2));
    CHECK(block.owns_copy());
    CHECK(holds(block, 3, 2, 0, 1));
    const Eigen::Map<const row_major_matrix, 0, Eigen::OuterStride<>> strided(r.data(), 3, 2, Eigen::OuterStride<>(4));
    const auto s = as_row_major(strided);
    CHECK(s.owns_copy());
    CHECK(holds(s, 3, 2));
    const auto product = as_row_major(r * 1.0f);
    CHECK(product.owns_copy());
    CHECK(holds(product, 3, 4));
  }
  SECTION("small floats keep their type") {
    const Eigen::Matrix<mixprec::bfloat16, 2, 2, Eigen::RowMajor> h = r.topLeftCorner(2, 2).cast<mixprec::bfloat16>();
    const auto v = as_row_major(h);
    STATIC_REQUIRE(std::is_same_v<std::remove_const_t<decltype(v)>, row_major_view<mixprec::bfloat16, 2>>);
    CHECK(v.data() == h.data());
  }
}

}  // namespace row_major_test
