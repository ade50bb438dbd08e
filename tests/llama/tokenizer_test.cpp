// llama2c_tokenizer.hpp: a tokenizer file written here byte by byte, run.c's decode / safe_printf rules
// (karpathy/llama2.c run.c `decode`, `safe_printf`), every error path, and the real tok512.bin against
// SOURCE.md's description (512 tokens, max length 7, <unk>/<s>/</s>, byte tokens 3..258).
#include "llama/llama2c_tokenizer.hpp"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "data.hpp"
#include "support/allocation_counter.hpp"
#include "test_files.hpp"

namespace {

using namespace std::string_literals;
using Catch::Matchers::Contains;
using llama_test::put_f32;
using llama_test::put_i32;
using llama_test::temp_file;

const std::vector<std::string> tiny_pieces{
    "<unk>",         // 0
    "\n<s>\n",       // 1 BOS
    "\n</s>\n",      // 2 EOS
    "<0x0A>",        // 3 raw byte '\n'
    "<0x07>",        // 4 raw byte BEL (unprintable)
    "<0x41>",        // 5 raw byte 'A'
    "<0x00>",        // 6 raw byte NUL
    "<0xe9>",        // 7 raw byte 0xE9, lowercase hex (not printable in the C locale)
    " hello",        // 8
    "x",             // 9
    " ",             // 10
    "\x07",          // 11 a one-byte piece that is a control code
    "\xe2\x80\x8a",  // 12 a 3-byte UTF-8 piece (U+200A)
    "<0xZZ>",        // 13 looks like a byte token but is not
    "",              // 14 empty piece
};
constexpr std::int32_t tiny_max_len = 6;
float tiny_score(std::size_t i) { return -1.5f * static_cast<float>(i); }

std::string tokenizer_bytes(std::int32_t max_len, const std::vector<std::string>& pieces) {
  std::string bytes;
  put_i32(bytes, max_len);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    put_f32(bytes, tiny_score(i));
    put_i32(bytes, static_cast<std::int32_t>(pieces[i].size()));
    bytes += pieces[i];
  }
  return bytes;
}

llama2c::tokenizer tiny() {
  return llama2c::tokenizer(
      tiny_pieces,
      [] {
        std::vector<float> s;
        for (std::size_t i = 0; i < tiny_pieces.size(); ++i) s.push_back(tiny_score(i));
        return s;
      }(),
      tiny_max_len);
}

void check_rejects(const std::string& contents, int vocab_size, const std::string& problem) {
  const temp_file f("tokenizer", contents);
  INFO("expected problem: " << problem);
  CHECK_THROWS_AS(llama2c::read_tokenizer(f.path(), vocab_size), llama2c::file_error);
  CHECK_THROWS_WITH(llama2c::read_tokenizer(f.path(), vocab_size), Contains(f.path().string()) && Contains(problem));
}

}  // namespace

TEST_CASE("read_tokenizer reads back a tokenizer file written byte by byte", "[llama][tokenizer]") {
  const temp_file f("tiny", tokenizer_bytes(tiny_max_len, tiny_pieces));
  const auto tok = llama2c::read_tokenizer(f.path(), static_cast<int>(tiny_pieces.size()));
  CHECK(tok.vocab_size() == 15);
  CHECK(tok.max_token_length() == 6);
  for (std::size_t i = 0; i < tiny_pieces.size(); ++i) {
    INFO("token " << i);
    CHECK(tok.piece(static_cast<int>(i)) == tiny_pieces[i]);
    CHECK(tok.score(static_cast<int>(i)) == tiny_score(i));
  }
  CHECK_THROWS_AS(tok.piece(15), std::out_of_range);
  CHECK_THROWS_AS(tok.score(-1), std::out_of_range);
}

TEST_CASE("decode drops a leading space after BOS and turns <0xXX> pieces into raw bytes, as run.c",
          "[llama][tokenizer]") {
  const auto tok = tiny();
  CHECK(tok.decode(9, 8) == " hello");
  CHECK(tok.decode(llama2c::tokenizer::bos, 8) == "hello");  // run.c: prev_token == 1 && piece[0] == ' '
  CHECK(tok.decode(llama2c::tokenizer::bos, 10).empty());
  CHECK(tok.decode(9, 10) == " ");
  CHECK(tok.decode(llama2c::tokenizer::bos, 9) == "x");
  CHECK(tok.decode(9, 3) == "\n");
  CHECK(tok.decode(9, 4) == "\x07");
  CHECK(tok.decode(9, 5) == "A");
  CHECK(tok.decode(9, 6) == "\0"s);  // one NUL byte
  CHECK(tok.decode(9, 7) == "\xe9");
  CHECK(tok.decode(9, 13) == "<0xZZ>");
  CHECK(tok.decode(9, 14).empty());
  CHECK_THROWS_AS(tok.decode(9, 15), std::out_of_range);
  CHECK_THROWS_WITH(tok.decode(9, -1), Contains("token -1 is outside the vocabulary [0, 15)"));

  CHECK(llama2c::tokenizer::raw_byte("<0x0A>") == 10);
  CHECK(llama2c::tokenizer::raw_byte("<0xff>") == 255);
  CHECK(llama2c::tokenizer::raw_byte("<0xFF>") == 255);
  CHECK(llama2c::tokenizer::raw_byte("<0xFF") == -1);
  CHECK(llama2c::tokenizer::raw_byte("<0x0A>x") == -1);
  CHECK(llama2c::tokenizer::raw_byte("<0xG0>") == -1);
  CHECK(llama2c::tokenizer::raw_byte(" <0x0A>") == -1);
}

TEST_CASE("printable skips what run.c's safe_printf skips", "[llama][tokenizer]") {
  using llama2c::tokenizer;
  CHECK(tokenizer::printable("").empty());
  CHECK(tokenizer::printable("\0"s).empty());
  CHECK(tokenizer::printable("\x07").empty());  // control code
  CHECK(tokenizer::printable("\x7f").empty());  // DEL
  CHECK(tokenizer::printable("\xe9").empty());  // not printable in the C locale
  CHECK(tokenizer::printable("A") == "A");
  CHECK(tokenizer::printable("~") == "~");
  for (const char* ws : {" ", "\t", "\n", "\v", "\f", "\r"}) CHECK(tokenizer::printable(ws) == ws);
  CHECK(tokenizer::printable("\xe2\x80\x8a") == "\xe2\x80\x8a");  // only single bytes are filtered
  CHECK(tokenizer::printable("\x07\x07") == "\x07\x07");
  CHECK(tokenizer::printable("ab\0cd"s) == "ab");  // printf("%s") stops at NUL
  CHECK(tokenizer::printable("\0cd"s).empty());
}

TEST_CASE("decode_text concatenates the printable decoded pieces", "[llama][tokenizer]") {
  const auto tok = tiny();
  const std::vector<int> tokens{8, 3, 8, 4, 5, 6, 7, 12, 10, 9};
  CHECK(tok.decode_text(tokens) == "hello\n helloA\xe2\x80\x8a x");
  CHECK(tok.decode_text(tokens, 9) == " hello\n helloA\xe2\x80\x8a x");
  const std::vector<int> after_bos{1, 8};  // a BOS inside the sequence strips the next piece's space too
  CHECK(tok.decode_text(after_bos, 9) == "\n<s>\nhello");
  CHECK(tok.decode_text(std::vector<int>{}).empty());
  CHECK_THROWS_AS(tok.decode_text(std::vector<int>{8, 99}), std::out_of_range);
}

TEST_CASE("read_tokenizer names the file and the problem for bad files", "[llama][tokenizer]") {
  const std::string good = tokenizer_bytes(tiny_max_len, tiny_pieces);
  const int n = static_cast<int>(tiny_pieces.size());

  SECTION("a non-positive vocab_size is a caller error") {
    const temp_file f("tokenizer", good);
    CHECK_THROWS_AS(llama2c::read_tokenizer(f.path(), 0), std::invalid_argument);
    CHECK_THROWS_WITH(llama2c::read_tokenizer(f.path(), -3), Contains("vocab_size must be positive"));
  }
  SECTION("missing file or a directory") {
    const auto missing = std::filesystem::temp_directory_path() / "mixprec_llama_no_such_tokenizer_4711.bin";
    CHECK_THROWS_WITH(llama2c::read_tokenizer(missing, n), Contains(missing.string()) && Contains("no such file"));
    const auto dir = std::filesystem::temp_directory_path();
    CHECK_THROWS_WITH(llama2c::read_tokenizer(dir, n), Contains(dir.string()) && Contains("not a regular file"));
  }
  SECTION("too short for vocab_size tokens, checked before allocating") {
    check_rejects(good.substr(0, 100), n, "truncated: 15 tokens need at least 124 bytes, the file has 100");
    check_rejects(good, 1000000000, "truncated: 1000000000 tokens need at least 8000000004 bytes");
    check_rejects("", 1, "truncated: 1 tokens need at least 12 bytes, the file has 0");
  }
  SECTION("a bad max_token_length or piece length") {
    check_rejects(tokenizer_bytes(0, tiny_pieces), n, "corrupt: max_token_length = 0 must be positive");
    check_rejects(tokenizer_bytes(-7, tiny_pieces), n, "corrupt: max_token_length = -7 must be positive");
    // tokens 0 and 1 (5 bytes) fit a max_token_length of 5, token 2 "\n</s>\n" (6 bytes) does not
    check_rejects(tokenizer_bytes(5, tiny_pieces), n, "corrupt: token 2 of 15 has length 6, outside [0, 5]");
    std::string negative = tokenizer_bytes(tiny_max_len, {"ab", "cd", "ef"});
    negative.replace(4 + 4, 4, std::string("\xff\xff\xff\xff", 4));  // token 0's length = -1
    check_rejects(negative, 3, "corrupt: token 0 of 3 has length -1, outside [0, 6]");
  }
  SECTION("the file ends inside a token") {
    const std::string three = tokenizer_bytes(tiny_max_len, {"ab", "cd", "efghi"});
    // 4 + 3 * 8 + 2 + 2 + 5 = 37 bytes; cut 3 bytes of the last piece
    REQUIRE(three.size() == 37);
    check_rejects(three.substr(0, 34), 3,
                  "truncated: token 2 of 3 (bytes) needs 5 bytes at offset 32, the file has only 2 left");
    check_rejects(good, n + 1, "truncated: token 15 of 16 (score) needs 4 bytes");
  }
  SECTION("a corrupt piece length is checked against the file before anything is allocated") {
    // Found by the fuzz target llama2c_reader: max_token_length and token 0's length near 2^31 made
    // the reader allocate (and zero) about 1.9 GB before noticing the file is 16 bytes long.
    std::string huge;
    llama_test::put_i32(huge, 0x71717171);  // max_token_length
    llama_test::put_f32(huge, 0.0f);        // token 0: score
    llama_test::put_i32(huge, 0x71717170);  // token 0: length
    huge += "abcd";
    const mixprec_test::allocation_counter counter;
    check_rejects(huge, 1,
                  "truncated: token 0 of 1 (bytes) needs 1903260016 bytes at offset 12, the file has only 4 left");
    CHECK(counter.largest() < (std::size_t{1} << 20));
  }
  SECTION("more tokens in the file than the model's vocabulary") {
    check_rejects(good, n - 1, "trailing data: 8 bytes after the 14 tokens expected");
    check_rejects(good, n - 1, "its vocab_size is 14");
  }
}

TEST_CASE("tok512.bin parses as SOURCE.md describes", "[llama][tokenizer]") {
  const auto path = llama_test::stories260k_dir() / "tok512.bin";
  const auto tok = llama2c::read_tokenizer(path, 512);
  CHECK(tok.vocab_size() == 512);
  CHECK(tok.max_token_length() == 7);
  CHECK(tok.piece(0) == "<unk>");
  CHECK(tok.piece(1) == "\n<s>\n");
  CHECK(tok.piece(2) == "\n</s>\n");
  for (int b = 0; b < 256; ++b) {
    char spelled[8];
    std::snprintf(spelled, sizeof spelled, "<0x%02X>", static_cast<unsigned>(b));
    INFO("byte " << b);
    CHECK(tok.piece(3 + b) == spelled);
    CHECK(tok.decode(9, 3 + b) == std::string(1, static_cast<char>(b)));
  }
  int byte_tokens = 0;
  for (int t = 0; t < 512; ++t) byte_tokens += llama2c::tokenizer::raw_byte(tok.piece(t)) >= 0 ? 1 : 0;
  CHECK(byte_tokens == 256);  // only 3..258 are byte tokens

  // the vocabulary size is not in the file: a wrong one is caught at either end
  CHECK_THROWS_WITH(llama2c::read_tokenizer(path, 511), Contains("trailing data"));
  CHECK_THROWS_WITH(llama2c::read_tokenizer(path, 513), Contains("truncated: token 512 of 513"));
}
