// Tests of mixprec-train's support headers that do not depend on the layers (examples/train/):
// char_dataset.hpp (nanoGPT's shakespeare_char preparation, batches, validation windows), cli.hpp (the
// command line) and loss_chart.hpp (the SVG chart). Reference facts: data/tinyshakespeare/SOURCE.md
// (nanoGPT's prepare.py output: 1,115,394 characters, 65 distinct, 1,003,854 train / 111,540 val).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../../examples/train/char_dataset.hpp"
#include "../../examples/train/cli.hpp"
#include "../../examples/train/loss_chart.hpp"

namespace example_char_dataset_test {

using Catch::Matchers::Contains;
using train_example::char_dataset;
using train_example::split;

namespace {

/// A file under the temporary folder, removed when the object goes.
struct temp_file {
  std::filesystem::path path;
  explicit temp_file(std::string_view name, std::string_view content) {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("mixprec_train_example_" + std::to_string(rd()) + "_" + std::string(name));
    std::ofstream out(path, std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

/// The repository's tinyshakespeare, found from this source file's path (tests/train/ -> data/).
std::filesystem::path tinyshakespeare() {
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "tinyshakespeare" /
         "input.txt";
}

/// A text whose byte at position p is p (n <= 256 distinct bytes): every id equals its position, so a
/// window's ids tell where it starts.
std::string positional_text(std::size_t n) {
  std::string s;
  for (std::size_t p = 0; p < n; ++p) s += static_cast<char>(static_cast<unsigned char>(p));
  return s;
}

train_example::cli_options parse(std::vector<std::string_view> args) {
  return train_example::parse_cli(std::span<const std::string_view>(args), "/data/input.txt");
}

}  // namespace

TEST_CASE("tinyshakespeare: nanoGPT's 65-character vocabulary and 1,003,854 / 111,540 split", "[char_dataset]") {
  const std::filesystem::path file = tinyshakespeare();
  INFO("data file: " << file.string());
  REQUIRE(std::filesystem::is_regular_file(file));  // part of the repository: missing = failure
  const char_dataset d = char_dataset::from_file(file);
  CHECK(d.size() == 1'115'394);
  CHECK(d.vocab_size() == 65);
  CHECK(d.vocabulary() == "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");  // SOURCE.md
  CHECK(d.encode('\n') == 0);
  CHECK(d.encode(' ') == 1);
  CHECK(d.encode('!') == 2);
  CHECK(d.encode('z') == 64);
  CHECK(d.size(split::train) == 1'003'854);
  CHECK(d.size(split::val) == 111'540);
  CHECK(d.window_count(split::val, 64) == 1742);
  CHECK(d.decode(d.tokens(split::train).first(14)) == "First Citizen:");
  CHECK(d.source() == file.string());
}

TEST_CASE("the split is int(0.9 n), as prepare.py: 1,003,854 / 111,540 for 1,115,394 characters", "[char_dataset]") {
  std::string text(1'115'394, 'a');
  for (std::size_t i = 0; i < text.size(); i += 7) text[i] = 'b';
  const char_dataset d(text);
  CHECK(d.size(split::train) == 1'003'854);  // 0.9 * 1115394 = 1003854.6, truncated
  CHECK(d.size(split::val) == 111'540);
  CHECK(d.tokens(split::train).size() == 1'003'854);
  CHECK(d.tokens(split::val).size() == 111'540);
  CHECK(d.window_count(split::val, 64) == 1742);                                    // (111540 - 1) / 64 = 1742.8
  CHECK(d.tokens(split::val).data() == d.tokens(split::train).data() + 1'003'854);  // contiguous, in order
  // Small n: int(0.9 * n) by hand (Python: int(0.9 * 1) = 0, int(0.9 * 11) = 9, int(0.9 * 20) = 18).
  CHECK(char_dataset("a").size(split::train) == 0);
  CHECK(char_dataset("a").size(split::val) == 1);
  CHECK(char_dataset(std::string(11, 'x')).size(split::train) == 9);
  CHECK(char_dataset(std::string(20, 'x')).size(split::train) == 18);
  CHECK(char_dataset(std::string(20, 'x')).size(split::val) == 2);
}

TEST_CASE("the vocabulary is the sorted set of distinct bytes", "[char_dataset]") {
  const char_dataset d("hello world\n", "greeting");
  CHECK(d.vocabulary() == "\n dehlorw");
  CHECK(d.vocab_size() == 9);
  CHECK(d.encode("hello") == std::vector<std::int32_t>{4, 3, 5, 5, 6});
  // Bytes >= 0x80 sort after ASCII (unsigned order, as Python sorts bytes).
  const char_dataset high(std::string("a\xC3\xA9z"));
  CHECK(high.vocabulary() == std::string("az\xA9\xC3"));
}

TEST_CASE("encode and decode round-trip, unknown bytes and ids are errors", "[char_dataset]") {
  const char_dataset d("To be, or not to be: that is the question.\n");
  const std::string s = "be not the question, To: that is.\n";
  const std::vector<std::int32_t> ids = d.encode(s);
  REQUIRE(ids.size() == s.size());
  CHECK(d.decode(ids) == s);
  for (std::size_t i = 0; i < ids.size(); ++i) CHECK(d.vocabulary()[static_cast<std::size_t>(ids[i])] == s[i]);
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(d.vocab_size()); ++id) CHECK(d.encode(d.decode(id)) == id);
  CHECK_THROWS_AS(d.encode('Z'), std::invalid_argument);
  CHECK_THROWS_AS(d.encode(std::string_view("bez")), std::invalid_argument);
  CHECK_THROWS_AS(d.decode(-1), std::out_of_range);
  CHECK_THROWS_AS(d.decode(static_cast<std::int32_t>(d.vocab_size())), std::out_of_range);
}

TEST_CASE("from_file: a missing or empty file is a runtime_error naming the path", "[char_dataset]") {
  const temp_file good("good.txt", "abcab\n");
  const char_dataset d = char_dataset::from_file(good.path);
  CHECK(d.vocabulary() == "\nabc");
  CHECK(d.size() == 6);

  const temp_file empty("empty.txt", "");
  CHECK_THROWS_AS(char_dataset::from_file(empty.path), std::runtime_error);
  CHECK_THROWS_WITH(char_dataset::from_file(empty.path), Contains(empty.path.string()) && Contains("empty"));

  const std::filesystem::path missing = good.path.string() + ".missing";
  CHECK_THROWS_AS(char_dataset::from_file(missing), std::runtime_error);
  CHECK_THROWS_WITH(char_dataset::from_file(missing), Contains(missing.string()) && Contains("does not exist"));
  CHECK_THROWS_AS(char_dataset(""), std::runtime_error);
}

TEST_CASE("sample_batch: B x T windows at offsets 0 .. len - T - 1, y = x shifted by one", "[char_dataset]") {
  const char_dataset d(positional_text(200));  // train: ids 0..179, val: ids 180..199
  REQUIRE(d.size(split::train) == 180);
  const std::size_t B = 12, T = 8;
  std::mt19937_64 rng(1337);
  std::set<std::int32_t> starts;
  for (int step = 0; step < 2000; ++step) {
    const train_example::token_batch b = d.sample_batch(split::train, B, T, rng);
    REQUIRE(b.x.shape()[0] == B);
    REQUIRE(b.x.shape()[1] == T);
    REQUIRE(b.y.shape()[0] == B);
    REQUIRE(b.y.shape()[1] == T);
    for (std::size_t r = 0; r < B; ++r) {
      const std::int32_t i = b.x(r, 0);
      starts.insert(i);
      for (std::size_t t = 0; t < T; ++t) {
        REQUIRE(b.x(r, t) == i + static_cast<std::int32_t>(t));      // x = d[i : i + T]
        REQUIRE(b.y(r, t) == i + 1 + static_cast<std::int32_t>(t));  // y = d[i + 1 : i + 1 + T]
      }
    }
  }
  // 24,000 draws over 172 offsets: every offset 0..171 (= len - T - 1) is drawn, and no other.
  CHECK(starts.size() == 172);
  CHECK(*starts.begin() == 0);
  CHECK(*starts.rbegin() == 171);

  // The validation split: offsets relative to it (ids 180 + i, i in [0, 12)).
  for (int step = 0; step < 200; ++step) {
    const auto b = d.sample_batch(split::val, 4, T, rng);
    for (std::size_t r = 0; r < 4; ++r) {
      CHECK(b.x(r, 0) >= 180);
      CHECK(b.x(r, 0) <= 191);
      CHECK(b.y(r, T - 1) <= 199);
    }
  }
}

TEST_CASE("sample_batch: a seed gives the same batches, errors for impossible sizes", "[char_dataset]") {
  const char_dataset d(positional_text(256));
  std::mt19937_64 a(7), b(7), c(8);
  const auto ba = d.sample_batch(split::train, 12, 16, a);
  const auto bb = d.sample_batch(split::train, 12, 16, b);
  const auto bc = d.sample_batch(split::train, 12, 16, c);
  CHECK(ba.x == bb.x);
  CHECK(ba.y == bb.y);
  CHECK(ba.x != bc.x);
  // Split of 26 tokens (val): block 25 leaves one offset; block 26 none.
  REQUIRE(d.size(split::val) == 26);
  const auto one = d.sample_batch(split::val, 3, 25, a);
  CHECK(one.x(2, 0) == 230);
  CHECK_THROWS_AS(d.sample_batch(split::val, 3, 26, a), std::invalid_argument);
  CHECK_THROWS_WITH(d.sample_batch(split::val, 3, 26, a), Contains("val split"));
  CHECK_THROWS_AS(d.sample_batch(split::train, 0, 4, a), std::invalid_argument);
  CHECK_THROWS_AS(d.sample_batch(split::train, 4, 0, a), std::invalid_argument);
}

TEST_CASE("uniform_below stays in range and reaches both ends", "[char_dataset]") {
  std::mt19937_64 rng(3);
  CHECK(train_example::detail::uniform_below(rng, 1) == 0);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t v = train_example::detail::uniform_below(rng, 5);
    REQUIRE(v < 5);
    seen.insert(v);
  }
  CHECK(seen.size() == 5);
  const std::uint64_t big = std::numeric_limits<std::uint64_t>::max() / 3 * 2;  // rejects about 1/3 of draws
  for (int i = 0; i < 100; ++i) CHECK(train_example::detail::uniform_below(rng, big) < big);
}

TEST_CASE("validation windows: non-overlapping, in order, in batches, covering the split", "[char_dataset]") {
  const char_dataset d(positional_text(200));  // val: ids 180..199 (20 tokens)
  const std::size_t T = 4;
  REQUIRE(d.window_count(split::val, T) == 4);  // offsets 0, 4, 8, 12: 12 + 4 + 1 <= 20; 16 + 5 > 20
  std::vector<std::size_t> rows;
  std::vector<std::int32_t> targets;
  d.for_each_val_window(T, 3, [&](const train_example::id_matrix& x, const train_example::id_matrix& y) {
    REQUIRE(x.shape()[1] == T);
    REQUIRE(y.shape() == x.shape());
    const std::size_t first = targets.size() / T;
    for (std::size_t r = 0; r < x.shape()[0]; ++r) {
      for (std::size_t t = 0; t < T; ++t) {
        CHECK(x(r, t) == static_cast<std::int32_t>(180 + (first + r) * T + t));
        CHECK(y(r, t) == x(r, t) + 1);
        targets.push_back(y(r, t));
      }
    }
    rows.push_back(x.shape()[0]);
  });
  CHECK(rows == std::vector<std::size_t>{3, 1});
  // The targets are the split's tokens 1..16, each once: every window of the split, no overlap.
  std::vector<std::int32_t> expected;
  for (std::int32_t v = 181; v <= 196; ++v) expected.push_back(v);
  CHECK(targets == expected);

  // window_count = floor((len - 1) / T), the last window ending at or before the split's end, for every
  // length: the windows walked match it.
  for (std::size_t n = 30; n <= 60; ++n) {
    const char_dataset e(positional_text(n * 10));  // val = n tokens (10 n - int(9 n))
    REQUIRE(e.size(split::val) == n);
    for (const std::size_t block : {std::size_t{1}, std::size_t{4}, std::size_t{7}, n - 1}) {
      const std::size_t w = e.window_count(split::val, block);
      CHECK(w == (n - 1) / block);
      CHECK(w * block + 1 <= n);       // the last window fits
      CHECK((w + 1) * block + 1 > n);  // one more would not
      std::size_t walked = 0;
      e.for_each_window(split::val, block, 5, [&](const auto& x, const auto&) { walked += x.shape()[0]; });
      CHECK(walked == w);
    }
  }
  CHECK_THROWS_AS(d.for_each_val_window(20, 3, [](const auto&, const auto&) {}), std::invalid_argument);
  CHECK_THROWS_AS(d.for_each_val_window(4, 0, [](const auto&, const auto&) {}), std::invalid_argument);
}

TEST_CASE("cli: the defaults are the shakespeare_char recipe and the four policies", "[cli]") {
  const auto o = parse({});
  REQUIRE(o.policies.size() == 4);
  CHECK(o.policies[0].text == "f32");
  CHECK(o.policies[1].text == "p=f32,c=bf16,o=f32");
  CHECK(o.policies[2].text == "p=f32,c=f16,o=f32");
  CHECK(o.policies[3].text == "p=bf16,c=bf16,o=f32");
  CHECK(o.policies[1].policy ==
        (mixprec::runtime_policy{mixprec::dtype::float32, mixprec::dtype::bfloat16, mixprec::dtype::float32}));
  CHECK(o.iters == 2000);
  CHECK(o.threads == 2);
  CHECK(o.seed == 1337);
  CHECK(o.eval_every == 250);
  CHECK(o.eval_iters == 20);
  CHECK(o.batch == 12);
  CHECK(o.data == std::filesystem::path("/data/input.txt"));
  CHECK(o.out == std::filesystem::path("mixprec-train-out"));
  CHECK_FALSE(o.help);
  CHECK_FALSE(o.profile);
}

TEST_CASE("cli: every flag, with its value next or after '='", "[cli]") {
  const auto o = parse({"--policy", "p=f32,c=f16,o=f32", "--policy=bf16", "--iters", "200", "--threads=1", "--seed",
                        "0", "--eval-every", "50", "--eval-iters=5", "--data", "t.txt", "--out=o", "--batch", "4"});
  REQUIRE(o.policies.size() == 2);  // given policies replace the default list
  CHECK(o.policies[0].text == "p=f32,c=f16,o=f32");
  CHECK(o.policies[1].text == "bf16");
  CHECK(o.iters == 200);
  CHECK(o.threads == 1);
  CHECK(o.seed == 0);
  CHECK(o.eval_every == 50);
  CHECK(o.eval_iters == 5);
  CHECK(o.data == std::filesystem::path("t.txt"));
  CHECK(o.out == std::filesystem::path("o"));
  CHECK(o.batch == 4);
  CHECK(parse({"--help"}).help);
  CHECK(parse({"-h"}).help);
  CHECK(parse({"--profile"}).profile);
  const char* argv[] = {"mixprec-train", "--iters", "3"};
  CHECK(train_example::parse_cli(3, argv, "d").iters == 3);
}

TEST_CASE("cli: errors are invalid_argument sentences naming the flag", "[cli]") {
  using E = std::invalid_argument;
  CHECK_THROWS_AS(parse({"--iterations", "5"}), E);
  CHECK_THROWS_WITH(parse({"--iterations", "5"}), Contains("unknown option '--iterations'"));
  CHECK_THROWS_WITH(parse({"--iters"}), Contains("--iters needs a value"));
  CHECK_THROWS_WITH(parse({"--policy"}), Contains("--policy needs a value"));
  CHECK_THROWS_WITH(parse({"--iters", "ten"}), Contains("--iters expects a positive integer") && Contains("'ten'"));
  CHECK_THROWS_WITH(parse({"--iters", "12x"}), Contains("--iters expects"));
  CHECK_THROWS_WITH(parse({"--iters", ""}), Contains("--iters expects"));
  CHECK_THROWS_WITH(parse({"--iters", "0"}), Contains("--iters must be a positive integer") && Contains("at least 1"));
  CHECK_THROWS_WITH(parse({"--iters=-3"}), Contains("--iters must be"));
  CHECK_THROWS_WITH(parse({"--threads", "0"}), Contains("--threads must be"));
  CHECK_THROWS_WITH(parse({"--batch", "0"}), Contains("--batch must be"));
  CHECK_THROWS_WITH(parse({"--eval-every", "0"}), Contains("--eval-every must be"));
  CHECK_THROWS_WITH(parse({"--eval-iters", "0"}), Contains("--eval-iters must be"));
  CHECK_THROWS_WITH(parse({"--seed", "-1"}), Contains("--seed expects an integer >= 0"));
  CHECK_THROWS_WITH(parse({"--threads", "99999999999"}), Contains("--threads expects"));  // overflows int
  CHECK_THROWS_WITH(parse({"--policy", "p=f32,c=bf17"}), Contains("--policy"));
  CHECK_THROWS_WITH(parse({"--policy", "f32", "--policy", "p=f32,c=f32,o=f32"}), Contains("repeats 'f32'"));
  CHECK_THROWS_WITH(parse({"--data", ""}), Contains("--data needs a file name"));
  CHECK_THROWS_WITH(parse({"--out="}), Contains("--out needs a folder name"));
  CHECK_THROWS_WITH(parse({"--help=yes"}), Contains("--help takes no value"));
  CHECK_THROWS_WITH(parse({"--profile=1"}), Contains("--profile takes no value"));
  CHECK_THROWS_WITH(parse({"f32"}), Contains("unexpected argument 'f32'"));
  CHECK_THROWS_AS(parse({"--iters", "0"}), train_example::usage_error);
}

TEST_CASE("cli: the help text names every flag and the default data file", "[cli]") {
  const std::string u = train_example::usage("mixprec-train", "/repo/data/tinyshakespeare/input.txt");
  for (const char* flag : {"--policy", "--iters", "--threads", "--seed", "--eval-every", "--eval-iters", "--data",
                           "--out", "--batch", "--profile", "--help"}) {
    INFO(flag);
    CHECK_THAT(u, Contains(flag));
  }
  CHECK_THAT(u, Contains("/repo/data/tinyshakespeare/input.txt"));
  CHECK_THAT(u, Contains("Usage: mixprec-train"));
}

TEST_CASE("loss chart: one coloured pair of lines per policy, legend, labels, title", "[loss_chart]") {
  using train_example::loss_curve;
  const std::vector<loss_curve> curves{
      {"f32", {{0, 4.17, 4.18}, {250, 2.5, 2.55}, {500, 2.1, 2.2}}},
      {"p=f32,c=bf16,o=f32", {{0, 4.17, 4.18}, {250, 2.51, 2.56}, {500, 2.12, 2.21}}},
      {"a<b&c", {{0, 4.2, 4.2}, {250, std::numeric_limits<double>::infinity(), 3.0}, {500, 2.9, 2.8}}}};
  const std::string svg = train_example::loss_chart_svg(curves, "mixprec-train <loss>", "4 layers");
  CHECK(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(svg.ends_with("</svg>\n"));
  CHECK_THAT(svg, Contains("mixprec-train &lt;loss&gt;"));
  CHECK_THAT(svg, Contains("4 layers"));
  CHECK_THAT(svg, Contains(">f32</text>"));
  CHECK_THAT(svg, Contains(">p=f32,c=bf16,o=f32</text>"));
  CHECK_THAT(svg, Contains(">a&lt;b&amp;c</text>"));
  CHECK_THAT(svg, Contains(">iteration</text>"));
  CHECK_THAT(svg, Contains("loss (cross-entropy"));
  CHECK_THAT(svg, Contains("train loss"));
  CHECK_THAT(svg, Contains("validation loss"));
  CHECK_THAT(svg, Contains(">500</text>"));  // x tick at the last iteration
  for (std::size_t k = 0; k < 3; ++k) CHECK_THAT(svg, Contains(std::string(llama::svg::palette[k])));
  // Lines: f32 and bf16 have 2 each (train, val); the third's train line is broken by the infinity into
  // single points (no polyline), its val line is whole: 5 polylines, 2 of them dashed, plus one cross.
  std::size_t polylines = 0, dashed = 0, pos = 0;
  while ((pos = svg.find("<polyline", pos)) != std::string::npos) {
    const std::size_t end = svg.find("/>", pos);
    ++polylines;
    if (svg.substr(pos, end - pos).find("stroke-dasharray") != std::string::npos) ++dashed;
    pos = end;
  }
  CHECK(polylines == 5);
  CHECK(dashed == 3);
  CHECK_THAT(svg, Contains("<path d=\"M"));

  CHECK_THROWS_AS(train_example::loss_chart_svg({}, "t"), std::invalid_argument);
  CHECK_THROWS_AS(train_example::loss_chart_svg({{"f32", {}}}, "t"), std::invalid_argument);
  CHECK_THROWS_AS(train_example::loss_chart_svg({{"f32", {{250, 2, 2}, {0, 4, 4}}}}, "t"), std::invalid_argument);

  const temp_file placeholder("chart.svg", "old");
  train_example::write_loss_chart(placeholder.path, curves, "mixprec-train <loss>");
  std::ifstream in(placeholder.path, std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(written == train_example::loss_chart_svg(curves, "mixprec-train <loss>"));
}

}  // namespace example_char_dataset_test
