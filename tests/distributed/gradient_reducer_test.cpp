// distributed::gradient_reducer on 2 ranks: the average of the ranks' dense gradients against the
// gradient of the whole batch computed on one rank (float32 and float64 policies), the same bits for any
// bucket size, the bytes it reduces, and its errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/core.hpp"
#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/gradient_reducer.hpp"
#include "mixprec/nn/causal_lm.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/policy.hpp"

namespace gradient_reducer_test {

namespace dist = mixprec::distributed;
namespace nn = mixprec::nn;

namespace {

constexpr std::size_t in = 8, out = 5, rows = 6;

/// Rows [begin, end) of a fixed batch: x [n, in] and dy [n, out], the same values on every rank.
template <class T>
std::pair<xt::xtensor<T, 2>, xt::xtensor<T, 2>> batch(std::size_t begin, std::size_t end) {
  auto x = xt::xtensor<T, 2>::from_shape({end - begin, in});
  auto dy = xt::xtensor<T, 2>::from_shape({end - begin, out});
  for (std::size_t r = begin; r < end; ++r) {
    for (std::size_t i = 0; i < in; ++i) x(r - begin, i) = static_cast<T>(std::sin(0.7 * r + 1.3 * i));
    for (std::size_t o = 0; o < out; ++o) dy(r - begin, o) = static_cast<T>(std::cos(0.4 * r - 0.9 * o));
  }
  return {x, dy};
}

/// The dense layer's gradients for rows [begin, end) of the batch.
template <class P, class T>
typename nn::dense<P>::gradients gradients_of(const nn::dense<P>& layer, std::size_t begin, std::size_t end) {
  const auto [x, dy] = batch<T>(begin, end);
  typename nn::dense<P>::template saved<T> ctx;
  auto grads = layer.zero_gradients();
  (void)layer.forward(x, ctx);
  (void)layer.backward(ctx, dy, grads);
  return grads;
}

}  // namespace

TEMPLATE_TEST_CASE("the average of the ranks' gradients is the whole batch's gradient over the rank count",
                   "[distributed]", float, double) {
  using T = TestType;
  using P = mixprec::policy<T>;
  const dist::communicator comm;
  std::mt19937 rng(42);  // the same weights on every rank
  const nn::dense<P> layer(in, out, rng);
  const auto whole = gradients_of<P, T>(layer, 0, rows);
  const std::size_t half = rows / 2;
  auto mine = gradients_of<P, T>(layer, comm.rank() * half, (comm.rank() + 1) * half);
  dist::gradient_reducer reducer(comm, mine);
  CHECK(reducer.buckets() == 1);
  CHECK(reducer.bytes_per_step() == (in * out + out) * sizeof(T));
  reducer.average(mine);
  // Σ over both halves / 2 = whole / 2, up to the order of the float additions.
  const double tolerance = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  for (std::size_t i = 0; i < in * out; ++i) {
    CHECK(static_cast<double>(mine.kernel.data()[i]) ==
          Approx(static_cast<double>(whole.kernel.data()[i]) / 2).margin(tolerance * rows));
  }
  for (std::size_t o = 0; o < out; ++o) {
    CHECK(static_cast<double>((*mine.bias)(o)) ==
          Approx(static_cast<double>((*whole.bias)(o)) / 2).margin(tolerance * rows));
  }
}

TEST_CASE("the bucket size changes no bit, and every rank gets the same bits", "[distributed]") {
  using P = mixprec::policy<float>;
  const dist::communicator comm;
  std::mt19937 rng(7);
  const nn::dense<P> layer(in, out, rng);
  auto one_bucket = gradients_of<P, float>(layer, comm.rank() * 3, comm.rank() * 3 + 3);
  auto per_tensor = one_bucket;
  dist::gradient_reducer whole(comm, one_bucket);
  dist::gradient_reducer small(comm, per_tensor, {.bucket_bytes = 1});
  CHECK(small.buckets() == 2);  // a tensor is never split: one bucket per tensor
  whole.average(one_bucket);
  small.average(per_tensor);
  CHECK(bool(one_bucket.kernel == per_tensor.kernel));
  CHECK(bool(*one_bucket.bias == *per_tensor.bias));
  // Rank 0's bits reach rank 1: the difference of the two ranks' results, summed, is 0 in every element.
  auto difference = one_bucket.kernel;
  if (comm.rank() == 1) difference = -difference;
  dist::check(MPI_Allreduce(MPI_IN_PLACE, difference.data(), static_cast<int>(difference.size()), MPI_FLOAT, MPI_SUM,
                            comm.native()),
              "MPI_Allreduce");
  for (const float d : difference) CHECK(d == 0.0F);
}

TEST_CASE("a non-finite gradient on one rank makes every rank skip the step", "[distributed]") {
  using P = mixprec::policy<float>;
  const dist::communicator comm;
  std::mt19937 rng(3);
  const nn::dense<P> layer(in, out, rng);
  auto grads = gradients_of<P, float>(layer, 0, 2);
  if (comm.rank() == 1) grads.kernel(2, 3) = std::numeric_limits<float>::infinity();
  // The finiteness flag agreed before the step: false on both ranks.
  CHECK_FALSE(dist::all_ranks(comm, mixprec::all_finite(grads)));
  dist::gradient_reducer reducer(comm, grads);
  reducer.average(grads);
  CHECK(std::isinf(grads.kernel(2, 3)));  // the average carries it to every rank too
}

TEST_CASE("the bfloat16 wire gives each element bf16(sum in float32 of the ranks' bf16 values / ranks)",
          "[distributed]") {
  using P = mixprec::policy<float>;
  const dist::communicator comm;
  std::mt19937 rng(11);
  const nn::dense<P> layer(in, out, rng);
  // Both ranks' gradients, computed here on every rank for the reference.
  const auto g0 = gradients_of<P, float>(layer, 0, 3);
  const auto g1 = gradients_of<P, float>(layer, 3, 6);
  auto mine = comm.rank() == 0 ? g0 : g1;
  dist::gradient_reducer f32_wire(comm, mine);
  dist::gradient_reducer reducer(comm, mine, {.wire = dist::wire_format::bfloat16});
  CHECK(reducer.wire_bytes_per_step() * 2 == f32_wire.wire_bytes_per_step());
  CHECK(reducer.wire_bytes_per_step() == (in * out + out) * 2);  // 2 (R - 1) / R = 1 of the bucket at R = 2
  reducer.average(mine);
  const auto bf16 = [](float v) { return static_cast<float>(static_cast<mixprec::bfloat16>(v)); };
  const auto expected = [&](float a, float b) { return bf16((bf16(a) + bf16(b)) / 2.0F); };
  for (std::size_t i = 0; i < in * out; ++i) {
    CHECK(std::bit_cast<std::uint32_t>(mine.kernel.data()[i]) ==
          std::bit_cast<std::uint32_t>(expected(g0.kernel.data()[i], g1.kernel.data()[i])));
  }
  for (std::size_t o = 0; o < out; ++o) {
    CHECK(std::bit_cast<std::uint32_t>((*mine.bias)(o)) ==
          std::bit_cast<std::uint32_t>(expected((*g0.bias)(o), (*g1.bias)(o))));
  }
}

TEST_CASE("error feedback keeps the bfloat16 wire's rounding from accumulating over the steps", "[distributed]") {
  using P = mixprec::policy<float>;
  const dist::communicator comm;
  std::mt19937 rng(12);
  const nn::dense<P> layer(in, out, rng);
  // The same gradient on both ranks and every step: g = c (1 + 2^-10), which bfloat16 (8 significant
  // bits) rounds to c. The mean of two equal bfloat16 values is exact, so only each rank's own rounding
  // matters: without feedback it repeats every step, with feedback it stays below one rounding in total.
  auto grads = layer.zero_gradients();
  std::size_t i = 0;
  grads.for_each([&](std::string_view, auto& t) {
    for (auto& v : t) v = std::ldexp(1.0F + 0x1p-10F, static_cast<int>(i++ % 7) - 3);
  });
  const std::size_t steps = 16;
  for (const bool feedback : {false, true}) {
    dist::gradient_reducer reducer(comm, grads, {.wire = dist::wire_format::bfloat16, .error_feedback = feedback});
    auto total = layer.zero_gradients();
    for (std::size_t t = 0; t < steps; ++t) {
      auto g = grads;
      reducer.average(g);
      total.kernel += g.kernel;
      *total.bias += *g.bias;
    }
    double worst = 0;  // |Σ_t out_t - steps · g| / (steps · g), over the kernel's elements
    for (std::size_t e = 0; e < in * out; ++e) {
      const double exact = static_cast<double>(grads.kernel.data()[e]) * steps;
      worst = std::max(worst, std::abs(static_cast<double>(total.kernel.data()[e]) - exact) / exact);
    }
    INFO("error feedback " << feedback << ": worst relative error of the 16-step sum " << worst);
    if (feedback) {
      CHECK(worst <= 0x1p-8 / steps);  // at most one rounding (half an ulp of 8 bits) in the whole sum
    } else {
      CHECK(worst >= 0x1p-11);  // every step's rounding (1 + 2^-10 to 1) kept: about 2^-10 relative
    }
  }
}

TEST_CASE("error feedback drops the residual of a non-finite value: later steps stay finite", "[distributed]") {
  using P = mixprec::policy<float>;
  const dist::communicator comm;
  std::mt19937 rng(13);
  const nn::dense<P> layer(in, out, rng);
  const auto clean = gradients_of<P, float>(layer, 0, 3);
  dist::gradient_reducer reducer(comm, clean, {.wire = dist::wire_format::bfloat16, .error_feedback = true});
  auto overflowed = clean;
  overflowed.kernel(1, 1) = std::numeric_limits<float>::infinity();  // an overflowed loss-scaled step
  reducer.average(overflowed);
  CHECK(std::isinf(overflowed.kernel(1, 1)));
  for (int step = 0; step < 3; ++step) {
    auto g = clean;
    reducer.average(g);
    CHECK(std::isfinite(g.kernel(1, 1)));  // Inf - Inf would have made the residual NaN for good
  }
}

TEST_CASE("gradient_reducer errors: bucket size 0, trees that differ across ranks, another tree later",
          "[distributed]") {
  using P = mixprec::policy<float>;
  const dist::communicator comm;
  std::mt19937 rng(1);
  const nn::dense<P> layer(in, out, rng);
  auto grads = layer.zero_gradients();
  CHECK_THROWS_WITH(dist::gradient_reducer(comm, grads, {.bucket_bytes = 0}), Catch::Contains("bucket_bytes is 0"));
  CHECK_THROWS_WITH(dist::gradient_reducer(comm, grads, {.error_feedback = true}),
                    Catch::Contains("error_feedback compensates the bfloat16 wire's rounding"));
  // Options bad on one rank only: both ranks throw rank 1's error (none waits in a collective).
  CHECK_THROWS_WITH(dist::gradient_reducer(comm, grads, {.bucket_bytes = comm.rank() == 1 ? 0U : 1024U}),
                    Catch::StartsWith("rank 1: mixprec::distributed::gradient_reducer: bucket_bytes is 0"));
  // Rank 1's layer has 6 outputs: every rank reports rank 1's first difference.
  const nn::dense<P> other(in, comm.rank() == 1 ? out + 1 : out, rng);
  auto other_grads = other.zero_gradients();
  CHECK_THROWS_WITH(dist::gradient_reducer(comm, other_grads),
                    "mixprec::distributed: the ranks' gradients differ: tensor 0 is kernel [8, 6] (4-byte elements) on "
                    "rank 1 but kernel [8, 5] (4-byte elements) on rank 0; every rank must build the same model");
  // A reducer made for one tree refuses another (on both ranks, before any reduction).
  dist::gradient_reducer reducer(comm, grads);
  const nn::dense<P> wider(in, out + 2, rng);
  auto wider_grads = wider.zero_gradients();
  CHECK_THROWS_WITH(reducer.average(wider_grads), Catch::Contains("is not the tensor the reducer was made for"));
}

TEST_CASE("ready starts the buckets' sums during the backward pass, with average's bits", "[distributed]") {
  using P = mixprec::policy<float>;
  const dist::communicator comm;
  nn::causal_lm<P> model({.vocab = 11,
                          .n_layers = 3,
                          .max_positions = 8,
                          .block = {.attention = {.d_model = 16, .n_heads = 2, .causal = true}}});
  std::size_t s = 0;
  model.for_each_parameter([&](std::string_view, auto& p) {
    for (auto& x : p) x = static_cast<float>(0.3 * std::sin(0.37 * static_cast<double>(++s)));
  });
  // This rank's rows: ids and the logits' cotangent differ between the ranks.
  auto ids = xt::xtensor<std::int32_t, 2>::from_shape({2, 8});
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids.data()[i] = static_cast<std::int32_t>((5 * i + 3 * static_cast<std::size_t>(comm.rank())) % 11);
  typename nn::causal_lm<P>::saved ctx;
  const auto logits = model.forward(ids, ctx);
  auto dlogits = xt::xtensor<float, 3>::from_shape(logits.shape());
  for (std::size_t i = 0; i < dlogits.size(); ++i)
    dlogits.data()[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i) + comm.rank()));

  for (const auto wire : {dist::wire_format::float32, dist::wire_format::bfloat16}) {
    auto blocking = model.zero_gradients();
    model.backward(ctx, dlogits, blocking);
    dist::gradient_reducer reducer(comm, blocking, {.bucket_bytes = 4096, .first_bucket_bytes = 1024, .wire = wire});
    REQUIRE(reducer.buckets() >= 3);
    reducer.average(blocking);
    std::vector<std::vector<float>> expected;
    blocking.for_each([&](std::string_view, const auto& g) { expected.emplace_back(g.begin(), g.end()); });
    for (int round = 0; round < 2; ++round) {  // the second round: the reducer's state was reset
      auto overlapped = model.zero_gradients();
      std::size_t started_before_embeddings = 0;
      model.backward(ctx, dlogits, overlapped, [&](std::string_view prefix) {
        if (prefix == "wpe") started_before_embeddings = reducer.buckets_started();
        reducer.ready(overlapped, prefix);
      });
      if (wire == dist::wire_format::float32) {
        CHECK(started_before_embeddings > 0);  // the last layers' buckets left while layer 0 ran
        CHECK(reducer.buckets_started() == reducer.buckets());
      } else {
        CHECK(reducer.buckets_started() == 0);  // the bfloat16 wire's collectives wait for average
      }
      reducer.average(overlapped);
      CHECK(reducer.buckets_started() == 0);
      std::size_t k = 0;
      overlapped.for_each([&](std::string_view name, const auto& g) {
        INFO(name);
        CHECK(std::vector<float>(g.begin(), g.end()) == expected[k++]);
      });
    }
  }
}

namespace {
/// Gradients of two float and two double tensors, values depending on the rank.
struct mixed_grads {
  xt::xtensor<float, 1> a = xt::xtensor<float, 1>::from_shape({8});
  xt::xtensor<float, 1> b = xt::xtensor<float, 1>::from_shape({8});
  xt::xtensor<double, 1> c = xt::xtensor<double, 1>::from_shape({8});
  xt::xtensor<double, 1> d = xt::xtensor<double, 1>::from_shape({8});
  explicit mixed_grads(int rank) {
    for (std::size_t i = 0; i < 8; ++i) {
      a(i) = static_cast<float>(std::sin(0.3 * static_cast<double>(i) + rank));
      b(i) = static_cast<float>(std::cos(0.7 * static_cast<double>(i) - rank));
      c(i) = std::sin(1.1 * static_cast<double>(i) * (rank + 1));
      d(i) = std::cos(0.2 * static_cast<double>(i) + 3.0 * rank);
    }
  }
  template <class F>
  void for_each(F&& f) {
    f("a", a), f("b", b), f("c", c), f("d", d);
  }
  template <class F>
  void for_each(F&& f) const {
    f("a", a), f("b", b), f("c", c), f("d", d);
  }
};

std::vector<double> flat(const mixed_grads& g) {
  std::vector<double> out;
  g.for_each([&](std::string_view, const auto& t) {
    for (const auto x : t) out.push_back(static_cast<double>(x));
  });
  return out;
}
}  // namespace

TEST_CASE("ready on the bfloat16 wire starts the float64 buckets, refuses a part reported twice, and discards",
          "[distributed]") {
  const dist::communicator comm;
  mixed_grads expected(comm.rank());
  // One tensor per bucket: 32 bytes of float, 64 of double.
  dist::gradient_reducer reducer(comm, expected,
                                 {.bucket_bytes = 32, .first_bucket_bytes = 32, .wire = dist::wire_format::bfloat16});
  REQUIRE(reducer.buckets() == 4);
  reducer.average(expected);
  const auto want = flat(expected);

  mixed_grads overlapped(comm.rank());
  for (const char* name : {"d", "c", "b", "a"}) reducer.ready(overlapped, name);
  CHECK(reducer.buckets_started() == 2);  // the float64 buckets; the bfloat16 wire's wait for average
  reducer.average(overlapped);
  CHECK(flat(overlapped) == want);

  mixed_grads twice(comm.rank());
  reducer.ready(twice, "d");
  CHECK_THROWS_WITH(reducer.ready(twice, "d"), Catch::Contains("gradient \"d\" was already reported final"));
  CHECK(reducer.buckets_started() == 0);  // dropped
  reducer.average(twice);                 // the blocking path
  CHECK(flat(twice) == want);

  mixed_grads abandoned(comm.rank());
  reducer.ready(abandoned, "d");
  reducer.ready(abandoned, "c");
  CHECK(reducer.buckets_started() == 2);
  reducer.discard();
  CHECK(reducer.buckets_started() == 0);
  reducer.average(abandoned);
  CHECK(flat(abandoned) == want);
}

TEST_CASE("gradient_reducer: the ranks' options must agree", "[distributed]") {
  const dist::communicator comm;
  const mixed_grads g(comm.rank());
  CHECK_THROWS_WITH(dist::gradient_reducer(comm, g, {.bucket_bytes = comm.rank() == 0 ? 32u : 64u}),
                    Catch::Contains("the ranks' options differ"));
}

}  // namespace gradient_reducer_test
