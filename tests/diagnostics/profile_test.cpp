// Tests of diagnostics::profile (diagnostics/profile.hpp) and internal::profile_scope (arch/profile.hpp):
// calls, inclusive and self time of nested regions (self times add up to the outer region's inclusive
// time), regions from several threads summed, pause and resume, nothing recorded when no profile runs,
// one profile at a time, the table, and the regions a layer's forward and backward open (the product
// named by compute type and shape).
#include <chrono>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/diagnostics/profile.hpp"
#include "mixprec/nn/dense.hpp"
#include "support/error_message.hpp"

namespace profile_test {

namespace {

using mixprec::diagnostics::profile;
using mixprec::diagnostics::profile_region;
using mixprec::internal::profile_scope;
using test_support::says;

/// Busy-waits `ms` milliseconds (sleeping would also do: the timer is wall time).
void spin(double ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  while (std::chrono::steady_clock::now() < end) {
  }
}

const profile_region* find(const std::vector<profile_region>& regions, const std::string& name) {
  for (const auto& r : regions) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("profile: nested regions, calls, inclusive and self time", "[diagnostics][profile]") {
  profile prof;
  for (int i = 0; i < 3; ++i) {
    const profile_scope outer("outer");
    spin(2);
    {
      const profile_scope inner([&] { return "inner " + std::to_string(i % 2); });
      spin(4);
    }
  }
  const auto regions = prof.stop();
  REQUIRE(regions.size() == 3);
  const auto* outer = find(regions, "outer");
  const auto* inner0 = find(regions, "inner 0");
  const auto* inner1 = find(regions, "inner 1");
  REQUIRE(outer != nullptr);
  REQUIRE(inner0 != nullptr);
  REQUIRE(inner1 != nullptr);
  CHECK(outer->calls == 3);
  CHECK(inner0->calls == 2);
  CHECK(inner1->calls == 1);
  // The outer region's self time excludes the inner regions: the self times add up to its inclusive time.
  CHECK(outer->self_seconds + inner0->seconds + inner1->seconds == Approx(outer->seconds).epsilon(1e-9));
  CHECK(outer->self_seconds >= 3 * 2e-3);
  CHECK(outer->self_seconds < outer->seconds - 3 * 4e-3 + 1e-9);
  CHECK(inner0->seconds >= 2 * 4e-3);
  CHECK(inner0->self_seconds == inner0->seconds);  // nothing opened inside it
  CHECK(regions.front().name == "inner 0");        // sorted by self time: 8 ms, then 6 ms, then 4 ms
  CHECK(prof.stop().empty());                      // a second stop returns nothing
}

TEST_CASE("profile: threads are summed, pauses are left out, nothing is timed without a profile",
          "[diagnostics][profile]") {
  {
    const profile_scope before("before any profile");
    spin(1);
  }
  profile prof;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([] {
      const profile_scope r("worker");
      spin(2);
    });
  }
  for (auto& t : threads) t.join();
  prof.pause();
  {
    const profile_scope paused("while paused");
    spin(1);
  }
  prof.resume();
  { const profile_scope resumed("after resume"); }
  const auto regions = prof.stop();
  { const profile_scope after("after stop"); }
  const auto* worker = find(regions, "worker");
  REQUIRE(worker != nullptr);
  CHECK(worker->calls == 3);
  CHECK(worker->seconds >= 3 * 2e-3);
  CHECK(find(regions, "after resume") != nullptr);
  CHECK(find(regions, "while paused") == nullptr);
  CHECK(find(regions, "before any profile") == nullptr);
  profile next;
  CHECK(find(next.stop(), "after stop") == nullptr);
}

TEST_CASE("profile: one at a time, and the table", "[diagnostics][profile]") {
  profile prof;
  CHECK_THROWS_MATCHES(profile(), std::logic_error,
                       says({"diagnostics::profile: a profile is already running; stop it before starting another"}));
  {
    const profile_scope r("region");
    spin(1);
  }
  const auto regions = prof.stop();
  profile again;  // the first one stopped: a new one may start
  (void)again.stop();
  const std::string table = mixprec::diagnostics::profile_table(regions);
  CHECK_THAT(table, Catch::Contains("| region | calls | self ms | self % | incl. ms | self µs/call |"));
  CHECK_THAT(table, Catch::Contains("| `region` | 1 |"));
  CHECK_THAT(table, Catch::Contains("| 100.0 |"));
  CHECK_THAT(table, Catch::Contains("over 1 regions"));
}

TEST_CASE("profile: a dense layer's forward and backward, and its product by type and shape",
          "[diagnostics][profile][nn]") {
  using P = mixprec::mixed_bfloat16;
  std::mt19937 rng(1);
  const mixprec::nn::dense<P> layer(32, 48, rng);
  const xt::xtensor<float, 2> x = xt::ones<float>({16, 32});
  mixprec::nn::dense<P>::saved<float> ctx;
  profile prof;
  const auto y = layer.forward(x, ctx);
  auto g = layer.zero_gradients();
  (void)layer.backward(ctx, y, g);
  const auto regions = prof.stop();
  const auto* forward = find(regions, "nn::dense.forward");
  const auto* backward = find(regions, "nn::dense.backward");
  REQUIRE(forward != nullptr);
  REQUIRE(backward != nullptr);
  CHECK(forward->calls == 1);
  CHECK(backward->calls == 1);
  // Every product is named "gemm <compute type> m k n ...": bfloat16 is e8m7; the forward is m16 k32 n48.
  bool forward_gemm = false;
  for (const auto& r : regions) forward_gemm = forward_gemm || r.name.starts_with("gemm e8m7 m16 k32 n48");
  CHECK(forward_gemm);
  CHECK(forward->seconds >= forward->self_seconds);
}

}  // namespace profile_test
