// Every layer takes views and maps as well as owning arrays (nn/detail/arrays.hpp, arrays/row_major.hpp):
// for each entry point, the same values given as xt::adapt (static and dynamic rank), an Eigen::Map of
// row-major floats, a column-major Eigen::Matrix (copied), a contiguous xt::view (read in place) and a
// strided xt::view (copied) give the same bits, outputs and gradients, as the owning xt::xtensor.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <random>
#include <string_view>
#include <type_traits>
#include <vector>
#include <xtensor/xadapt.hpp>
#include <xtensor/xview.hpp>

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/policies/policy.hpp"

namespace layer_inputs_test {

namespace nn = mixprec::nn;
using mixed = mixprec::policy<float, mixprec::bfloat16, float>;  // p=f32, c=bf16, o=f32: roundings happen
using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {
/// Every value of every output (arrays, or gradient structs walked with for_each), as doubles (exact for
/// float and the small floats), in order.
struct fingerprint {
  std::vector<double> values;
  std::vector<std::size_t> shapes;  // each array's extents, so that a reshaped output differs

  template <class A>
  requires requires(const A& a) {
    a.data();
    a.shape();
  }
  void add(const A& a) {
    shapes.push_back(a.dimension());
    for (auto d : a.shape()) shapes.push_back(d);
    for (std::size_t i = 0; i < a.size(); ++i) values.push_back(static_cast<double>(a.data()[i]));
  }
  template <class G>
  requires requires(G& g) {
    g.for_each([](std::string_view, const auto&) {});
  }
  void add(const G& g) {
    g.for_each([&](std::string_view, const auto& t) { add(t); });
  }
  bool operator==(const fingerprint&) const = default;
};

template <class... Outs>
fingerprint print(const Outs&... outs) {
  fingerprint f;
  (f.add(outs), ...);
  return f;
}

xt::xtensor<float, 2> gaussian(std::size_t rows, std::size_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto x = xt::xtensor<float, 2>::from_shape({rows, cols});
  for (auto& v : x) v = n(rng);
  return x;
}

/// `f(input)` for the owning x and for each other form of the same values: the same fingerprint, and
/// an owning xtensor/xarray returned (checked by `f` through the fingerprint's shapes).
template <class F>
void check_every_form(const xt::xtensor<float, 2>& x, F&& f) {
  const fingerprint expected = f(x);
  const std::size_t rows = x.shape()[0];
  const std::size_t cols = x.shape()[1];
  std::vector<float> buffer(x.begin(), x.end());
  {
    INFO("xt::adapt, static rank");
    CHECK(f(xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::array<std::size_t, 2>{rows, cols})) ==
          expected);
  }
  {
    INFO("xt::adapt, dynamic rank");
    CHECK(f(xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::vector<std::size_t>{rows, cols})) ==
          expected);
  }
  const Eigen::Map<const row_matrix> map(buffer.data(), static_cast<Eigen::Index>(rows),
                                         static_cast<Eigen::Index>(cols));
  {
    INFO("Eigen::Map of row-major floats");
    CHECK(f(map) == expected);
  }
  {
    INFO("column-major Eigen::MatrixXf (copied)");
    const Eigen::MatrixXf column_major = map;
    CHECK(f(column_major) == expected);
  }
  {
    INFO("contiguous xt::view: rows 1..rows of a taller array");
    xt::xtensor<float, 2> taller = xt::zeros<float>({rows + 2, cols});
    xt::view(taller, xt::range(1, rows + 1), xt::all()) = x;
    CHECK(f(xt::view(taller, xt::range(1, rows + 1), xt::all())) == expected);
  }
  {
    INFO("strided xt::view: every other column of a wider array (copied)");
    xt::xtensor<float, 2> wider = xt::zeros<float>({rows, 2 * cols});
    xt::view(wider, xt::all(), xt::range(0, 2 * cols, 2)) = x;
    CHECK(f(xt::view(wider, xt::all(), xt::range(0, 2 * cols, 2))) == expected);
  }
}
}  // namespace

TEST_CASE("dense takes views and maps: forward, backward, and owning outputs", "[nn][dense][inputs]") {
  std::mt19937 rng(1);
  const nn::dense<mixed> layer(12, 7, rng);
  const auto x = gaussian(5, 12, 2);
  check_every_form(x, [&](const auto& in) { return print(layer(in)); });
  check_every_form(x, [&](const auto& in) {
    nn::dense<mixed>::saved<float> ctx;
    return print(layer.forward(in, ctx));
  });
  nn::dense<mixed>::saved<float> ctx;
  (void)layer.forward(x, ctx);
  check_every_form(gaussian(5, 7, 3), [&](const auto& dy) {
    auto g = layer.zero_gradients();
    const auto dx = layer.backward(ctx, dy, g);
    return print(dx, g);
  });
  // Outputs own their elements: an xt::xtensor for a static rank, an xt::xarray for a dynamic one.
  std::vector<float> buffer(x.begin(), x.end());
  const auto y_static =
      layer(xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::array<std::size_t, 2>{5, 12}));
  STATIC_REQUIRE(std::is_same_v<decltype(y_static), const xt::xtensor<float, 2>>);
  const auto y_dynamic =
      layer(xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::vector<std::size_t>{5, 12}));
  STATIC_REQUIRE(std::is_same_v<decltype(y_dynamic), const xt::xarray<float>>);
  const auto y_eigen = layer(Eigen::Map<const row_matrix>(buffer.data(), 5, 12));
  STATIC_REQUIRE(std::is_same_v<decltype(y_eigen), const xt::xtensor<float, 2>>);
}

TEST_CASE("dense reads a view of a bfloat16 array in place", "[nn][dense][inputs]") {
  std::mt19937 rng(4);
  const nn::dense<mixed> layer(6, 3, rng);
  const auto x = gaussian(4, 6, 5);
  xt::xtensor<mixprec::bfloat16, 2> h = xt::xtensor<mixprec::bfloat16, 2>::from_shape({4, 6});
  for (std::size_t i = 0; i < x.size(); ++i) h.data()[i] = mixprec::bfloat16(x.data()[i]);
  const auto y = layer(xt::view(h, xt::range(1, 3), xt::all()));
  const xt::xtensor<mixprec::bfloat16, 2> rows = xt::view(h, xt::range(1, 3), xt::all());
  CHECK(print(y) == print(layer(rows)));
}

TEST_CASE("layer_norm and rms_norm take views and maps", "[nn][layer_norm][rms_norm][inputs]") {
  const auto x = gaussian(6, 16, 6);
  const auto dy = gaussian(6, 16, 7);
  const nn::layer_norm<mixed> ln(16);
  check_every_form(x, [&](const auto& in) { return print(ln(in)); });
  check_every_form(x, [&](const auto& in) {
    nn::layer_norm<mixed>::saved<float> ctx;
    auto y = ln.forward(in, ctx);
    auto g = ln.zero_gradients();
    return print(y, ln.backward(ctx, dy, g), g);
  });
  nn::layer_norm<mixed>::saved<float> ln_ctx;
  (void)ln.forward(x, ln_ctx);
  check_every_form(dy, [&](const auto& d) {
    auto g = ln.zero_gradients();
    return print(ln.backward(ln_ctx, d, g), g);
  });

  const nn::rms_norm<mixed> rn(16);
  check_every_form(x, [&](const auto& in) { return print(rn(in)); });
  const auto residual = gaussian(6, 16, 8);
  check_every_form(x, [&](const auto& in) {
    auto [h, r] = rn(in, residual);
    return print(h, r);
  });
  check_every_form(residual, [&](const auto& res) {
    auto [h, r] = rn(x, res);
    return print(h, r);
  });
  check_every_form(x, [&](const auto& in) {
    auto [h, r] = rn(in, nn::no_residual);
    return print(h, r);
  });
  nn::rms_norm<mixed>::saved<float> rn_ctx;
  (void)rn.forward(x, residual, rn_ctx);
  check_every_form(dy, [&](const auto& d) {
    auto g = rn.zero_gradients();
    return print(rn.backward(rn_ctx, d, residual, g), g);
  });
}

TEST_CASE("feed_forward takes views and maps", "[nn][feed_forward][inputs]") {
  std::mt19937 rng(9);
  const auto layer = nn::feed_forward<mixed>::init(nn::ffn_activation::swiglu, 8, 20, rng);
  const auto x = gaussian(5, 8, 10);
  check_every_form(x, [&](const auto& in) { return print(layer(in)); });
  nn::feed_forward<mixed>::saved<float> ctx;
  (void)layer.forward(x, ctx);
  check_every_form(gaussian(5, 8, 11), [&](const auto& dy) {
    auto g = layer.zero_gradients();
    return print(layer.backward(ctx, dy, g), g);
  });
}

TEST_CASE("attention takes views and maps, for x, the key mask and dy", "[nn][attention][inputs]") {
  std::mt19937 rng(12);
  const auto layer = nn::attention<mixed>::lecun_normal({.d_model = 8, .n_heads = 2}, rng);
  const auto x = gaussian(6, 8, 13);
  check_every_form(x, [&](const auto& in) { return print(layer(in)); });
  const std::array<bool, 6> keys{true, true, false, true, true, false};
  const xt::xtensor<bool, 1> mask = xt::adapt(keys.data(), 6, xt::no_ownership(), std::array<std::size_t, 1>{6});
  const auto mask_view = xt::adapt(keys.data(), 6, xt::no_ownership(), std::array<std::size_t, 1>{6});
  check_every_form(x, [&](const auto& in) { return print(layer(in, mask_view)); });
  CHECK(print(layer(x, mask_view)) == print(layer(x, mask)));
  nn::attention<mixed>::saved<float> ctx;
  (void)layer.forward(x, mask, ctx);
  check_every_form(gaussian(6, 8, 14), [&](const auto& dy) {
    auto g = layer.zero_gradients();
    return print(layer.backward(ctx, dy, g), g);
  });
  // Decoding with a cache: the tokens given as a view, one step at a time.
  auto owned_cache = layer.make_cache<float>(1, 6);
  auto view_cache = layer.make_cache<float>(1, 6);
  for (std::size_t t = 0; t < 6; ++t) {
    const xt::xtensor<float, 2> token = xt::view(x, xt::range(t, t + 1), xt::all());
    CHECK(print(layer(xt::view(x, xt::range(t, t + 1), xt::all()), view_cache)) == print(layer(token, owned_cache)));
  }
}

TEST_CASE("embedding takes ids and activations as views and maps", "[nn][embedding][inputs]") {
  std::mt19937 rng(15);
  const auto table = nn::embedding<mixed>::normal(10, 8, rng);
  const std::array<int, 6> ids{3, 1, 4, 1, 5, 9};
  const xt::xtensor<int, 2> owned = xt::adapt(ids.data(), 6, xt::no_ownership(), std::array<std::size_t, 2>{2, 3});
  const auto adapted = xt::adapt(ids.data(), 6, xt::no_ownership(), std::array<std::size_t, 2>{2, 3});
  const auto y = table(adapted);
  STATIC_REQUIRE(std::is_same_v<decltype(y), const xt::xtensor<float, 3>>);
  CHECK(print(y) == print(table(owned)));
  const Eigen::Map<const Eigen::Matrix<int, 2, 3, Eigen::RowMajor>> id_map(ids.data());
  CHECK(print(table(id_map)) == print(table(owned)));
  nn::embedding<mixed>::saved ctx;
  (void)table.forward(xt::view(owned, 1), ctx);
  CHECK(ctx.ids == std::vector<std::size_t>{1, 5, 9});
  check_every_form(gaussian(3, 8, 16), [&](const auto& dy) {
    auto g = table.zero_gradients();
    table.backward(ctx, dy, g);
    return print(g);
  });
  check_every_form(gaussian(4, 8, 17), [&](const auto& in) { return print(table.attend(in)); });
}

}  // namespace layer_inputs_test
