// Tests of nn/kv_cache.hpp: layout, positions, validity, capacity and size errors.
#include <catch2/catch.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/nn/kv_cache.hpp"

namespace kv_cache_test {

using mixprec::bfloat16;
namespace nn = mixprec::nn;
using Catch::Matchers::Contains;

namespace {
/// The value stored for (batch row b, token t, head h, coordinate i) in the test inputs: unique, exact in
/// bfloat16 (integers below 256).
float code(std::size_t b, std::size_t t, std::size_t h, std::size_t i) {
  return static_cast<float>(100 * b + 10 * t + 3 * h + i);
}
}  // namespace

TEST_CASE("kv_cache stores appended keys and values per batch row and head, positions in order", "[nn][kv_cache]") {
  const std::size_t batch = 2, heads = 3, hd = 2;
  nn::kv_cache<bfloat16> cache(batch, heads, hd, /*capacity=*/5);
  STATIC_REQUIRE(std::is_same_v<decltype(cache)::value_type, bfloat16>);
  CHECK(cache.empty());
  CHECK(cache.capacity() == 5);
  CHECK(cache.batch() == 2);
  CHECK(cache.n_kv_heads() == 3);
  CHECK(cache.head_dim() == 2);

  // Two calls: 2 tokens, then 1 token; keys [batch, seq, heads, hd], values = -keys.
  std::size_t filled = 0;
  for (std::size_t seq : {2u, 1u}) {
    std::vector<bfloat16> k(batch * seq * heads * hd), v(k.size());
    std::unique_ptr<bool[]> valid(new bool[batch * seq]);
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t t = 0; t < seq; ++t) {
        valid[b * seq + t] = !(b == 1 && filled + t == 0);  // row 1's first token is padding
        for (std::size_t h = 0; h < heads; ++h) {
          for (std::size_t i = 0; i < hd; ++i) {
            const std::size_t at = ((b * seq + t) * heads + h) * hd + i;
            k[at] = bfloat16(code(b, filled + t, h, i));
            v[at] = bfloat16(-code(b, filled + t, h, i));
          }
        }
      }
    }
    cache.append(std::span<const bfloat16>(k), std::span<const bfloat16>(v), seq,
                 std::span<const bool>(valid.get(), batch * seq));
    filled += seq;
    CHECK(cache.size() == filled);
  }
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t h = 0; h < heads; ++h) {
      const auto keys = cache.keys(b, h);
      const auto values = cache.values(b, h);
      REQUIRE(keys.size() == 3 * hd);
      for (std::size_t t = 0; t < 3; ++t) {
        for (std::size_t i = 0; i < hd; ++i) {
          CHECK(static_cast<float>(keys[t * hd + i]) == code(b, t, h, i));
          CHECK(static_cast<float>(values[t * hd + i]) == -code(b, t, h, i));
        }
      }
    }
  }
  CHECK(cache.is_valid(0, 0));
  CHECK_FALSE(cache.is_valid(1, 0));
  CHECK(cache.is_valid(1, 2));
  CHECK(cache.validity(1).size() == 3);
  CHECK(cache.validity(1)[0] == 0);

  cache.clear();
  CHECK(cache.size() == 0);
  CHECK(cache.keys(0, 0).empty());
}

TEST_CASE("kv_cache treats every token as real when no validity mask is given", "[nn][kv_cache]") {
  nn::kv_cache<float> cache(1, 1, 1, 2);
  const std::vector<float> k{1.0f}, v{2.0f};
  cache.append(k, v, 1);
  CHECK(cache.is_valid(0, 0));
}

TEST_CASE("kv_cache rejects appends past its capacity and inputs of the wrong size", "[nn][kv_cache]") {
  nn::kv_cache<float> cache(1, 2, 4, /*capacity=*/3);
  const std::vector<float> two(2 * 2 * 4, 1.0f);  // [1, 2, 2, 4]: two tokens
  cache.append(two, two, 2);
  CHECK_THROWS_WITH(cache.append(two, two, 2),
                    Contains("cannot append 2 positions") && Contains("holding 2 of its 3") && Contains("clear()"));
  CHECK(cache.size() == 2);  // nothing appended by the failed call
  const std::vector<float> wrong(7, 1.0f);
  CHECK_THROWS_WITH(cache.append(wrong, wrong, 1), Contains("7") && Contains("needs 8"));
  const std::vector<float> one(8, 1.0f);
  const bool mask[3] = {true, true, true};
  CHECK_THROWS_WITH(cache.append(one, one, 1, std::span<const bool>(mask, 3)),
                    Contains("validity mask has 3 elements") && Contains("needs 1"));
  CHECK_THROWS_AS(cache.keys(1, 0), std::out_of_range);
  CHECK_THROWS_AS(cache.values(0, 2), std::out_of_range);
  CHECK_THROWS_AS(cache.is_valid(0, 2), std::out_of_range);
  CHECK_THROWS_AS(cache.validity(1), std::out_of_range);
  CHECK_THROWS_WITH(nn::kv_cache<float>(1, 0, 4, 3), Contains("n_kv_heads is 0"));
  CHECK_THROWS_WITH(nn::kv_cache<float>(std::size_t{1} << 40, 1024, 1024, std::size_t{1} << 20), Contains("too large"));
}

}  // namespace kv_cache_test
