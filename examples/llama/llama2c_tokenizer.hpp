/// \file
/// \brief Reader and decoder for llama2.c tokenizer files (`tokenizer.bin`, `tok512.bin`).
///
/// File layout (little-endian; karpathy/llama2.c run.c `build_tokenizer`, tokenizer.py `export`):
/// int32 max_token_length, then for each of the vocab_size tokens: float32 score, int32 byte length, the
/// piece's raw bytes (no terminator). The vocabulary size is not in the file: it is the model's
/// (checkpoint header), passed in.
///
/// Decoding follows run.c's `decode` and `safe_printf` (karpathy/llama2.c, run.c at HEAD 350e04fe):
///  1. after BOS (token 1) a piece's leading space is dropped (sentencepiece behaviour, llama2.c PR #89);
///  2. a piece spelled `<0xXX>` stands for the single raw byte 0xXX;
///  3. printing: an empty piece prints nothing; a one-byte piece prints only when the byte is printable or
///     whitespace (C-locale isprint || isspace); longer pieces print as they are, up to a NUL byte (printf "%s").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "llama2c_file.hpp"

namespace llama2c {

/// The vocabulary of a llama2.c model: pieces (raw bytes) and their merge scores.
class tokenizer {
 public:
  /// Begin-of-sequence token id (sentencepiece's `<s>`; run.c starts generation from it).
  static constexpr int bos = 1;
  /// End-of-sequence token id (`</s>`).
  static constexpr int eos = 2;

  /// Builds a tokenizer from pieces and scores of equal length (what `read_tokenizer` does after parsing).
  /// \throws std::invalid_argument when the sizes differ, the vocabulary is empty, or max_token_length <= 0.
  tokenizer(std::vector<std::string> pieces, std::vector<float> scores, int max_token_length)
      : pieces_(std::move(pieces)), scores_(std::move(scores)), max_token_length_(max_token_length) {
    if (pieces_.empty() || pieces_.size() != scores_.size()) {
      throw std::invalid_argument("llama2c::tokenizer: need as many scores as pieces, and at least one piece (got " +
                                  std::to_string(pieces_.size()) + " pieces, " + std::to_string(scores_.size()) +
                                  " scores)");
    }
    if (max_token_length_ <= 0) {
      throw std::invalid_argument("llama2c::tokenizer: max_token_length must be positive, got " +
                                  std::to_string(max_token_length_));
    }
  }

  /// Number of tokens.
  [[nodiscard]] int vocab_size() const noexcept { return static_cast<int>(pieces_.size()); }
  /// The longest piece's length in bytes, as stored in the file.
  [[nodiscard]] int max_token_length() const noexcept { return max_token_length_; }

  /// Token `token`'s piece exactly as stored (e.g. "<0x0A>", " the", "\n<s>\n").
  /// \throws std::out_of_range when `token` is not in [0, vocab_size).
  [[nodiscard]] std::string_view piece(int token) const { return pieces_[checked(token)]; }
  /// Token `token`'s BPE merge score.
  /// \throws std::out_of_range when `token` is not in [0, vocab_size).
  [[nodiscard]] float score(int token) const { return scores_[checked(token)]; }

  /// The bytes token `token` stands for when it follows `prev_token` (run.c `decode`): the piece without
  /// its leading space when `prev_token` is BOS; the single raw byte 0xXX when the piece is `<0xXX>`
  /// (two hex digits, either case); otherwise the piece itself. The result may be unprintable (see
  /// `printable`). The view stays valid as long as the tokenizer.
  /// \throws std::out_of_range when `token` is not in [0, vocab_size). `prev_token` is only compared to BOS.
  [[nodiscard]] std::string_view decode(int prev_token, int token) const {
    std::string_view p = piece(token);
    if (prev_token == bos && !p.empty() && p.front() == ' ') p.remove_prefix(1);
    if (const int byte = raw_byte(p); byte >= 0) {
      return std::string_view(&byte_pieces()[static_cast<std::size_t>(byte)], 1);
    }
    return p;
  }

  /// What run.c's `safe_printf(piece)` writes: nothing for an empty piece or a single byte that is neither
  /// printable nor whitespace in the C locale (control codes, bytes >= 0x80); otherwise the piece up to its
  /// first NUL byte (printf's "%s").
  [[nodiscard]] static constexpr std::string_view printable(std::string_view piece) noexcept {
    piece = piece.substr(0, piece.find('\0'));
    if (piece.size() == 1 && !c_isprint_or_isspace(static_cast<unsigned char>(piece[0]))) return {};
    return piece;
  }

  /// The text run.c prints for the generated `tokens` (without its final "\n"): the concatenation of
  /// `printable(decode(prev, token))` where `prev` is the token before (`prev_token` for the first one).
  /// \throws std::out_of_range when a token is not in [0, vocab_size).
  [[nodiscard]] std::string decode_text(std::span<const int> tokens, int prev_token = bos) const {
    std::string out;
    for (const int token : tokens) {
      out += printable(decode(prev_token, token));
      prev_token = token;
    }
    return out;
  }

  /// The byte a piece spelled exactly `<0xXX>` stands for, or -1 for any other piece.
  ///
  /// run.c tests `sscanf(piece, "<0x%02hhX>", &byte) == 1`, which also accepts a few malformed spellings
  /// ("<0xA", "<0x 7>"); no llama2.c tokenizer contains those, and we accept only the exact form.
  [[nodiscard]] static constexpr int raw_byte(std::string_view p) noexcept {
    if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
    const int hi = hex_digit(p[3]), lo = hex_digit(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }

 private:
  [[nodiscard]] std::size_t checked(int token) const {
    if (token < 0 || token >= vocab_size()) {
      throw std::out_of_range("llama2c::tokenizer: token " + std::to_string(token) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size()) + ")");
    }
    return static_cast<std::size_t>(token);
  }

  [[nodiscard]] static constexpr int hex_digit(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  /// C-locale isprint (0x20..0x7E) or isspace (' ', \t, \n, \v, \f, \r): run.c never calls setlocale, so its
  /// <ctype.h> tests run in the "C" locale.
  [[nodiscard]] static constexpr bool c_isprint_or_isspace(unsigned char b) noexcept {
    return (b >= 0x20 && b <= 0x7e) || b == ' ' || (b >= '\t' && b <= '\r');
  }

  /// 256 one-byte strings, byte_pieces()[b] == b.
  [[nodiscard]] static const std::array<char, 256>& byte_pieces() noexcept {
    static const std::array<char, 256> table = [] {
      std::array<char, 256> t{};
      for (std::size_t b = 0; b < t.size(); ++b) t[b] = static_cast<char>(static_cast<unsigned char>(b));
      return t;
    }();
    return table;
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  int max_token_length_;
};

/// Reads a llama2.c tokenizer file holding `vocab_size` tokens (the model's vocab_size, from its checkpoint).
///
/// Every length is checked against the bytes left before anything is allocated.
///
/// \throws std::invalid_argument when `vocab_size <= 0`.
/// \throws file_error (message `"<path>: <problem>"`) when the file is missing or not a regular file; too
///   short for vocab_size tokens ("truncated", naming the token); max_token_length <= 0; a piece length that
///   is negative or exceeds max_token_length ("corrupt"); bytes left after the last token ("trailing data":
///   the tokenizer has more tokens than the model's vocab_size).
///
/// **Example**:
///
///     const auto ck = llama2c::read_checkpoint("stories260K.bin");
///     const auto tok = llama2c::read_tokenizer("tok512.bin", ck.config.vocab_size);
///     std::string text = tok.decode_text(generated_tokens);   // as run.c prints it
[[nodiscard]] inline tokenizer read_tokenizer(const std::filesystem::path& path, int vocab_size) {
  if (vocab_size <= 0) {
    throw std::invalid_argument("llama2c::read_tokenizer(" + path.string() +
                                "): vocab_size must be positive (pass the checkpoint's config.vocab_size), got " +
                                std::to_string(vocab_size));
  }
  detail::binary_file file(path, "tokenizer");
  const auto n = static_cast<std::uint64_t>(vocab_size);
  // The smallest file holding vocab_size tokens: 4 bytes of max_token_length + 8 per token (score, length).
  if (file.size() < 4 + 8 * n) {
    throw file_error(path, "truncated: " + std::to_string(vocab_size) + " tokens need at least " +
                               std::to_string(4 + 8 * n) + " bytes, the file has " + std::to_string(file.size()) +
                               " (is vocab_size the model's?)");
  }
  const auto max_len = static_cast<std::int32_t>(file.read_u32("max_token_length"));
  if (max_len <= 0) {
    throw file_error(path, "corrupt: max_token_length = " + std::to_string(max_len) + " must be positive");
  }
  std::vector<std::string> pieces;
  std::vector<float> scores;
  pieces.reserve(n);
  scores.reserve(n);
  for (int i = 0; i < vocab_size; ++i) {
    const std::string where = "token " + std::to_string(i) + " of " + std::to_string(vocab_size);
    const std::uint32_t score_bits = file.read_u32(where + " (score)");
    float score = 0;
    std::memcpy(&score, &score_bits, sizeof score);
    const auto len = static_cast<std::int32_t>(file.read_u32(where + " (length)"));
    if (len < 0 || len > max_len) {
      throw file_error(path, "corrupt: " + where + " has length " + std::to_string(len) + ", outside [0, " +
                                 std::to_string(max_len) + "] (max_token_length)");
    }
    file.require(static_cast<std::uint64_t>(len), where + " (bytes)");  // before allocating the piece
    std::string bytes(static_cast<std::size_t>(len), '\0');
    file.read(bytes.data(), static_cast<std::uint64_t>(len), where + " (bytes)");
    pieces.push_back(std::move(bytes));
    scores.push_back(score);
  }
  if (file.remaining() != 0) {
    throw file_error(path, "trailing data: " + std::to_string(file.remaining()) + " bytes after the " +
                               std::to_string(vocab_size) +
                               " tokens expected (does the tokenizer belong to this model? its vocab_size is " +
                               std::to_string(vocab_size) + ")");
  }
  return tokenizer(std::move(pieces), std::move(scores), max_len);
}

}  // namespace llama2c
