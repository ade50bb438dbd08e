// nn/workspace.hpp: the scratch memory of the layers' forward_into calls. Checked here: alignment,
// buffers that do not overlap and keep their contents while later ones need new blocks, frames that give
// memory back (and nest), the merge into one block, and — counted with a replacement operator new — no
// allocation once a loop has warmed up.
#include "mixprec/nn/workspace.hpp"

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "support/allocation_counter.hpp"

namespace workspace_test {

namespace {

using mixprec::nn::workspace;

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % workspace::alignment == 0; }

// [a, a + n) and [b, b + m) in bytes do not overlap.
template <class A, class B>
bool disjoint(std::span<A> a, std::span<B> b) {
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data()), a1 = a0 + a.size_bytes();
  const auto b0 = reinterpret_cast<std::uintptr_t>(b.data()), b1 = b0 + b.size_bytes();
  return a1 <= b0 || b1 <= a0;
}

}  // namespace

TEST_CASE("workspace buffers are aligned, disjoint, and keep their values when later ones need new blocks",
          "[nn][workspace]") {
  workspace ws;
  CHECK(ws.capacity() == 0);
  const workspace::frame frame(ws);
  // Odd sizes and types, and a request far larger than the first block, so that a second block is made
  // while the first buffers are in use.
  const auto a = ws.take<float>(3);
  const auto b = ws.take<std::uint8_t>(5);
  const auto c = ws.take<double>(7);
  const auto big = ws.take<float>(1 << 16);
  const auto d = ws.take<std::int16_t>(1);
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 5);
  REQUIRE(c.size() == 7);
  REQUIRE(big.size() == std::size_t{1} << 16);
  REQUIRE(d.size() == 1);
  for (const void* p :
       {static_cast<const void*>(a.data()), static_cast<const void*>(b.data()), static_cast<const void*>(c.data()),
        static_cast<const void*>(big.data()), static_cast<const void*>(d.data())}) {
    CHECK(aligned(p));
  }
  CHECK(disjoint(a, b));
  CHECK(disjoint(a, c));
  CHECK(disjoint(b, c));
  CHECK(disjoint(c, big));
  CHECK(disjoint(a, big));
  CHECK(disjoint(big, d));
  CHECK(disjoint(a, d));
  CHECK(ws.blocks() >= 2);  // `big` did not fit in the first block
  // Fill every buffer, then check them all: no buffer was moved or overwritten by a later one.
  std::iota(a.begin(), a.end(), 1.0f);
  std::iota(b.begin(), b.end(), std::uint8_t{10});
  std::iota(c.begin(), c.end(), 100.0);
  std::iota(big.begin(), big.end(), 0.0f);
  d[0] = -7;
  CHECK(a[0] == 1.0f);
  CHECK(a[2] == 3.0f);
  CHECK(b[4] == 14);
  CHECK(c[6] == 106.0);
  CHECK(big[(1 << 16) - 1] == 65535.0f);
  CHECK(d[0] == -7);
  CHECK(ws.high_water() >= a.size_bytes() + b.size_bytes() + c.size_bytes() + big.size_bytes() + d.size_bytes());
}

TEST_CASE("workspace frames give their buffers back and nest, and the outermost one merges the blocks",
          "[nn][workspace]") {
  workspace ws;
  const float* first = nullptr;
  {
    const workspace::frame outer(ws);
    const auto x = ws.take<float>(16);
    first = x.data();
    const float* inner_first = nullptr;
    {
      const workspace::frame inner(ws);
      const auto y = ws.take<float>(16);
      inner_first = y.data();
      CHECK(disjoint(x, y));
    }
    {
      const workspace::frame inner(ws);
      CHECK(ws.take<float>(16).data() == inner_first);  // the inner frame's memory came back
    }
    // Needs a second block: merged when `outer` closes.
    (void)ws.take<float>(1 << 18);
    CHECK(ws.blocks() == 2);
  }
  CHECK(ws.blocks() == 1);
  CHECK(ws.capacity() >= ws.high_water());
  const std::size_t merged = ws.capacity();
  {
    const workspace::frame again(ws);
    const auto x = ws.take<float>(16);
    (void)ws.take<float>(1 << 18);  // fits in the merged block now
    CHECK(ws.blocks() == 1);
    CHECK(aligned(x.data()));
  }
  CHECK(ws.capacity() == merged);
  CHECK(first != nullptr);
}

TEST_CASE("a loop over a workspace allocates on its first pass only", "[nn][workspace]") {
  workspace ws;
  const auto pass = [&ws] {
    const workspace::frame outer(ws);
    // Growing requests, as a model's layers make them: each one larger than the block before.
    for (std::size_t n : {100u, 5000u, 70000u, 300000u}) {
      const workspace::frame layer(ws);
      const auto buffer = ws.take<float>(n);
      buffer[n - 1] = 1.0f;
      const auto more = ws.take<double>(n / 4 + 1);
      more[0] = 2.0;
    }
  };
  std::vector<std::size_t> counts;
  for (int i = 0; i < 5; ++i) {
    const mixprec_test::allocation_counter counter;
    pass();
    counts.push_back(counter.count());
  }
  INFO("allocations per pass: " << counts[0] << ", " << counts[1] << ", " << counts[2] << ", " << counts[3] << ", "
                                << counts[4]);
  CHECK(counts[0] > 0);
  CHECK(counts[1] == 0);
  CHECK(counts[2] == 0);
  CHECK(counts[3] == 0);
  CHECK(counts[4] == 0);
  CHECK(ws.blocks() == 1);
}

TEST_CASE("workspace::take without an open frame is an error", "[nn][workspace]") {
  workspace ws(1024);
  CHECK(ws.capacity() >= 1024);
  CHECK_THROWS_MATCHES(
      ws.take<float>(4), std::logic_error,
      Catch::Matchers::Message("nn::workspace::take: no frame is open; open a workspace::frame first"));
  const workspace::frame frame(ws);
  CHECK_THROWS_AS(ws.take<double>(std::size_t(-1) / 4), std::length_error);
  CHECK(ws.take<float>(0).empty());
}

}  // namespace workspace_test
