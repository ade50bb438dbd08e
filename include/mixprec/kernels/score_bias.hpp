/// \file
/// \brief `kernels::score_bias`: an additive bias of attention's scaled scores, read by the tiled
/// kernels (`kernels::attention`, `attention_log_sum_exp`, `attention_backward`) tile by tile, in one
/// of two forms: **dense**, a stored [batch, heads, queries, keys] tensor broadcast over batch rows
/// and/or heads (Hugging Face's `position_bias` / PyTorch's `attn_mask` of floats), or **relative**, a
/// row per head of values indexed by the distance key − query ([heads, 2 keys − 1]), the form of T5's
/// relative position bias (`nn::relative_position_bias`) and ALiBi (`nn::alibi_bias`), whose memory is
/// O(S) per head: the [S, S] bias is never built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>

#include "mixprec/arch/message.hpp"

namespace mixprec::kernels {

/// How a `score_bias` lays out its values.
enum class score_bias_form : std::uint8_t {
  none,      ///< no bias: the kernels' unbiased path, bit for bit
  dense,     ///< [batch or 1, heads or 1, queries, keys]: entry (b, h, t, j) biases query t against key j
  relative,  ///< [heads or 1, 2 keys − 1]: entry (h, j − p + keys − 1) biases the query at position p against key j
};

/// The layout of a score bias (or of its gradient) in one attention call: which form, and how many
/// batch rows and heads it holds (1 = shared by all, broadcast). Offsets are in elements.
struct score_bias_layout {
  score_bias_form form = score_bias_form::none;
  std::size_t batch = 1;    ///< dense: 1 or the call's batch
  std::size_t heads = 1;    ///< dense and relative: 1 or the call's n_heads
  std::size_t queries = 0;  ///< the call's queries per batch row (dense)
  std::size_t keys = 0;     ///< the call's keys per batch row

  /// Elements the layout holds: batch · heads · queries · keys (dense), heads · (2 keys − 1) (relative),
  /// 0 (none).
  [[nodiscard]] constexpr std::size_t size() const noexcept {
    switch (form) {
      case score_bias_form::dense: return batch * heads * queries * keys;
      case score_bias_form::relative: return keys == 0 ? 0 : heads * (2 * keys - 1);
      case score_bias_form::none: break;
    }
    return 0;
  }

  /// The offset of key 0's entry for query t (at position `position`) of batch row b and head h, so that
  /// key j's entry is at offset + j: dense ((b, h, t, 0)), relative ((h, keys − 1 − position)).
  /// Precondition (checked by `check_score_bias`): position < keys.
  [[nodiscard]] constexpr std::size_t row_offset(std::size_t b, std::size_t h, std::size_t t,
                                                 std::size_t position) const noexcept {
    const std::size_t bb = batch == 1 ? 0 : b;
    const std::size_t hh = heads == 1 ? 0 : h;
    if (form == score_bias_form::dense) return ((bb * heads + hh) * queries + t) * keys;
    return hh * (2 * keys - 1) + (keys - 1 - position);
  }
};

namespace detail {
/// row[j] += bias[j] for j < n: a score row and its bias, which do not overlap. Written four at a time
/// with `__restrict` so that GCC's -O2 (whose cost model vectorises no loop that needs a run-time alias
/// check or a scalar tail) packs each group of four into one SSE addition: the same sums, faster.
template <class A>
inline void add_bias_row(A* __restrict row, const A* __restrict bias, std::size_t n) noexcept {
  std::size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    row[j] += bias[j];
    row[j + 1] += bias[j + 1];
    row[j + 2] += bias[j + 2];
    row[j + 3] += bias[j + 3];
  }
  for (; j < n; ++j) row[j] += bias[j];
}
}  // namespace detail

/// An additive bias of attention's scores: s_tj = scale · q_t · k_j + bias(t, j) before the mask and the
/// softmax, in opmath `A` (float32 for float32, bfloat16 and float16 compute; float64 for float64). A
/// masked key stays masked whatever its bias, and a query that sees no key still outputs zeros. The
/// values must be finite or −Inf (−Inf masks that one score; +Inf or NaN make the query's output NaN).
/// The kernels read the values in place: they must outlive the call.
template <class A>
struct score_bias {
  score_bias_layout layout{};   ///< the form and its broadcast counts; queries and keys are the call's
  std::span<const A> values{};  ///< layout.size() values

  /// A stored bias [batch, heads, queries, keys] (batch = 1: shared by every batch row; heads = 1:
  /// shared by every head), row-major.
  [[nodiscard]] static score_bias dense(std::span<const A> v, std::size_t batch, std::size_t heads) {
    return {{score_bias_form::dense, batch, heads, 0, 0}, v};
  }
  /// A computed-per-distance bias [heads, 2 keys − 1]: row h, entry j − p + keys − 1, for the query at
  /// position p and key j (heads = 1: shared by every head). T5's relative position bias and ALiBi.
  [[nodiscard]] static score_bias relative(std::span<const A> v, std::size_t heads) {
    return {{score_bias_form::relative, 1, heads, 0, 0}, v};
  }
  /// Whether there is no bias.
  [[nodiscard]] constexpr bool empty() const noexcept { return layout.form == score_bias_form::none; }
};

/// Checks a bias (or its gradient: `size` elements) against one attention call of `batch` rows,
/// `n_heads` heads, `queries` queries and `keys` keys per row, and returns its layout with the call's
/// queries and keys filled in. `positional` says whether the queries have positions among the keys (self
/// attention: query t at keys − queries + t); a relative bias needs them.
/// \throws std::invalid_argument (the message starts with `where` and names `what`) when the broadcast
///         counts are neither 1 nor the call's, the size is not the layout's, or a relative bias meets
///         queries without positions.
inline score_bias_layout check_score_bias(const char* where, const char* what, score_bias_layout layout,
                                          std::size_t size, std::size_t batch, std::size_t n_heads, std::size_t queries,
                                          std::size_t keys, bool positional) {
  layout.queries = queries;
  layout.keys = keys;
  if (layout.form == score_bias_form::none) {
    if (size != 0) {
      throw std::invalid_argument(internal::concat(where, ": ", what, " has ", size,
                                                   " elements but no form; make it with score_bias::dense or "
                                                   "score_bias::relative"));
    }
    return layout;
  }
  const bool dense = layout.form == score_bias_form::dense;
  if ((dense && layout.batch != 1 && layout.batch != batch) || (layout.heads != 1 && layout.heads != n_heads)) {
    throw std::invalid_argument(internal::concat(where, ": ", what, " holds ", dense ? layout.batch : 1,
                                                 " batch rows and ", layout.heads, " heads but the call has ", batch,
                                                 " and ", n_heads, "; each must be 1 (shared) or the call's"));
  }
  if (!dense && !positional) {
    throw std::invalid_argument(
        internal::concat(where, ": ", what,
                         " is relative (indexed by key − query position) but the queries have no positions "
                         "among the keys (cross-attention); pass a dense bias"));
  }
  if (size != layout.size()) {
    throw std::invalid_argument(
        dense ? internal::concat(where, ": ", what, " has ", size, " elements but [batch, heads, queries, keys] = [",
                                 layout.batch, ", ", layout.heads, ", ", queries, ", ", keys, "] needs ", layout.size())
              : internal::concat(where, ": ", what, " has ", size, " elements but [heads, 2 keys - 1] = [",
                                 layout.heads, ", ", keys == 0 ? 0 : 2 * keys - 1, "] needs ", layout.size()));
  }
  return layout;
}

}  // namespace mixprec::kernels
