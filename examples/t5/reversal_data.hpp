/// \file
/// \brief The data of the t5 example: a character vocabulary with T5's special tokens, and the
/// sequence-to-sequence task "write the encoder's text reversed", on chunks of tinyshakespeare.
///
/// **Vocabulary.** Ids 0, 1, 2 are the special tokens pad, bos (the decoder's start token) and eos; the
/// distinct bytes of the text follow in increasing order (nanoGPT's shakespeare_char order), so for
/// tinyshakespeare (65 distinct bytes) the vocabulary has 68 ids.
///
/// **Split.** As nanoGPT's `prepare.py`: the first int(0.9 n) bytes of the text are the training split,
/// the rest the validation split; no chunk crosses the boundary, so every validation chunk is text the
/// model never saw.
///
/// **Examples.** A chunk is `len` consecutive bytes of a split (newlines included), `len` uniform in
/// [min_chars, max_chars]. Its example, T5-style:
///
///     encoder input   c_0 c_1 ... c_{n-1} eos                      (n + 1 ids, then pad)
///     decoder input   bos c_{n-1} ... c_1 c_0                      (n + 1 ids, then pad)
///     targets         c_{n-1} ... c_1 c_0 eos                      (n + 1 ids, then nn::ignore_index)
///
/// A batch pads every row to its longest row (right padding); the encoder's key padding mask marks the
/// real ids (true) and the targets of padding positions are `nn::ignore_index`, so the loss ignores them.
/// The decoder needs no key mask: with right padding its causal mask already hides the padding from every
/// real position.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/nn/cross_entropy.hpp"

namespace t5_example {

/// Token ids [batch, seq], row-major.
using id_matrix = xt::xtensor<std::int32_t, 2>;
/// A key padding mask [batch, seq]: true for a real token, false for padding.
using mask_matrix = xt::xtensor<bool, 2>;

/// One batch of the reversal task (see the file comment). All four arrays are row-major.
struct seq2seq_batch {
  id_matrix encoder_ids;           ///< [B, S]: the chunk and eos, then pad
  mask_matrix encoder_mask;        ///< [B, S]: true on the chunk and its eos
  id_matrix decoder_ids;           ///< [B, T]: bos and the reversed chunk, then pad
  id_matrix targets;               ///< [B, T]: the reversed chunk and eos, then nn::ignore_index
  std::vector<std::string> texts;  ///< the B chunks, as text
  std::size_t target_count = 0;    ///< targets that are not ignore_index (the loss's N)
  std::size_t real_tokens = 0;     ///< non-padding encoder and decoder input ids (throughput)
};

namespace detail {
/// A uniform integer in [0, n) from a 64-bit engine, by rejection (unbiased; n >= 1): the same draws on
/// every standard library, unlike `std::uniform_int_distribution`.
[[nodiscard]] inline std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - (max % n + 1) % n;  // the largest multiple of n, minus 1
  for (;;) {
    const std::uint64_t r = rng();
    if (r <= limit) return r % n;
  }
}
}  // namespace detail

/// Which part of the text (see the file comment).
enum class split { train, val };

/// The text, its vocabulary and the examples of the reversal task.
class reversal_data {
 public:
  static constexpr std::int32_t pad = 0;            ///< padding (T5's id 0)
  static constexpr std::int32_t bos = 1;            ///< the decoder's start token
  static constexpr std::int32_t eos = 2;            ///< end of sequence (T5's id 1)
  static constexpr std::size_t special_tokens = 3;  ///< ids before the first byte
  /// The fraction of the text that is the training split (nanoGPT's `prepare.py`).
  static constexpr double train_fraction = 0.9;

  /// Prepares `text` for chunks of [min_chars, max_chars] bytes. `source` names it in messages.
  /// \throws std::invalid_argument when min_chars is 0 or above max_chars, or either split is not longer
  ///         than max_chars.
  reversal_data(std::string_view text, std::size_t min_chars, std::size_t max_chars, std::string source = "<text>")
      : source_(std::move(source)), min_chars_(min_chars), max_chars_(max_chars) {
    if (min_chars_ == 0 || min_chars_ > max_chars_) {
      throw std::invalid_argument("the chunk lengths [" + std::to_string(min_chars_) + ", " +
                                  std::to_string(max_chars_) +
                                  "] are empty or start at 0: pass 1 <= --min-chars <= --max-chars");
    }
    std::array<bool, 256> seen{};
    for (const char c : text) seen[static_cast<unsigned char>(c)] = true;
    index_.fill(-1);
    for (std::size_t b = 0; b < seen.size(); ++b) {
      if (!seen[b]) continue;
      index_[b] = static_cast<std::int32_t>(special_tokens + bytes_.size());
      bytes_ += static_cast<char>(static_cast<unsigned char>(b));
    }
    text_.assign(text.begin(), text.end());
    n_train_ = static_cast<std::size_t>(train_fraction * static_cast<double>(text_.size()));
    for (const split s : {split::train, split::val}) {
      if (part(s).size() <= max_chars_) {
        throw std::invalid_argument("the " + std::string(s == split::train ? "training" : "validation") +
                                    " split of '" + source_ + "' has " + std::to_string(part(s).size()) +
                                    " bytes, not more than --max-chars " + std::to_string(max_chars_) +
                                    ": use a longer text or shorter chunks");
      }
    }
  }

  /// Reads the file `path` (as bytes) and prepares it.
  /// \throws std::runtime_error naming the path if it is not a readable file; as the constructor.
  [[nodiscard]] static reversal_data from_file(const std::filesystem::path& path, std::size_t min_chars,
                                               std::size_t max_chars) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      throw std::runtime_error("the text '" + path.string() +
                               "' does not exist or is not a file: pass an existing text file with --data FILE");
    }
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && !in.eof()) throw std::runtime_error("cannot read the text '" + path.string() + "'");
    return reversal_data(text, min_chars, max_chars, path.string());
  }

  /// Where the text came from.
  [[nodiscard]] const std::string& source() const noexcept { return source_; }
  /// The number of ids: the special tokens and the distinct bytes of the text.
  [[nodiscard]] std::size_t vocab_size() const noexcept { return special_tokens + bytes_.size(); }
  /// The distinct bytes of the text in increasing order (byte i has id special_tokens + i).
  [[nodiscard]] const std::string& bytes() const noexcept { return bytes_; }
  /// The shortest chunk.
  [[nodiscard]] std::size_t min_chars() const noexcept { return min_chars_; }
  /// The longest chunk.
  [[nodiscard]] std::size_t max_chars() const noexcept { return max_chars_; }
  /// The longest encoder input, decoder input or target row: max_chars + 1 (eos, or bos).
  [[nodiscard]] std::size_t max_sequence() const noexcept { return max_chars_ + 1; }

  /// The id of byte `c`. \throws std::invalid_argument if `c` is not in the text.
  [[nodiscard]] std::int32_t encode(char c) const {
    const std::int32_t id = index_[static_cast<unsigned char>(c)];
    if (id < 0) throw std::invalid_argument("a byte of the input is not in the vocabulary of '" + source_ + "'");
    return id;
  }

  /// The text of `ids`, stopping at the first eos; special ids other than eos print as '?'.
  [[nodiscard]] std::string decode(std::span<const std::int32_t> ids) const {
    std::string out;
    for (const std::int32_t id : ids) {
      if (id == eos) break;
      const bool byte = id >= static_cast<std::int32_t>(special_tokens) && static_cast<std::size_t>(id) < vocab_size();
      out += byte ? bytes_[static_cast<std::size_t>(id) - special_tokens] : '?';
    }
    return out;
  }

  /// `batch` random chunks of split `s`: each a uniform length in [min_chars, max_chars] at a uniform
  /// offset of the split. Advances `rng` by 2 draws per chunk (or more on a rejection).
  /// \throws std::invalid_argument when batch is 0.
  [[nodiscard]] std::vector<std::string> sample_texts(split s, std::size_t batch, std::mt19937_64& rng) const {
    if (batch == 0) throw std::invalid_argument("reversal_data::sample_texts: batch must be at least 1");
    const std::string_view d = part(s);
    std::vector<std::string> texts;
    texts.reserve(batch);
    for (std::size_t b = 0; b < batch; ++b) {
      const std::size_t len = min_chars_ + detail::uniform_below(rng, max_chars_ - min_chars_ + 1);
      const std::size_t at = detail::uniform_below(rng, d.size() - len + 1);
      texts.emplace_back(d.substr(at, len));
    }
    return texts;
  }

  /// `make_batch(sample_texts(s, batch, rng))`.
  /// \throws std::invalid_argument when batch is 0.
  [[nodiscard]] seq2seq_batch sample(split s, std::size_t batch, std::mt19937_64& rng) const {
    return make_batch(sample_texts(s, batch, rng));
  }

  /// The fixed validation set: `count` chunks of the validation split, the i-th at offset
  /// i · (len_v − max_chars) / count (spread evenly over the split), with lengths drawn from a
  /// `std::mt19937_64` seeded with `seed`. The same chunks for every policy and run.
  [[nodiscard]] std::vector<std::string> validation_texts(std::size_t count, std::uint64_t seed) const {
    const std::string_view d = part(split::val);
    std::mt19937_64 rng(seed);
    std::vector<std::string> texts;
    texts.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t len = min_chars_ + detail::uniform_below(rng, max_chars_ - min_chars_ + 1);
      const std::size_t at = i * (d.size() - max_chars_) / count;
      texts.emplace_back(d.substr(at, len));
    }
    return texts;
  }

  /// The examples of `texts` as one batch, padded to its longest row (see the file comment).
  /// \throws std::invalid_argument when `texts` is empty, or a text is empty or holds a byte outside
  ///         the vocabulary.
  [[nodiscard]] seq2seq_batch make_batch(std::vector<std::string> texts) const {
    if (texts.empty()) throw std::invalid_argument("reversal_data::make_batch: no texts");
    std::size_t longest = 0;
    for (const auto& t : texts) {
      if (t.empty()) throw std::invalid_argument("reversal_data::make_batch: an empty text has nothing to reverse");
      longest = std::max(longest, t.size());
    }
    const std::size_t rows = texts.size();
    const std::size_t seq = longest + 1;
    seq2seq_batch out{id_matrix::from_shape({rows, seq}),
                      mask_matrix::from_shape({rows, seq}),
                      id_matrix::from_shape({rows, seq}),
                      id_matrix::from_shape({rows, seq}),
                      {},
                      0,
                      0};
    out.encoder_ids.fill(pad);
    out.encoder_mask.fill(false);
    out.decoder_ids.fill(pad);
    out.targets.fill(mixprec::nn::ignore_index);
    for (std::size_t b = 0; b < rows; ++b) {
      const std::string& t = texts[b];
      const std::size_t n = t.size();
      for (std::size_t i = 0; i < n; ++i) {
        const std::int32_t id = encode(t[i]);
        out.encoder_ids(b, i) = id;
        out.decoder_ids(b, n - i) = id;  // position n - i of [bos, c_{n-1}, ..., c_0]
        out.targets(b, n - 1 - i) = id;  // position n - 1 - i of [c_{n-1}, ..., c_0, eos]
      }
      out.encoder_ids(b, n) = eos;
      out.decoder_ids(b, 0) = bos;
      out.targets(b, n) = eos;
      for (std::size_t i = 0; i <= n; ++i) out.encoder_mask(b, i) = true;
      out.target_count += n + 1;
      out.real_tokens += 2 * (n + 1);
    }
    out.texts = std::move(texts);
    return out;
  }

 private:
  /// The bytes of split `s`.
  [[nodiscard]] std::string_view part(split s) const noexcept {
    const std::string_view all(text_);
    return s == split::train ? all.substr(0, n_train_) : all.substr(n_train_);
  }

  std::string source_;
  std::size_t min_chars_ = 0, max_chars_ = 0;
  std::string bytes_;
  std::array<std::int32_t, 256> index_{};  ///< byte -> id, -1 when absent
  std::string text_;
  std::size_t n_train_ = 0;
};

}  // namespace t5_example
