// Tests of the dot injection of nn::dense (nn/dot_product.hpp, dense::set_dot): an injected product
// replaces both products of the forward and backward passes, of dense itself and of the layers built
// from it (attention's projections), and the layer keeps its own roundings, bias and gradients. The
// injected product here is a test double summing in double; the plain float32 layer is the reference.
#include <atomic>
#include <cmath>
#include <complex>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/dot_product.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace dot_product_test {

namespace nn = mixprec::nn;
using gradcheck::tensor_from;
using layer_tests::p_c_bf16;
using layer_tests::p_f32;

namespace {

/// y = x · kernel and its backward pass, summed in double; counts its calls and remembers whether
/// every x it saw was a bfloat16 value.
class double_dot final : public nn::dot_product {
 public:
  void forward(std::span<const float> x, std::span<const float> k, std::span<float> y, nn::dot_shape s) override {
    ++forwards;
    for (const float v : x) all_x_bfloat16 = all_x_bfloat16 && static_cast<float>(mixprec::bfloat16(v)) == v;
    for (std::size_t r = 0; r < s.rows; ++r) {
      for (std::size_t o = 0; o < s.out; ++o) {
        double sum = 0.0;
        for (std::size_t i = 0; i < s.in; ++i) sum += double(x[r * s.in + i]) * double(k[i * s.out + o]);
        y[r * s.out + o] = static_cast<float>(sum);
      }
    }
  }
  void backward(std::span<const float> x, std::span<const float> dy, std::span<const float> k, std::span<float> dx,
                std::span<float> dk, nn::dot_shape s) override {
    ++backwards;
    for (std::size_t r = 0; r < s.rows; ++r) {
      for (std::size_t i = 0; i < s.in; ++i) {
        double sum = 0.0;
        for (std::size_t o = 0; o < s.out; ++o) sum += double(dy[r * s.out + o]) * double(k[i * s.out + o]);
        dx[r * s.in + i] = static_cast<float>(sum);
      }
    }
    for (std::size_t i = 0; i < s.in; ++i) {
      for (std::size_t o = 0; o < s.out; ++o) {
        double sum = 0.0;
        for (std::size_t r = 0; r < s.rows; ++r) sum += double(x[r * s.in + i]) * double(dy[r * s.out + o]);
        dk[i * s.out + o] = static_cast<float>(sum);
      }
    }
  }
  std::atomic<int> forwards{0}, backwards{0};
  bool all_x_bfloat16 = true;
};

/// max |a - b| / max |b| over two tensors of one size.
template <class A, class B>
double relative_difference(const A& a, const B& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a.data()[i]) - double(b.data()[i])));
    scale = std::max(scale, std::fabs(double(b.data()[i])));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("dot injection: dense forward, backward and project run through the injected product", "[nn][dense][dot]") {
  const std::size_t in = 7, out = 5;
  auto kernel = tensor_from<float, 2>(gradcheck::uniform(in * out, 1), {in, out});
  auto bias = tensor_from<float, 1>(gradcheck::uniform(out, 2), {out});
  const auto x = tensor_from<float, 3>(gradcheck::uniform(2 * 3 * in, 3), {2, 3, in});
  const auto dy = tensor_from<float, 3>(gradcheck::uniform(2 * 3 * out, 4), {2, 3, out});
  nn::dense<p_f32> plain(kernel, bias);
  nn::dense<p_f32> injected(kernel, bias);
  auto dot = std::make_shared<double_dot>();
  injected.set_dot(dot);
  CHECK(injected.dot() == dot);

  CHECK(relative_difference(injected(x), plain(x)) < 1e-6);
  CHECK(dot->forwards == 1);
  nn::dense<p_f32>::saved<float> ctx_plain, ctx_injected;
  const auto y_plain = plain.forward(x, ctx_plain);
  const auto y_injected = injected.forward(x, ctx_injected);
  CHECK(relative_difference(y_injected, y_plain) < 1e-6);
  CHECK(dot->forwards == 2);

  auto g_plain = plain.zero_gradients();
  auto g_injected = injected.zero_gradients();
  const auto dx_plain = plain.backward(ctx_plain, dy, g_plain);
  const auto dx_injected = injected.backward(ctx_injected, dy, g_injected);
  CHECK(dot->backwards == 1);
  CHECK(relative_difference(dx_injected, dx_plain) < 1e-6);
  CHECK(relative_difference(g_injected.kernel, g_plain.kernel) < 1e-6);
  CHECK(relative_difference(*g_injected.bias, *g_plain.bias) < 1e-6);
  // Gradients add up: a second backward doubles them.
  (void)injected.backward(ctx_injected, dy, g_injected);
  const xt::xtensor<float, 2> twice = 2.0f * g_plain.kernel;
  CHECK(relative_difference(g_injected.kernel, twice) < 1e-6);

  // backward_accumulate adds dx into an accumulator.
  std::vector<float> acc(dx_plain.size(), 1.0f);
  auto g3 = injected.zero_gradients();
  injected.backward_accumulate(ctx_injected, std::span<const float>(dy.data(), dy.size()), g3, std::span<float>(acc));
  for (std::size_t i = 0; i < acc.size(); ++i) CHECK(acc[i] == Approx(1.0 + dx_plain.data()[i]).epsilon(1e-5));

  // set_dot(nullptr) restores the plain product, bit for bit.
  injected.set_dot(nullptr);
  CHECK(bool(injected(x) == plain(x)));
}

TEST_CASE("dot injection: the product sees x rounded to the compute type and the kernel as stored",
          "[nn][dense][dot]") {
  const std::size_t in = 6, out = 3;
  auto kernel = tensor_from<float, 2>(gradcheck::uniform(in * out, 5), {in, out});
  const auto x = tensor_from<float, 2>(gradcheck::uniform(4 * in, 6), {4, in});
  nn::dense<p_c_bf16> layer(kernel);
  auto dot = std::make_shared<double_dot>();
  layer.set_dot(dot);
  const auto y = layer(x);
  CHECK(dot->all_x_bfloat16);
  // Reference: x rounded to bfloat16, the float32 kernel, summed in double, rounded to float.
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t o = 0; o < out; ++o) {
      double sum = 0.0;
      for (std::size_t i = 0; i < in; ++i) {
        sum += double(static_cast<float>(mixprec::bfloat16(x(r, i)))) * double(kernel(i, o));
      }
      CHECK(y(r, o) == static_cast<float>(sum));
    }
  }
}

TEST_CASE("dot injection: attention's four projections, forward and backward", "[nn][attention][dot]") {
  const nn::attention_config cfg{.d_model = 8, .n_heads = 2, .causal = true};
  nn::attention<p_f32> plain(cfg, nn::use_bias::yes);
  unsigned seed = 10;
  plain.for_each_parameter([&](std::string_view, auto& p) {
    const auto v = gradcheck::uniform(p.size(), seed++, -0.8, 0.8);
    for (std::size_t i = 0; i < p.size(); ++i) p.data()[i] = static_cast<float>(v[i]);
  });
  nn::attention<p_f32> injected = plain;
  std::vector<std::shared_ptr<double_dot>> dots;
  for (auto* projection : {&injected.wq(), &injected.wk(), &injected.wv(), &injected.wo()}) {
    dots.push_back(std::make_shared<double_dot>());
    projection->set_dot(dots.back());
  }
  const auto x = tensor_from<float, 3>(gradcheck::uniform(2 * 5 * 8, 20), {2, 5, 8});
  const auto w = tensor_from<float, 3>(gradcheck::uniform(2 * 5 * 8, 21), {2, 5, 8});
  nn::attention<p_f32>::saved<float> c_plain, c_injected;
  const auto y_plain = plain.forward(x, c_plain);
  const auto y_injected = injected.forward(x, c_injected);
  CHECK(relative_difference(y_injected, y_plain) < 1e-5);
  auto g_plain = plain.zero_gradients();
  auto g_injected = injected.zero_gradients();
  const auto dx_plain = plain.backward(c_plain, w, g_plain);
  const auto dx_injected = injected.backward(c_injected, w, g_injected);
  CHECK(relative_difference(dx_injected, dx_plain) < 1e-5);
  std::vector<const float*> a, b;
  std::vector<std::size_t> sizes;
  g_injected.for_each([&](std::string_view, auto& t) {
    a.push_back(t.data());
    sizes.push_back(t.size());
  });
  g_plain.for_each([&](std::string_view, auto& t) { b.push_back(t.data()); });
  for (std::size_t t = 0; t < a.size(); ++t) {
    double diff = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < sizes[t]; ++i) {
      diff = std::max(diff, std::fabs(double(a[t][i]) - double(b[t][i])));
      scale = std::max(scale, std::fabs(double(b[t][i])));
    }
    CAPTURE(t);
    CHECK(diff <= 1e-5 * scale + 1e-6);  // + 1e-6: wk.bias has a zero gradient (softmax ignores a shift)
  }
  for (const auto& d : dots) {
    CHECK(d->forwards == 1);
    CHECK(d->backwards == 1);
  }
}

TEST_CASE("dot injection: a complex input is a clear error, the plain product still takes it", "[nn][dense][dot]") {
  auto kernel = tensor_from<float, 2>(gradcheck::uniform(3 * 2, 7), {3, 2});
  nn::dense<p_f32> layer(kernel);
  xt::xtensor<std::complex<float>, 2> x = xt::xtensor<std::complex<float>, 2>::from_shape({2, 3});
  x.fill(std::complex<float>(1.0f, -1.0f));
  CHECK_NOTHROW(layer(x));
  layer.set_dot(std::make_shared<double_dot>());
  CHECK_THROWS_WITH(layer(x), Catch::Matchers::Contains("injected dot_product works on real values"));
}

TEST_CASE("dot injection: under bfloat16 the layer rounds the bias and y, and project checks sizes",
          "[nn][dense][dot]") {
  using P = mixprec::policy<mixprec::bfloat16>;  // bf16 params, compute and output
  using mixprec::bfloat16;
  const std::size_t in = 5, out = 3, rows = 4;
  auto kernel = tensor_from<bfloat16, 2>(gradcheck::uniform(in * out, 30), {in, out});
  auto bias = tensor_from<bfloat16, 1>(gradcheck::uniform(out, 31), {out});
  const auto x = tensor_from<float, 2>(gradcheck::uniform(rows * in, 32), {rows, in});
  nn::dense<P> layer(kernel, bias);
  layer.set_dot(std::make_shared<double_dot>());
  const auto y = layer(x);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(y(0, 0))>, bfloat16>);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t o = 0; o < out; ++o) {
      double sum = 0.0;  // x rounded to bfloat16, the kernel as stored, summed in double
      for (std::size_t i = 0; i < in; ++i) sum += double(float(bfloat16(x(r, i)))) * double(float(kernel(i, o)));
      const float expected = static_cast<float>(sum) + float(bias(o));  // bias added in float32
      CHECK(float(y(r, o)) == float(bfloat16(expected)));               // one rounding to bfloat16
    }
  }
  // project with spans of the wrong size: a clear error, never an overrun.
  std::vector<float> xs(rows * in), ys(rows * out - 1);
  CHECK_THROWS_WITH((layer.project<bfloat16>(std::span<const float>(xs), rows, std::span<float>(ys))),
                    Catch::Matchers::Contains("elements but 4 rows"));
}

}  // namespace dot_product_test
