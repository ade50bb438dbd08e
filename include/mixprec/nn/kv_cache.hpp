/// \file
/// \brief `nn::kv_cache<T>`: the keys and values of the tokens an attention layer has already seen,
/// for incremental (token by token) decoding, with the positions they were seen at.
///
/// The element type `T` mirrors the keys and values: it is the compute type the layer produces them
/// in (`nn::attention<P>::cache_type<Input>` = `kv_cache<compute_t<P, Input>>`: bfloat16 under
/// p=f32/c=bf16, float under float32, double under float64). Keys are stored after the rotary
/// embedding, exactly as the layer computed them, so attending over the cache equals attending over
/// the keys recomputed from scratch.
///
/// Storage is allocated once, for `capacity` positions (as llama2.c's `key_cache` of seq_len rows and
/// Hugging Face's `StaticCache`): keys and values [batch, n_kv_heads, capacity, head_dim] (each head's
/// positions contiguous, the layout the attention reads tile by tile), and a validity flag
/// [batch, capacity] (false where the key is padding). All batch rows advance together: `size()` is
/// the number of positions filled, and the next token appended gets position `size()`.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mixprec/formats/basic_float.hpp"

namespace mixprec::nn {

/// Keys, values and key validity of the first `size()` positions of `batch` sequences, for
/// `n_kv_heads` heads of dimension `head_dim`, with room for `capacity` positions.
///
/// `T` is real: float, double or a small float (complex attention is not supported).
///
/// **Example** (llama2.c stories260K: 4 kv heads of dimension 8, 512 positions):
///
///     nn::kv_cache<float> cache(/*batch=*/1, /*n_kv_heads=*/4, /*head_dim=*/8, /*capacity=*/512);
///     for (int pos = 0; pos < n; ++pos) y = attn(x_at(pos), cache);   // x [1, 1, 64]; cache.size() == pos + 1
template <class T>
class kv_cache {
  static_assert(std::same_as<T, float> || std::same_as<T, double> || small_float<T>,
                "nn::kv_cache<T>: T must be a real floating type (float, double or a mixprec small float); "
                "attention with complex keys and values is not supported.");

 public:
  using value_type = T;

  /// An empty cache with room for `capacity` positions; storage is zero-initialised.
  /// \throws std::invalid_argument if `n_kv_heads` or `head_dim` is 0, or the storage size overflows.
  kv_cache(std::size_t batch, std::size_t n_kv_heads, std::size_t head_dim, std::size_t capacity)
      : batch_(batch), n_kv_heads_(n_kv_heads), head_dim_(head_dim), capacity_(capacity) {
    if (n_kv_heads == 0 || head_dim == 0) {
      throw std::invalid_argument("kv_cache: n_kv_heads is " + std::to_string(n_kv_heads) + " and head_dim is " +
                                  std::to_string(head_dim) + "; both must be positive.");
    }
    const std::size_t max = std::vector<T>().max_size();
    std::size_t elements = 1;
    for (const std::size_t extent : {batch, n_kv_heads, capacity, head_dim}) {
      if (extent != 0 && elements > max / extent) {
        throw std::invalid_argument("kv_cache: [batch " + std::to_string(batch) + ", n_kv_heads " +
                                    std::to_string(n_kv_heads) + ", capacity " + std::to_string(capacity) +
                                    ", head_dim " + std::to_string(head_dim) + "] is too large to allocate.");
      }
      elements *= extent;
    }
    keys_.assign(elements, T{});
    values_.assign(keys_.size(), T{});
    valid_.assign(batch * capacity, std::uint8_t{0});
  }

  /// Number of sequences (batch rows).
  [[nodiscard]] std::size_t batch() const noexcept { return batch_; }
  /// Number of key/value heads.
  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return n_kv_heads_; }
  /// Dimension of one head.
  [[nodiscard]] std::size_t head_dim() const noexcept { return head_dim_; }
  /// Number of positions the cache can hold.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /// Number of positions filled (the same for every batch row); the next token gets this position.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Whether no position is filled.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  /// The keys of batch row `b`, head `h`: `size()` rows of `head_dim` values, positions 0, 1, ...
  /// \throws std::out_of_range if `b` or `h` is out of range.
  [[nodiscard]] std::span<const T> keys(std::size_t b, std::size_t h) const {
    return std::span<const T>(keys_).subspan(offset(b, h, "keys"), size_ * head_dim_);
  }
  /// The values of batch row `b`, head `h`: `size()` rows of `head_dim` values.
  /// \throws std::out_of_range if `b` or `h` is out of range.
  [[nodiscard]] std::span<const T> values(std::size_t b, std::size_t h) const {
    return std::span<const T>(values_).subspan(offset(b, h, "values"), size_ * head_dim_);
  }
  /// Whether the key at `position` of batch row `b` is a real token (false: padding, never attended).
  /// \throws std::out_of_range if `b >= batch()` or `position >= size()`.
  [[nodiscard]] bool is_valid(std::size_t b, std::size_t position) const {
    if (b >= batch_ || position >= size_) {
      throw std::out_of_range("kv_cache::is_valid: (batch row " + std::to_string(b) + ", position " +
                              std::to_string(position) + ") is outside [" + std::to_string(batch_) + ", " +
                              std::to_string(size_) + ")");
    }
    return valid_[b * capacity_ + position] != 0;
  }

  /// The validity flags of batch row `b`: `size()` values, 1 for a real token, 0 for padding.
  /// \throws std::out_of_range if `b >= batch()`.
  [[nodiscard]] std::span<const std::uint8_t> validity(std::size_t b) const {
    if (b >= batch_) {
      throw std::out_of_range("kv_cache::validity: batch row " + std::to_string(b) + " is outside [0, " +
                              std::to_string(batch_) + ")");
    }
    return std::span<const std::uint8_t>(valid_).subspan(b * capacity_, size_);
  }

  /// Appends `seq` positions to every batch row. `keys` and `values` are [batch, seq, n_kv_heads,
  /// head_dim] (row-major: one token's heads back to back, the output layout of the k/v projections);
  /// `valid` is [batch, seq] (true = real token, false = padding) or empty (every token real).
  /// \throws std::invalid_argument if a size does not match, or if the cache has no room for `seq` more
  ///         positions (then nothing is appended).
  void append(std::span<const T> keys, std::span<const T> values, std::size_t seq, std::span<const bool> valid = {}) {
    const std::size_t row = n_kv_heads_ * head_dim_;
    const std::size_t expected = batch_ * seq * row;
    if (keys.size() != expected || values.size() != expected) {
      throw std::invalid_argument("kv_cache::append: keys have " + std::to_string(keys.size()) + " and values " +
                                  std::to_string(values.size()) + " elements but [batch " + std::to_string(batch_) +
                                  ", seq " + std::to_string(seq) + ", n_kv_heads " + std::to_string(n_kv_heads_) +
                                  ", head_dim " + std::to_string(head_dim_) + "] needs " + std::to_string(expected));
    }
    if (!valid.empty() && valid.size() != batch_ * seq) {
      throw std::invalid_argument("kv_cache::append: the validity mask has " + std::to_string(valid.size()) +
                                  " elements but [batch " + std::to_string(batch_) + ", seq " + std::to_string(seq) +
                                  "] needs " + std::to_string(batch_ * seq) + " (or pass none: every token real)");
    }
    if (seq > capacity_ - size_) {
      throw std::invalid_argument("kv_cache::append: cannot append " + std::to_string(seq) +
                                  " positions to a cache holding " + std::to_string(size_) + " of its " +
                                  std::to_string(capacity_) +
                                  "; construct the cache with a larger capacity, or clear() it to start over.");
    }
    for (std::size_t b = 0; b < batch_; ++b) {
      for (std::size_t t = 0; t < seq; ++t) {
        const std::size_t src = (b * seq + t) * row;
        for (std::size_t h = 0; h < n_kv_heads_; ++h) {
          const std::size_t dst = ((b * n_kv_heads_ + h) * capacity_ + size_ + t) * head_dim_;
          std::copy_n(keys.data() + src + h * head_dim_, head_dim_, keys_.data() + dst);
          std::copy_n(values.data() + src + h * head_dim_, head_dim_, values_.data() + dst);
        }
        valid_[b * capacity_ + size_ + t] = (valid.empty() || valid[b * seq + t]) ? 1 : 0;
      }
    }
    size_ += seq;
  }

  /// Forgets every position (size 0); the storage is kept.
  void clear() noexcept { size_ = 0; }

 private:
  std::size_t offset(std::size_t b, std::size_t h, const char* what) const {
    if (b >= batch_ || h >= n_kv_heads_) {
      throw std::out_of_range(std::string("kv_cache::") + what + ": (batch row " + std::to_string(b) + ", head " +
                              std::to_string(h) + ") is outside [" + std::to_string(batch_) + ", " +
                              std::to_string(n_kv_heads_) + ")");
    }
    return (b * n_kv_heads_ + h) * capacity_ * head_dim_;
  }

  std::size_t batch_;
  std::size_t n_kv_heads_;
  std::size_t head_dim_;
  std::size_t capacity_;
  std::size_t size_ = 0;
  std::vector<T> keys_;              // [batch, n_kv_heads, capacity, head_dim]
  std::vector<T> values_;            // [batch, n_kv_heads, capacity, head_dim]
  std::vector<std::uint8_t> valid_;  // [batch, capacity]
};

}  // namespace mixprec::nn
