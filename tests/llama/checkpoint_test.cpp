// llama2c_checkpoint.hpp: small checkpoints written here byte by byte (layout from
// data/stories260K/SOURCE.md and llama2.c run.c), every error path, and the real stories260K.bin
// against the header and per-tensor maxima listed in SOURCE.md.
#include "llama/llama2c_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "data.hpp"
#include "test_files.hpp"

namespace {

using Catch::Matchers::Contains;
using llama_test::put_f32;
using llama_test::put_i32;
using llama_test::temp_file;
using shape_t = std::vector<std::size_t>;

// The tiny model: dim 4, hidden 6, 1 layer, 2 heads, 1 kv head (head_size 2, kv_dim 2), vocab 5, seq 3.
// File order and shapes written out by hand from SOURCE.md's layout.
struct expected_tensor {
  const char* name;
  shape_t shape;
};
const std::vector<expected_tensor> tiny_layout{
    {"token_embedding", {5, 4}}, {"rms_att", {1, 4}}, {"wq", {1, 4, 4}},   {"wk", {1, 2, 4}},
    {"wv", {1, 2, 4}},           {"wo", {1, 4, 4}},   {"rms_ffn", {1, 4}}, {"w1", {1, 6, 4}},
    {"w2", {1, 4, 6}},           {"w3", {1, 6, 4}},   {"rms_final", {4}},  {"freq_cis_real", {3, 1}},
    {"freq_cis_imag", {3, 1}}};
constexpr std::size_t tiny_floats = 158;  // 20+4+16+8+8+16+4+24+24+24+4+3+3
constexpr std::size_t tiny_wcls_floats = 20;

// Element i of the k-th array in file order holds k * 1000 + i + 0.5 (exact in float32).
float tiny_value(std::size_t k, std::size_t i) { return static_cast<float>(k * 1000 + i) + 0.5f; }

std::string header(std::int32_t dim, std::int32_t hidden, std::int32_t layers, std::int32_t heads,
                   std::int32_t kv_heads, std::int32_t vocab, std::int32_t seq) {
  std::string bytes;
  for (const std::int32_t v : {dim, hidden, layers, heads, kv_heads, vocab, seq}) put_i32(bytes, v);
  return bytes;
}

std::string tiny_file(bool shared_classifier) {
  std::string bytes = header(4, 6, 1, 2, 1, shared_classifier ? 5 : -5, 3);
  std::size_t k = 0;
  for (const auto& t : tiny_layout) {
    std::size_t n = 1;
    for (const std::size_t e : t.shape) n *= e;
    for (std::size_t i = 0; i < n; ++i) put_f32(bytes, tiny_value(k, i));
    ++k;
  }
  if (!shared_classifier) {
    for (std::size_t i = 0; i < tiny_wcls_floats; ++i) put_f32(bytes, tiny_value(k, i));
  }
  return bytes;
}

// Reading `contents` throws a file_error whose message names the file and contains `problem`.
void check_rejects(const std::string& contents, const std::string& problem) {
  const temp_file f("checkpoint", contents);
  INFO("expected problem: " << problem);
  CHECK_THROWS_AS(llama2c::read_checkpoint(f.path()), llama2c::file_error);
  CHECK_THROWS_WITH(llama2c::read_checkpoint(f.path()), Contains(f.path().string()) && Contains(problem));
}

}  // namespace

TEST_CASE("read_checkpoint reads a tied-classifier checkpoint written byte by byte", "[llama][checkpoint]") {
  const temp_file f("tiny_tied", tiny_file(true));
  const llama2c::checkpoint ck = llama2c::read_checkpoint(f.path());

  CHECK(ck.config.dim == 4);
  CHECK(ck.config.hidden_dim == 6);
  CHECK(ck.config.n_layers == 1);
  CHECK(ck.config.n_heads == 2);
  CHECK(ck.config.n_kv_heads == 1);
  CHECK(ck.config.vocab_size == 5);
  CHECK(ck.config.seq_len == 3);
  CHECK(ck.config.shared_classifier);
  CHECK(ck.config.head_size() == 2);
  CHECK(ck.config.kv_dim() == 2);
  CHECK(ck.config.kv_group_size() == 2);

  const auto named = ck.named_tensors();
  REQUIRE(named.size() == tiny_layout.size());
  std::size_t total = 0;
  for (std::size_t k = 0; k < tiny_layout.size(); ++k) {
    INFO("tensor " << tiny_layout[k].name);
    CHECK(named[k].first == tiny_layout[k].name);
    const llama2c::tensor& t = *named[k].second;
    CHECK(t.shape == tiny_layout[k].shape);
    for (std::size_t i = 0; i < t.size(); ++i) CHECK(t.values[i] == tiny_value(k, i));
    total += t.size();
  }
  CHECK(total == tiny_floats);
  CHECK(ck.wcls.values.empty());
  CHECK(&ck.classifier() == &ck.token_embedding);

  // Row-major [L, out, in]: wk[0] is the 2x4 matrix W with W[i, j] at i * 4 + j (k = 3 in file order).
  const auto wk0 = ck.wk.slice(0);
  REQUIRE(wk0.size() == 8);
  CHECK(wk0[1 * 4 + 3] == tiny_value(3, 7));
  // w2[0] is [dim 4, hidden 6]: W[2, 5] at 2 * 6 + 5 (k = 8).
  CHECK(ck.w2.slice(0)[2 * 6 + 5] == tiny_value(8, 17));
  // token 3's embedding row is floats 12..15 of the first array.
  const auto row3 = ck.token_embedding.slice(3);
  CHECK(row3[0] == tiny_value(0, 12));
  CHECK(row3[3] == tiny_value(0, 15));
  CHECK_THROWS_AS(ck.token_embedding.slice(5), std::out_of_range);
  CHECK_THROWS_AS(ck.wcls.slice(0), std::out_of_range);
}

TEST_CASE("read_checkpoint reads a separate classifier when vocab_size is negative", "[llama][checkpoint]") {
  const temp_file f("tiny_untied", tiny_file(false));
  const llama2c::checkpoint ck = llama2c::read_checkpoint(f.path());
  CHECK(ck.config.vocab_size == 5);
  CHECK_FALSE(ck.config.shared_classifier);
  REQUIRE(ck.wcls.shape == shape_t{5, 4});
  for (std::size_t i = 0; i < tiny_wcls_floats; ++i) CHECK(ck.wcls.values[i] == tiny_value(13, i));
  CHECK(&ck.classifier() == &ck.wcls);
  const auto named = ck.named_tensors();
  REQUIRE(named.size() == 14);
  CHECK(named.back().first == "wcls");
}

TEST_CASE("read_checkpoint names the file and the problem for a missing or unreadable path", "[llama][checkpoint]") {
  const auto missing = std::filesystem::temp_directory_path() / "mixprec_llama_no_such_checkpoint_4711.bin";
  CHECK_THROWS_AS(llama2c::read_checkpoint(missing), llama2c::file_error);
  CHECK_THROWS_WITH(llama2c::read_checkpoint(missing), Contains(missing.string()) && Contains("no such file"));
  const auto dir = std::filesystem::temp_directory_path();
  CHECK_THROWS_WITH(llama2c::read_checkpoint(dir), Contains(dir.string()) && Contains("not a regular file"));
}

TEST_CASE("read_checkpoint rejects files too short for the header or in another export format", "[llama][checkpoint]") {
  check_rejects("", "fewer than the 28-byte header");
  check_rejects(std::string(27, '\x01'), "the file has 27 bytes, fewer than the 28-byte header");
  // export.py's version-1 files: uint32 magic 0x616b3432 ("ak42"), int32 version, then the config, 256 bytes.
  std::string v1;
  llama_test::put_u32(v1, 0x616b3432u);
  put_i32(v1, 1);
  v1 += header(4, 6, 1, 2, 1, 5, 3);
  v1.resize(256, '\0');
  check_rejects(v1, "version-1 export (magic \"ak42\")");
}

TEST_CASE("read_checkpoint rejects headers describing impossible models", "[llama][checkpoint]") {
  SECTION("non-positive sizes") {
    check_rejects(header(0, 6, 1, 2, 1, 5, 3), "invalid header: dim = 0 must be positive");
    check_rejects(header(4, -6, 1, 2, 1, 5, 3), "invalid header: hidden_dim = -6 must be positive");
    check_rejects(header(4, 6, 0, 2, 1, 5, 3), "invalid header: n_layers = 0 must be positive");
    check_rejects(header(4, 6, 1, 0, 1, 5, 3), "invalid header: n_heads = 0 must be positive");
    check_rejects(header(4, 6, 1, 2, -1, 5, 3), "invalid header: n_kv_heads = -1 must be positive");
    check_rejects(header(4, 6, 1, 2, 1, 5, 0), "invalid header: seq_len = 0 must be positive");
    check_rejects(header(4, 6, 1, 2, 1, 0, 3), "invalid header: vocab_size = 0 must be non-zero");
    check_rejects(header(4, 6, 1, 2, 1, std::numeric_limits<std::int32_t>::min(), 3),
                  "invalid header: vocab_size = -2147483648 has no positive counterpart");
  }
  SECTION("inconsistent head counts") {
    check_rejects(header(6, 6, 1, 4, 1, 5, 3), "invalid header: dim 6 is not a multiple of n_heads 4");
    check_rejects(header(4, 6, 1, 2, 4, 5, 3), "invalid header: n_kv_heads 4 exceeds n_heads 2");
    check_rejects(header(12, 6, 1, 6, 4, 5, 3), "invalid header: n_heads 6 is not a multiple of n_kv_heads 4");
    check_rejects(header(6, 6, 1, 2, 1, 5, 3), "invalid header: head_size 3 (dim / n_heads) must be even");
  }
  SECTION("sizes whose byte count overflows 64 bits") {
    constexpr std::int32_t big = std::numeric_limits<std::int32_t>::max() - 1;  // even, so head_size is even
    check_rejects(header(big, big, big, 1, 1, 5, 3), "invalid header: the weight sizes overflow 64 bits");
  }
  SECTION("sizes far beyond the file, rejected before any allocation") {
    // dim 1024, hidden 2^20, 2^10 layers, 8 heads, 2 kv heads (kv_dim 256), vocab 32000, seq 4096:
    // floats = v*d + L*(d + d*d + 2*kv*d + d*d + d + 3*h*d) + d + 2*seq*(head_size/2), head_size 128.
    const std::uint64_t d = 1024, h = 1u << 20, L = 1u << 10, kv = 256, v = 32000, s = 4096, hs = 128;
    const std::uint64_t floats = v * d + L * (d + d * d + 2 * kv * d + d * d + d + 3 * h * d) + d + 2 * s * (hs / 2);
    check_rejects(header(1024, 1 << 20, 1 << 10, 8, 2, 32000, 4096) + std::string(64, '\0'),
                  "truncated: the header promises " + std::to_string(4 * floats) +
                      " bytes of weights after the 28-byte header, the file has 64");
  }
}

TEST_CASE("read_checkpoint rejects truncated files, trailing data and non-finite weights", "[llama][checkpoint]") {
  const std::string good = tiny_file(true);
  REQUIRE(good.size() == 28 + 4 * tiny_floats);  // 660 bytes
  check_rejects(good.substr(0, 28 + 100),
                "truncated: the header promises 632 bytes of weights after the 28-byte header, the file has 100");
  check_rejects(good.substr(0, good.size() - 1),
                "promises 632 bytes of weights after the 28-byte header, the file has 631");
  check_rejects(good + "junk!", "trailing data: 5 bytes after the 632 bytes of weights the header promises");
  // a negative vocab_size promises wcls too: 4 * (158 + 20) bytes, of which only 632 are there
  std::string untied_without_wcls = good;
  untied_without_wcls.replace(20, 4, std::string("\xfb\xff\xff\xff", 4));  // vocab_size = -5
  check_rejects(untied_without_wcls, "truncated: the header promises 712 bytes of weights");

  // wv is the 5th array, its 8 floats start after 20+4+16+8 = 48 floats; element [0, 1, 3] is float 7 of it.
  std::string with_nan = good;
  std::string nan_bytes;
  put_f32(nan_bytes, std::numeric_limits<float>::quiet_NaN());
  with_nan.replace(28 + 4 * (48 + 7), 4, nan_bytes);
  check_rejects(with_nan, "corrupt: tensor wv [1, 2, 4] holds a non-finite value");
  check_rejects(with_nan, "at [0, 1, 3]");
  std::string with_inf = good;
  std::string inf_bytes;
  put_f32(inf_bytes, -std::numeric_limits<float>::infinity());
  with_inf.replace(28 + 4 * (148 + 2), 4, inf_bytes);  // rms_final[2]
  check_rejects(with_inf, "corrupt: tensor rms_final [4] holds a non-finite value (-inf) at [2]");
}

TEST_CASE("stories260K.bin parses with SOURCE.md's header and per-tensor maxima", "[llama][checkpoint]") {
  const auto ck = llama2c::read_checkpoint(llama_test::stories260k_dir() / "stories260K.bin");
  // SOURCE.md "Architecture": dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, vocab 512 (shared), seq 512.
  CHECK(ck.config.dim == 64);
  CHECK(ck.config.hidden_dim == 172);
  CHECK(ck.config.n_layers == 5);
  CHECK(ck.config.n_heads == 8);
  CHECK(ck.config.n_kv_heads == 4);
  CHECK(ck.config.vocab_size == 512);
  CHECK(ck.config.shared_classifier);
  CHECK(ck.config.seq_len == 512);
  CHECK(ck.config.head_size() == 8);
  CHECK(ck.config.kv_dim() == 32);
  CHECK(ck.wk.shape == shape_t{5, 32, 64});
  CHECK(ck.w2.shape == shape_t{5, 64, 172});

  // 1,056,540 bytes = 28 + 4 * 264,128 floats (SOURCE.md): 260,032 parameters + 2 * 512 * 4 RoPE table entries.
  std::size_t total = 0;
  for (const auto& [name, t] : ck.named_tensors()) total += t->size();
  CHECK(total == 264128);
  CHECK(total - ck.freq_cis_real.size() - ck.freq_cis_imag.size() == 260032);

  // SOURCE.md "Max |weight| per tensor" (3 decimals).
  const std::vector<std::pair<const llama2c::tensor*, double>> maxima{{&ck.token_embedding, 1.327},
                                                                      {&ck.rms_att, 2.793},
                                                                      {&ck.wq, 1.852},
                                                                      {&ck.wk, 1.270},
                                                                      {&ck.wv, 0.474},
                                                                      {&ck.wo, 0.618},
                                                                      {&ck.rms_ffn, 1.325},
                                                                      {&ck.w1, 0.708},
                                                                      {&ck.w2, 0.886},
                                                                      {&ck.w3, 0.610},
                                                                      {&ck.rms_final, 4.425}};
  for (const auto& [t, expected] : maxima) {
    double max_abs = 0;
    for (const float w : t->values) max_abs = std::max(max_abs, static_cast<double>(std::abs(w)));
    CAPTURE(expected);
    CHECK(max_abs == Approx(expected).margin(1e-3));
  }
}
