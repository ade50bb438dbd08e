// Tests of mixprec/train/safetensors.hpp against the safetensors format as its README ("Format") and
// safetensors/src/tensor.rs (huggingface/safetensors) define it. The expected bytes are written out by
// hand from the format (8-byte little-endian header length, JSON header, buffer), and two byte vectors
// are those of tensor.rs's own unit tests (test_serialization, test_empty), which show what the
// reference writer produces.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/train/safetensors.hpp"

namespace safetensors_test {

using Catch::Matchers::Contains;
using mixprec::dtype;
using mixprec::train::checkpoint;
using mixprec::train::safetensors_error;

namespace {

using bytes = std::vector<std::uint8_t>;

// A file image: the 8-byte little-endian length of `header`, `header`, then `buffer`.
bytes file_image(std::string_view header, const bytes& buffer) {
  bytes out;
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>((n >> (8 * i)) & 0xFF));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

checkpoint parse(const bytes& b) { return checkpoint::from_bytes(b); }

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("mixprec_train_safetensors_test_" + name);
}

}  // namespace

// The expression throws a safetensors_error whose message matches `matcher`.
#define REQUIRE_ST_ERROR(expr, matcher)         \
  do {                                          \
    REQUIRE_THROWS_AS(expr, safetensors_error); \
    REQUIRE_THROWS_WITH(expr, matcher);         \
  } while (false)

TEST_CASE("dtype names map to mixprec dtypes", "[safetensors]") {
  using mixprec::train::find_safetensors_dtype;
  CHECK(find_safetensors_dtype("F8_E4M3")->type == dtype::float8_e4m3fn);  // torch.float8_e4m3fn, not e4m3
  CHECK(find_safetensors_dtype("F8_E5M2")->type == dtype::float8_e5m2);
  CHECK(find_safetensors_dtype("F8_E4M3FNUZ")->type == dtype::float8_e4m3fnuz);
  CHECK(find_safetensors_dtype("F8_E5M2FNUZ")->type == dtype::float8_e5m2fnuz);
  CHECK(find_safetensors_dtype("F8_E8M0")->type == dtype::float8_e8m0fnu);
  CHECK(find_safetensors_dtype("BF16")->type == dtype::bfloat16);
  CHECK(find_safetensors_dtype("F16")->itemsize == 2);
  CHECK(find_safetensors_dtype("I64")->itemsize == 8);
  CHECK(find_safetensors_dtype("BOOL")->type == dtype::bool_);
  CHECK_FALSE(find_safetensors_dtype("f32").has_value());
  CHECK_FALSE(find_safetensors_dtype("F4").has_value());
  CHECK_FALSE(find_safetensors_dtype(dtype::float8_e4m3).has_value());
  CHECK_FALSE(find_safetensors_dtype(dtype::complex64).has_value());
}

TEST_CASE("a file written out by hand from the format is read", "[safetensors]") {
  // Header of 144 bytes: 139 bytes of JSON and 5 spaces of padding (the JSON is counted below).
  const std::string json = R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[],"data_offsets":[8,10]},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(json.size() == 139);
  const std::string header = json + "     ";
  // a = [1.0f, -2.0f]: 0x3F800000, 0xC0000000 little-endian; b = bf16 1.5 = 0x3FC0.
  const bytes buffer = {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0, 0xC0, 0x3F};
  bytes file = {144, 0, 0, 0, 0, 0, 0, 0};
  file.insert(file.end(), header.begin(), header.end());
  file.insert(file.end(), buffer.begin(), buffer.end());

  const checkpoint ck = parse(file);
  CHECK(ck.size() == 2);
  CHECK(ck.metadata.at("format") == "pt");
  const auto a = ck.get<float, 1>("a");
  REQUIRE(a.size() == 2);
  CHECK(a(0) == 1.0f);
  CHECK(a(1) == -2.0f);
  CHECK(ck.at("b").shape.empty());
  CHECK(ck.get_scalar<mixprec::bfloat16>("b").bits() == 0x3FC0);
  CHECK(static_cast<float>(ck.get_scalar<mixprec::bfloat16>("b")) == 1.5f);
}

TEST_CASE("the writer reproduces the reference writer's bytes", "[safetensors]") {
  SECTION("tensor.rs test_serialization: attn.0, F32, shape [1, 2, 3], values 0..5") {
    checkpoint ck;
    xt::xtensor<float, 3> x = {{{0.0f, 1.0f, 2.0f}, {3.0f, 4.0f, 5.0f}}};
    ck.put("attn.0", x);
    const bytes expected = {
        64,  0,  0,   0,  0,   0,  0,   0,   123, 34,  97,  116, 116, 110, 46,  48, 34, 58, 123, 34, 100, 116, 121, 112,
        101, 34, 58,  34, 70,  51, 50,  34,  44,  34,  115, 104, 97,  112, 101, 34, 58, 91, 49,  44, 50,  44,  51,  93,
        44,  34, 100, 97, 116, 97, 95,  111, 102, 102, 115, 101, 116, 115, 34,  58, 91, 48, 44,  50, 52,  93,  125, 125,
        0,   0,  0,   0,  0,   0,  128, 63,  0,   0,   0,   64,  0,   0,   64,  64, 0,  0,  128, 64, 0,   0,   160, 64};
    CHECK(ck.to_bytes() == expected);
  }
  SECTION("tensor.rs test_empty: no tensors, with and without metadata") {
    checkpoint ck;
    CHECK(ck.to_bytes() == bytes{8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32});
    ck.metadata["framework"] = "pt";
    const bytes expected = {40,  0,   0,   0,  0,  0,  0,   0,   123, 34,  95,  95,  109, 101, 116, 97,
                            100, 97,  116, 97, 95, 95, 34,  58,  123, 34,  102, 114, 97,  109, 101, 119,
                            111, 114, 107, 34, 58, 34, 112, 116, 34,  125, 125, 32,  32,  32,  32,  32};
    CHECK(ck.to_bytes() == expected);
    CHECK(parse(expected).metadata.at("framework") == "pt");
  }
}

TEST_CASE("the writer pads the header with spaces and orders by alignment, then name", "[safetensors]") {
  checkpoint ck;
  ck.put("z8", xt::xtensor<std::int8_t, 1>{1, 2, 3});
  ck.put("a16", xt::xtensor<mixprec::float16, 1>{mixprec::float16(1.0f)});
  ck.put("m64", xt::xtensor<double, 1>{1.0});
  ck.put("b64", xt::xtensor<std::int64_t, 1>{7});
  ck.put("c32", xt::xtensor<float, 2>{{1.0f}});
  ck.put("a8", xt::xtensor<bool, 1>{true});
  ck.put_scalar("step", std::int64_t{3});
  const bytes file = ck.to_bytes();
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<std::size_t>(i)];
  CHECK(n % 8 == 0);
  const std::string header(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  const auto last = header.find_last_not_of(' ');
  CHECK(header[last] == '}');
  CHECK(n - (last + 1) < 8);
  // Descending item size (8: b64, m64, step; 4: c32; 2: a16; 1: a8, z8), names ascending within a size.
  const std::vector<std::string> order = {"\"b64\"", "\"m64\"", "\"step\"", "\"c32\"", "\"a16\"", "\"a8\"", "\"z8\""};
  std::size_t pos = 0;
  for (const auto& name : order) {
    const auto at = header.find(name);
    INFO(name);
    REQUIRE(at != std::string::npos);
    CHECK(at >= pos);
    pos = at;
  }
  // Each tensor starts at a multiple of its item size within the file.
  const checkpoint back = parse(file);
  CHECK(back.get<std::int64_t, 1>("b64")(0) == 7);
  CHECK(back.get_scalar<std::int64_t>("step") == 3);
  CHECK(back.get<bool, 1>("a8")(0) == true);
  CHECK(header.find(R"("b64":{"dtype":"I64","shape":[1],"data_offsets":[0,8]})") != std::string::npos);
  CHECK(header.find(R"("c32":{"dtype":"F32","shape":[1,1],"data_offsets":[24,28]})") != std::string::npos);
}

TEST_CASE("a round trip of every dtype is bit-exact", "[safetensors]") {
  checkpoint ck;
  ck.metadata["policy"] = "p=f32,c=bf16,o=f32";
  std::vector<std::string> names;
  for (const auto& info : mixprec::train::safetensors_dtypes) {
    // Every byte value appears (NaN and signalling-NaN patterns of the float types included); BOOL is 0/1.
    const std::size_t count = 256 / info.itemsize + 3;
    bytes data(count * info.itemsize);
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = info.type == dtype::bool_ ? static_cast<std::uint8_t>(i % 2) : static_cast<std::uint8_t>(i * 37 + 11);
    ck.put_bytes(std::string("t.") + std::string(info.name), info.type, {count}, data);
    names.push_back(std::string("t.") + std::string(info.name));
  }
  ck.put_bytes("empty", dtype::float32, {0, 4}, {});
  ck.put_bytes("scalar", dtype::float64, {}, bytes(8, 0xFF));  // a NaN with every payload bit set

  const auto path = temp_path("roundtrip.safetensors");
  ck.save(path);
  const checkpoint back = checkpoint::load(path);
  std::filesystem::remove(path);
  CHECK(back.metadata == ck.metadata);
  REQUIRE(back.size() == ck.size());
  for (const auto& [name, t] : ck.tensors()) {
    INFO(name);
    const auto& u = back.at(name);
    CHECK(u.type == t.type);
    CHECK(u.shape == t.shape);
    CHECK(u.bytes == t.bytes);
  }
  CHECK(back.to_bytes() == ck.to_bytes());

  // Typed: a float NaN payload and a bf16 signalling NaN survive put/get (no conversion through float).
  xt::xtensor<float, 2> f = {{std::bit_cast<float>(0x7F800001u), -0.0f}, {std::bit_cast<float>(0xFFC12345u), 1e-45f}};
  xt::xtensor<mixprec::bfloat16, 1> h = {mixprec::bfloat16::from_bits(0x7F81), mixprec::bfloat16::from_bits(0x8001)};
  checkpoint typed;
  typed.put("f", f);
  typed.put("h", h);
  const checkpoint typed_back = parse(typed.to_bytes());
  const auto f2 = typed_back.get<float, 2>("f");
  for (std::size_t i = 0; i < f.size(); ++i)
    CHECK(std::bit_cast<std::uint32_t>(f2.data()[i]) == std::bit_cast<std::uint32_t>(f.data()[i]));
  const auto h2 = typed_back.get<mixprec::bfloat16, 1>("h");
  CHECK(h2(0).bits() == 0x7F81);
  CHECK(h2(1).bits() == 0x8001);
  std::vector<float> into(4);
  typed_back.get_into<float>("f", into);
  CHECK(std::bit_cast<std::uint32_t>(into[0]) == 0x7F800001u);
}

TEST_CASE("0-rank and empty tensors", "[safetensors]") {
  const std::string header = R"({"e":{"dtype":"F16","shape":[3,0],"data_offsets":[0,0]},)"
                             R"("s":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})";
  const checkpoint ck = parse(file_image(header, {0x2A, 0, 0, 0}));
  CHECK(ck.get_scalar<std::int32_t>("s") == 42);
  const auto e = ck.get<mixprec::float16, 2>("e");
  CHECK(e.shape()[0] == 3);
  CHECK(e.shape()[1] == 0);
  CHECK(e.size() == 0);
}

TEST_CASE("malformed files give safetensors_error naming the file and the tensor", "[safetensors]") {
  const bytes four_floats(16, 0);
  const auto check = [](const bytes& file, const std::string& needle) {
    INFO(needle);
    REQUIRE_ST_ERROR(parse(file), Contains("<memory>") && Contains(needle));
  };
  SECTION("truncated before the header length") { check(bytes{1, 2, 3}, "truncated"); }
  SECTION("header length beyond the file") {
    bytes f = file_image("{}", {});
    f[0] = 200;
    check(f, "beyond the end of the file");
  }
  SECTION("header length beyond the limit") {
    bytes f = {0x01, 0xE1, 0xF5, 0x05, 0, 0, 0, 0};  // 100,000,001
    check(f, "exceeds the limit");
  }
  SECTION("header does not start with {") { check(file_image(" {}", {}), "start with '{'"); }
  SECTION("bad JSON") { check(file_image(R"({"a":{"dtype":"F32",)", {}), "not valid JSON"); }
  SECTION("invalid UTF-8") { check(file_image("{\"\xC3\x28\":1}", {}), "not valid JSON"); }
  SECTION("not an object") { check(file_image("[1,2]", {}), "start with '{'"); }
  SECTION("entry not an object") { check(file_image(R"({"w":3})", {}), "tensor \"w\": the entry is not an object"); }
  SECTION("missing dtype") {
    check(file_image(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", four_floats), "tensor \"w\": missing \"dtype\"");
  }
  SECTION("missing shape") {
    check(file_image(R"({"w":{"dtype":"F32","data_offsets":[0,16]}})", four_floats), "tensor \"w\": missing \"shape\"");
  }
  SECTION("missing data_offsets") {
    check(file_image(R"({"w":{"dtype":"F32","shape":[4]}})", four_floats), "tensor \"w\": missing \"data_offsets\"");
  }
  SECTION("ill-typed fields") {
    check(file_image(R"({"w":{"dtype":32,"shape":[4],"data_offsets":[0,16]}})", four_floats), "tensor \"w\"");
    check(file_image(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", four_floats),
          "not a non-negative integer");
    check(file_image(R"({"w":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]}})", four_floats),
          "not a non-negative integer");
    check(file_image(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,16]}})", four_floats), "not an array");
    check(file_image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", four_floats),
          "tensor \"w\": \"data_offsets\"");
    check(file_image(R"({"__metadata__":{"a":1}})", {}), "__metadata__");
    check(file_image(R"({"__metadata__":[]})", {}), "__metadata__");
  }
  SECTION("unknown dtype") {
    check(file_image(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", four_floats),
          "tensor \"w\": unknown dtype \"F128\"");
  }
  SECTION("offsets beyond the buffer") {
    check(file_image(R"({"w":{"dtype":"F32","shape":[5],"data_offsets":[0,20]}})", four_floats),
          "tensor \"w\": data_offsets [0, 20) go beyond the buffer");
  }
  SECTION("end before begin") {
    check(file_image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", four_floats),
          "tensor \"w\": data_offsets [8, 4) end before begin");
  }
  SECTION("a hole") {
    check(file_image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[4,16]}})", four_floats),
          "tensor \"w\": data_offsets [4, 16) leave a hole of 4 bytes");
  }
  SECTION("an overlap") {
    check(file_image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                     four_floats),
          "tensor \"b\": data_offsets [8, 16) overlap tensor \"a\"");
  }
  SECTION("size != product(shape) * itemsize") {
    check(file_image(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", four_floats),
          "tensor \"w\": data_offsets [0, 16) hold 16 bytes, but shape [2, 3] of F32 needs 24");
  }
  SECTION("shape product overflows") {
    check(file_image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", four_floats),
          "overflows");
  }
  SECTION("duplicate tensor names") {
    check(file_image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                     four_floats),
          "duplicate key \"w\"");
  }
  SECTION("duplicate fields inside an entry") {
    check(file_image(R"({"w":{"dtype":"F32","dtype":"F32","shape":[4],"data_offsets":[0,16]}})", four_floats),
          "duplicate key \"dtype\" in the entry of \"w\"");
  }
  SECTION("trailing bytes") {
    check(file_image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", four_floats), "4 trailing bytes");
    check(file_image("{}", {0}), "1 trailing bytes");
  }
  SECTION("trailing JSON after the object") { check(file_image(R"({} {})", {}), "not valid JSON"); }
}

TEST_CASE("a malformed file on disk is named by its path", "[safetensors]") {
  const auto path = temp_path("truncated.safetensors");
  {
    checkpoint ck;
    ck.put("layer.kernel", xt::xtensor<float, 2>{{1.0f, 2.0f}});
    bytes b = ck.to_bytes();
    b.pop_back();  // cut the last byte of the buffer
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  REQUIRE_ST_ERROR(checkpoint::load(path),
                   Contains(path.string()) && Contains("tensor \"layer.kernel\"") && Contains("beyond the buffer"));
  std::filesystem::remove(path);
  REQUIRE_ST_ERROR(checkpoint::load(path), Contains(path.string()) && Contains("cannot open"));
}

TEST_CASE("get checks the name, the dtype and the rank", "[safetensors]") {
  checkpoint ck;
  ck.put("w", xt::xtensor<float, 2>{{1.0f, 2.0f}});
  REQUIRE_ST_ERROR((ck.get<float, 2>("nope")), Contains("no tensor \"nope\""));
  REQUIRE_ST_ERROR((ck.get<double, 2>("w")),
                   Contains("tensor \"w\": stored as F32 (float32), requested F64 (float64)"));
  REQUIRE_ST_ERROR((ck.get<mixprec::float8_e4m3fn, 2>("w")), Contains("requested F8_E4M3"));
  REQUIRE_ST_ERROR((ck.get<float, 1>("w")), Contains("tensor \"w\": rank 2"));
  std::vector<float> three(3);
  REQUIRE_ST_ERROR(ck.get_into<float>("w", three), Contains("2 elements"));
  REQUIRE_ST_ERROR(ck.get_scalar<float>("w"), Contains("0-rank"));
  REQUIRE_ST_ERROR(ck.put_bytes("x", dtype::float32, {3}, bytes(8)), Contains("tensor \"x\""));
  REQUIRE_ST_ERROR(ck.put_bytes("x", dtype::complex64, {1}, bytes(8)), Contains("complex64"));
  // A BOOL byte other than 0/1 is refused by the typed getter.
  const checkpoint b = parse(file_image(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", {1, 2}));
  REQUIRE_ST_ERROR((b.get<bool, 1>("m")), Contains("tensor \"m\": BOOL element 1"));
}

}  // namespace safetensors_test
