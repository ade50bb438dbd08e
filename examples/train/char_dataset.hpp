/// \file
/// \brief The character-level data of mixprec-train, prepared as nanoGPT's `data/shakespeare_char/prepare.py`
/// prepares tinyshakespeare (TRAINING.md §4): the vocabulary is the sorted set of distinct bytes of the text,
/// a token id is a byte's index in it; the first int(0.9·n) tokens are the training split and the rest the
/// validation split. Batches are drawn as nanoGPT's `get_batch` draws them (B random windows), and the
/// whole validation split is walked as non-overlapping windows for the final loss.
///
/// For tinyshakespeare (data/tinyshakespeare/input.txt, 1,115,394 ASCII bytes): 65 ids, the first three
/// '\n', ' ', '!'; 1,003,854 training and 111,540 validation tokens; at block 64, 1,742 validation windows.
///
/// Token ids are `std::int32_t` (nanoGPT stores uint16; the layers take int32 ids). Batches are
/// `xt::xtensor<std::int32_t, 2>` of shape [B, T], row-major: row b is one window.
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

namespace train_example {

/// Which part of the text: the first int(0.9·n) tokens (`train`) or the rest (`val`).
enum class split { train, val };

/// The name of a split ("train" or "val"), for messages.
[[nodiscard]] constexpr std::string_view split_name(split s) noexcept { return s == split::train ? "train" : "val"; }

/// Token ids of shape [B, T] (row-major, `std::int32_t`).
using id_matrix = xt::xtensor<std::int32_t, 2>;

/// One batch of a language-modelling step: inputs and targets, both [B, T]; for every row b and position t,
/// `y(b, t)` is the token that follows `x(b, t)` in the text (`y(b, t) == x(b, t + 1)` for t < T − 1).
struct token_batch {
  id_matrix x;  ///< [B, T] inputs: d[i_b : i_b + T]
  id_matrix y;  ///< [B, T] targets: d[i_b + 1 : i_b + 1 + T]
};

namespace detail {

/// A uniform integer in [0, n) from a 64-bit engine, by rejection (unbiased; n ≥ 1). Written out instead of
/// `std::uniform_int_distribution`, whose algorithm differs between standard libraries, so that a seed gives
/// the same batches with libstdc++ and libc++.
[[nodiscard]] inline std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - (max % n + 1) % n;  // the largest multiple of n, minus 1; draws above it reject
  for (;;) {
    const std::uint64_t r = rng();
    if (r <= limit) return r % n;
  }
}

}  // namespace detail

/// A character-level dataset: a text's vocabulary, its tokens, and the train/validation split.
/// See the file comment for the conventions (nanoGPT's shakespeare_char `prepare.py`).
class char_dataset {
 public:
  /// The fraction of the tokens that goes to the training split: `int(train_fraction · n)` (Python's
  /// truncation of a double product, as `prepare.py`).
  static constexpr double train_fraction = 0.9;

  /// Prepares `text`: vocabulary, ids, split. `source` names the text in error messages (a file name).
  /// \throws std::runtime_error if `text` is empty.
  explicit char_dataset(std::string_view text, std::string source = "<text>") : source_(std::move(source)) {
    if (text.empty()) throw std::runtime_error("training text '" + source_ + "' is empty: it needs at least one byte");
    std::array<bool, 256> seen{};
    for (const char c : text) seen[static_cast<unsigned char>(c)] = true;
    index_.fill(-1);
    for (std::size_t b = 0; b < seen.size(); ++b) {  // byte order = sorted, as Python's sorted(set(text))
      if (!seen[b]) continue;
      index_[b] = static_cast<std::int32_t>(vocabulary_.size());
      vocabulary_ += static_cast<char>(static_cast<unsigned char>(b));
    }
    ids_.reserve(text.size());
    for (const char c : text) ids_.push_back(index_[static_cast<unsigned char>(c)]);
    n_train_ = static_cast<std::size_t>(train_fraction * static_cast<double>(ids_.size()));
  }

  /// Reads the file `path` (as bytes) and prepares it.
  /// \throws std::runtime_error naming the path if the file does not exist, cannot be read, or is empty.
  [[nodiscard]] static char_dataset from_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      throw std::runtime_error("training text '" + path.string() +
                               "' does not exist or is not a file: pass an existing text file with --data FILE");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open training text '" + path.string() + "' for reading");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw std::runtime_error("error while reading training text '" + path.string() + "'");
    return char_dataset(text, path.string());
  }

  /// Where the text came from (the file name given to `from_file`, or the `source` given to the constructor).
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

  /// The vocabulary: the distinct bytes of the text in increasing (unsigned) order; byte `vocabulary()[id]`
  /// has id `id`.
  [[nodiscard]] const std::string& vocabulary() const noexcept { return vocabulary_; }

  /// The number of distinct bytes (65 for tinyshakespeare).
  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocabulary_.size(); }

  /// The number of tokens in the whole text (its length in bytes).
  [[nodiscard]] std::size_t size() const noexcept { return ids_.size(); }

  /// The number of tokens of a split: int(0.9·n) for `train`, the rest for `val`.
  [[nodiscard]] std::size_t size(split s) const noexcept {
    return s == split::train ? n_train_ : ids_.size() - n_train_;
  }

  /// The ids of a split, in text order.
  [[nodiscard]] std::span<const std::int32_t> tokens(split s) const noexcept {
    const std::span<const std::int32_t> all(ids_);
    return s == split::train ? all.first(n_train_) : all.subspan(n_train_);
  }

  /// The id of byte `c`.
  /// \throws std::invalid_argument if `c` does not occur in the text.
  [[nodiscard]] std::int32_t encode(char c) const {
    const std::int32_t id = index_[static_cast<unsigned char>(c)];
    if (id < 0) {
      throw std::invalid_argument("byte " + std::to_string(static_cast<unsigned>(static_cast<unsigned char>(c))) +
                                  " is not in the vocabulary of '" + source_ + "'");
    }
    return id;
  }

  /// The ids of every byte of `text`, in order.
  /// \throws std::invalid_argument if a byte does not occur in the training text.
  [[nodiscard]] std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> out;
    out.reserve(text.size());
    for (const char c : text) out.push_back(encode(c));
    return out;
  }

  /// The byte of id `id`.
  /// \throws std::out_of_range unless 0 <= id < vocab_size().
  [[nodiscard]] char decode(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= vocabulary_.size()) {
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(vocabulary_.size()) + ")");
    }
    return vocabulary_[static_cast<std::size_t>(id)];
  }

  /// The text of `ids`: `decode(encode(s)) == s` for every `s` made of vocabulary bytes.
  /// \throws std::out_of_range for an id outside the vocabulary.
  [[nodiscard]] std::string decode(std::span<const std::int32_t> ids) const {
    std::string out;
    out.reserve(ids.size());
    for (const std::int32_t id : ids) out += decode(id);
    return out;
  }

  /// A random batch of split `s`, as nanoGPT's `get_batch`: `batch` offsets i_b drawn independently and
  /// uniformly from [0, len − block) (len = size(s)), then `x[b] = d[i_b : i_b + block]` and
  /// `y[b] = d[i_b + 1 : i_b + 1 + block]`; both [batch, block].
  ///
  /// The offsets come from `rng`, a `std::mt19937_64` (with `detail::uniform_below`, the same on every standard
  /// library), not from torch's generator: a seed does not give nanoGPT's or PyTorch's batches, only batches
  /// with the same distribution. Each call advances `rng` by at least `batch` draws.
  /// \throws std::invalid_argument if batch or block is 0, or the split has no more than `block` tokens.
  [[nodiscard]] token_batch sample_batch(split s, std::size_t batch, std::size_t block, std::mt19937_64& rng) const {
    const std::span<const std::int32_t> d = tokens(s);
    if (batch == 0 || block == 0) throw std::invalid_argument("sample_batch: batch and block must be at least 1");
    if (d.size() <= block) {
      throw std::invalid_argument("sample_batch: the " + std::string(split_name(s)) + " split of '" + source_ +
                                  "' has " + std::to_string(d.size()) + " tokens, not more than the block of " +
                                  std::to_string(block) + ": use a longer text or a shorter block");
    }
    token_batch out{id_matrix::from_shape({batch, block}), id_matrix::from_shape({batch, block})};
    for (std::size_t b = 0; b < batch; ++b) {
      const auto i = static_cast<std::size_t>(detail::uniform_below(rng, d.size() - block));
      copy_row(d, i, block, out.x.data() + b * block);
      copy_row(d, i + 1, block, out.y.data() + b * block);
    }
    return out;
  }

  /// The number of non-overlapping windows of split `s`: offsets i = 0, block, 2·block, … with
  /// i + block + 1 <= len, so floor((len − 1) / block) (1,742 for tinyshakespeare's validation split at
  /// block 64: its first 111,488 targets; the last 52 tokens are in no window).
  /// \throws std::invalid_argument if block is 0.
  [[nodiscard]] std::size_t window_count(split s, std::size_t block) const {
    if (block == 0) throw std::invalid_argument("window_count: block must be at least 1");
    const std::size_t len = size(s);
    return len == 0 ? 0 : (len - 1) / block;
  }

  /// Walks split `s` as non-overlapping windows (see `window_count`), window k being x = d[k·block : (k+1)·block],
  /// y = d[k·block + 1 : (k+1)·block + 1], in order, `batch` windows at a time: calls
  /// `f(const id_matrix& x, const id_matrix& y)` with x and y of shape [rows, block], rows = `batch` except for
  /// the last call (the remainder, ≥ 1). The mean loss over the split is then the row-weighted mean of the
  /// per-call means.
  /// \throws std::invalid_argument if batch or block is 0 or the split holds no window (fewer than block + 1
  ///   tokens).
  template <class F>
  void for_each_window(split s, std::size_t block, std::size_t batch, F&& f) const {
    if (batch == 0) throw std::invalid_argument("for_each_window: batch must be at least 1");
    const std::size_t n = window_count(s, block);
    if (n == 0) {
      throw std::invalid_argument("for_each_window: the " + std::string(split_name(s)) + " split of '" + source_ +
                                  "' has " + std::to_string(size(s)) + " tokens, no window of block " +
                                  std::to_string(block) + " + 1");
    }
    const std::span<const std::int32_t> d = tokens(s);
    for (std::size_t first = 0; first < n; first += batch) {
      const std::size_t rows = std::min(batch, n - first);
      id_matrix x = id_matrix::from_shape({rows, block});
      id_matrix y = id_matrix::from_shape({rows, block});
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t i = (first + r) * block;
        copy_row(d, i, block, x.data() + r * block);
        copy_row(d, i + 1, block, y.data() + r * block);
      }
      f(std::as_const(x), std::as_const(y));
    }
  }

  /// `for_each_window(split::val, block, batch, f)`: the windows of the whole-split validation loss.
  template <class F>
  void for_each_val_window(std::size_t block, std::size_t batch, F&& f) const {
    for_each_window(split::val, block, batch, std::forward<F>(f));
  }

 private:
  /// Copies d[from : from + count] to `to`.
  static void copy_row(std::span<const std::int32_t> d, std::size_t from, std::size_t count, std::int32_t* to) {
    for (std::size_t t = 0; t < count; ++t) to[t] = d[from + t];
  }

  std::string source_;
  std::string vocabulary_;
  std::array<std::int32_t, 256> index_{};  ///< byte -> id, -1 when absent
  std::vector<std::int32_t> ids_;          ///< the whole text
  std::size_t n_train_ = 0;
};

}  // namespace train_example
