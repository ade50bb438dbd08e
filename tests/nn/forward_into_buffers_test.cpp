// forward_into writes into the caller's own buffers (issue 37): an xt::adapt over a std::vector, an
// Eigen::Map and an Eigen::Ref with RowMajor storage, for dense, feed_forward, layer_norm, rms_norm
// (plain and fused), attention and the embedding, each with the bits of the value-returning call, and
// in place (the caller's buffer holds the result); a non-contiguous output is refused with a message.
// The compile-time refusal of a column-major or const output is in tests/compile_fail.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xstrided_view.hpp>

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/nn/workspace.hpp"
#include "support/error_message.hpp"

namespace forward_into_buffers_test {

namespace nn = mixprec::nn;
using test_support::says;
using P = mixprec::mixed_bfloat16;
using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

xt::xtensor<float, 2> random_x(std::size_t rows, std::size_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  xt::xtensor<float, 2> x({rows, cols});
  for (auto& v : x) v = u(rng);
  return x;
}

/// True when `buffer` holds the bits of `expected` (row-major).
template <class E>
bool same_bits(const std::vector<float>& buffer, const E& expected) {
  return buffer.size() == expected.size() &&
         std::memcmp(buffer.data(), expected.data(), buffer.size() * sizeof(float)) == 0;
}

/// Calls `into(out)` with an xt::adapt, an Eigen::Map and an Eigen::Ref over a fresh [rows, cols]
/// buffer, and requires each buffer to hold the bits of `expected`.
template <class Into, class E>
void check_every_buffer(std::size_t rows, std::size_t cols, const E& expected, Into&& into) {
  std::vector<float> a(rows * cols, -7.0f);
  auto adapted = xt::adapt(a.data(), a.size(), xt::no_ownership(), std::array<std::size_t, 2>{rows, cols});
  into(adapted);
  CHECK(same_bits(a, expected));

  std::vector<float> m(rows * cols, -7.0f);
  Eigen::Map<row_major> mapped(m.data(), static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  into(mapped);
  CHECK(same_bits(m, expected));

  row_major owner(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  Eigen::Ref<row_major> ref(owner);
  into(ref);
  CHECK(same_bits(std::vector<float>(owner.data(), owner.data() + owner.size()), expected));
}

}  // namespace

TEST_CASE("forward_into writes into xt::adapt, Eigen::Map and Eigen::Ref", "[nn][forward_into]") {
  std::mt19937 rng(3);
  const auto x = random_x(5, 8, 1);
  nn::workspace ws;

  const nn::dense<P> dense(8, 6, rng);
  check_every_buffer(5, 6, dense(x), [&](auto& out) { dense.forward_into(out, x); });

  const auto ffn = nn::feed_forward<P>::init(nn::ffn_activation::swiglu, 8, 16, rng);
  check_every_buffer(5, 8, ffn(x), [&](auto& out) { ffn.forward_into(out, x, ws); });

  const nn::layer_norm<P> ln(8);
  check_every_buffer(5, 8, ln(x), [&](auto& out) { ln.forward_into(out, x); });

  const nn::rms_norm<P> rms(8);
  check_every_buffer(5, 8, rms(x), [&](auto& out) { rms.forward_into(out, x); });
  const auto residual = random_x(5, 8, 2);
  const auto fused = rms(x, residual);
  check_every_buffer(5, 8, fused.x, [&](auto& out) {
    xt::xtensor<float, 2> new_residual(residual.shape());
    rms.forward_into(out, new_residual, x, residual, ws);
    CHECK(bool(new_residual == fused.residual));
  });

  const auto attn = nn::attention<P>::lecun_normal({.d_model = 8, .n_heads = 2, .causal = true}, rng);
  check_every_buffer(5, 8, attn(x), [&](auto& out) { attn.forward_into(out, x, ws); });

  const auto table = nn::embedding<P>::normal(11, 8, rng);
  xt::xtensor<std::int32_t, 1> ids = {3, 0, 10, 3};
  check_every_buffer(4, 8, table(ids), [&](auto& out) { table.forward_into(out, ids); });
  check_every_buffer(5, 11, table.attend(x), [&](auto& out) { table.attend_into(out, x); });
}

TEST_CASE("forward_into refuses an output that is not contiguous row-major", "[nn][forward_into][errors]") {
  std::mt19937 rng(4);
  const auto x = random_x(3, 4, 5);
  const nn::dense<P> dense(4, 2, rng);
  row_major wide(3, 5);
  auto block = wide.leftCols(2);  // rows 5 apart: not one contiguous block
  CHECK_THROWS_MATCHES(dense.forward_into(block, x), std::invalid_argument,
                       says({"the output Eigen object is not contiguous"}));
  xt::xtensor<float, 2> big({3, 4});
  auto strided = xt::strided_view(big, {xt::all(), xt::range(0, 4, 2)});  // every other column
  CHECK_THROWS_MATCHES(dense.forward_into(strided, x), std::invalid_argument,
                       says({"the output array is not contiguous row-major"}));
  std::vector<float> small(4);
  auto adapted = xt::adapt(small.data(), small.size(), xt::no_ownership(), std::array<std::size_t, 2>{2, 2});
  CHECK_THROWS_MATCHES(dense.forward_into(adapted, x), std::invalid_argument,
                       says({"dense::forward_into: out has shape [2, 2] but x has shape [3, 4]"}));
}

}  // namespace forward_into_buffers_test
