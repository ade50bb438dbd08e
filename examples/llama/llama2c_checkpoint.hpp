/// \file
/// \brief Reader for llama2.c "legacy version 0" checkpoints (the `.bin` of karpathy/llama2.c's
/// `export.py --version 0` and of the tinyllamas models, e.g. stories260K.bin).
///
/// File layout (little-endian; karpathy/llama2.c run.c `read_checkpoint` / `memory_map_weights`, export.py
/// `legacy_export`):
///  - header, 7 x int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len.
///    A negative vocab_size means the classifier matrix `wcls` is stored at the end; a positive one means the
///    classifier is the token embedding (tied).
///  - float32 arrays, in this order: token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final,
///    freq_cis_real, freq_cis_imag, [wcls]. Shapes are in `checkpoint` below.
///
/// Matrices are row-major `[out, in]`, applied as `y = W x` (y[i] = sum_j W[i, j] x[j]); per-layer tensors
/// have a leading layer axis: `[L, out, in]`.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "llama2c_file.hpp"

namespace llama2c {

/// The hyper-parameters in a checkpoint's 28-byte header, validated (see `read_checkpoint`).
struct model_config {
  int dim = 0;                    ///< d_model, the residual-stream width.
  int hidden_dim = 0;             ///< SwiGLU hidden width (rows of w1 and w3).
  int n_layers = 0;               ///< Number of transformer blocks, L.
  int n_heads = 0;                ///< Query heads.
  int n_kv_heads = 0;             ///< Key/value heads (grouped-query attention when < n_heads).
  int vocab_size = 0;             ///< Vocabulary size, always positive here (the sign is in shared_classifier).
  int seq_len = 0;                ///< Maximum sequence length (rows of the RoPE tables).
  bool shared_classifier = true;  ///< True when the header's vocab_size was positive: classifier = token embedding.

  /// Width of one attention head: dim / n_heads.
  [[nodiscard]] constexpr int head_size() const noexcept { return dim / n_heads; }
  /// Width of the key and value projections: n_kv_heads * head_size.
  [[nodiscard]] constexpr int kv_dim() const noexcept { return n_kv_heads * head_size(); }
  /// Query heads sharing one key/value head: n_heads / n_kv_heads.
  [[nodiscard]] constexpr int kv_group_size() const noexcept { return n_heads / n_kv_heads; }
};

/// A dense float32 tensor in row-major order.
struct tensor {
  std::vector<std::size_t> shape;  ///< Extents, outermost first.
  std::vector<float> values;       ///< shape[0] * shape[1] * ... floats, row-major.

  /// Number of elements (the product of `shape`).
  [[nodiscard]] std::size_t size() const noexcept { return values.size(); }

  /// The `i`-th slice along the first axis, e.g. layer `l`'s `[out, in]` matrix of an `[L, out, in]` tensor,
  /// or token `t`'s row of the `[vocab, dim]` embedding.
  /// \throws std::out_of_range when the tensor is empty or `i >= shape[0]`.
  [[nodiscard]] std::span<const float> slice(std::size_t i) const {
    if (shape.empty() || i >= shape[0]) {
      throw std::out_of_range("llama2c::tensor::slice: index " + std::to_string(i) + " is outside [0, " +
                              std::to_string(shape.empty() ? 0 : shape[0]) + ")");
    }
    const std::size_t stride = values.size() / shape[0];
    return std::span<const float>(values).subspan(i * stride, stride);
  }
};

/// The weights of a llama2.c checkpoint, one named tensor per array in the file.
///
/// Shapes (L = n_layers, kv_dim = n_kv_heads * head_size, all `[out, in]` for y = W x):
struct checkpoint {
  model_config config;     ///< The validated header.
  tensor token_embedding;  ///< [vocab_size, dim]
  tensor rms_att;          ///< [L, dim]          RMSNorm gain before attention.
  tensor wq;               ///< [L, dim, dim]     query projection (out = n_heads * head_size = dim).
  tensor wk;               ///< [L, kv_dim, dim]  key projection.
  tensor wv;               ///< [L, kv_dim, dim]  value projection.
  tensor wo;               ///< [L, dim, dim]     attention output projection.
  tensor rms_ffn;          ///< [L, dim]          RMSNorm gain before the feed-forward block.
  tensor w1;               ///< [L, hidden_dim, dim]  SwiGLU gate projection (goes through SiLU).
  tensor w2;               ///< [L, dim, hidden_dim]  SwiGLU down projection.
  tensor w3;               ///< [L, hidden_dim, dim]  SwiGLU up projection.
  tensor rms_final;        ///< [dim]             final RMSNorm gain.
  tensor freq_cis_real;    ///< [seq_len, head_size / 2]  cos(pos * theta_i) as exported (run.c ignores it).
  tensor freq_cis_imag;    ///< [seq_len, head_size / 2]  sin(pos * theta_i) as exported (run.c ignores it).
  tensor wcls;             ///< [vocab_size, dim] when !config.shared_classifier; empty (shape {}) when tied.

  /// The classifier matrix `[vocab_size, dim]`: `wcls`, or `token_embedding` when tied.
  [[nodiscard]] const tensor& classifier() const noexcept { return config.shared_classifier ? token_embedding : wcls; }

  /// The tensors in file order with their names ("token_embedding", "rms_att", ..., "freq_cis_imag", and
  /// "wcls" only when it is stored).
  [[nodiscard]] std::vector<std::pair<std::string_view, const tensor*>> named_tensors() const {
    std::vector<std::pair<std::string_view, const tensor*>> out{{"token_embedding", &token_embedding},
                                                                {"rms_att", &rms_att},
                                                                {"wq", &wq},
                                                                {"wk", &wk},
                                                                {"wv", &wv},
                                                                {"wo", &wo},
                                                                {"rms_ffn", &rms_ffn},
                                                                {"w1", &w1},
                                                                {"w2", &w2},
                                                                {"w3", &w3},
                                                                {"rms_final", &rms_final},
                                                                {"freq_cis_real", &freq_cis_real},
                                                                {"freq_cis_imag", &freq_cis_imag}};
    if (!config.shared_classifier) out.emplace_back("wcls", &wcls);
    return out;
  }
};

/// Size in bytes of a version-0 checkpoint header (7 x int32).
inline constexpr std::size_t checkpoint_header_bytes = 7 * sizeof(std::int32_t);

namespace detail {

/// One array of the file: its name, where it goes, its shape.
struct tensor_spec {
  std::string_view name;
  tensor checkpoint::*member;
  std::vector<std::size_t> shape;
};

/// The arrays of a version-0 file in file order (llama2.c run.c `memory_map_weights`).
[[nodiscard]] inline std::vector<tensor_spec> checkpoint_layout(const model_config& c) {
  const auto z = [](int v) { return static_cast<std::size_t>(v); };
  const std::size_t L = z(c.n_layers), d = z(c.dim), h = z(c.hidden_dim), kv = z(c.kv_dim()), v = z(c.vocab_size),
                    s = z(c.seq_len), half = z(c.head_size() / 2);
  std::vector<tensor_spec> specs{
      {"token_embedding", &checkpoint::token_embedding, {v, d}},
      {"rms_att", &checkpoint::rms_att, {L, d}},
      {"wq", &checkpoint::wq, {L, d, d}},
      {"wk", &checkpoint::wk, {L, kv, d}},
      {"wv", &checkpoint::wv, {L, kv, d}},
      {"wo", &checkpoint::wo, {L, d, d}},
      {"rms_ffn", &checkpoint::rms_ffn, {L, d}},
      {"w1", &checkpoint::w1, {L, h, d}},
      {"w2", &checkpoint::w2, {L, d, h}},
      {"w3", &checkpoint::w3, {L, h, d}},
      {"rms_final", &checkpoint::rms_final, {d}},
      {"freq_cis_real", &checkpoint::freq_cis_real, {s, half}},
      {"freq_cis_imag", &checkpoint::freq_cis_imag, {s, half}},
  };
  if (!c.shared_classifier) specs.push_back({"wcls", &checkpoint::wcls, {v, d}});
  return specs;
}

/// "[2, 3, 4]".
[[nodiscard]] inline std::string shape_string(const std::vector<std::size_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

/// Turns a flat index into "[i, j, k]" for `shape`.
[[nodiscard]] inline std::string index_string(std::size_t flat, const std::vector<std::size_t>& shape) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    index[k] = flat % shape[k];
    flat /= shape[k];
  }
  return shape_string(index);
}

/// Validates the header's fields (already sign-split) and throws file_error naming the first problem.
inline void validate_config(const std::filesystem::path& path, const model_config& c, std::int32_t raw_vocab) {
  const auto bad = [&](const std::string& problem) { throw file_error(path, "invalid header: " + problem); };
  const std::array<std::pair<const char*, std::int32_t>, 6> positive{{{"dim", c.dim},
                                                                      {"hidden_dim", c.hidden_dim},
                                                                      {"n_layers", c.n_layers},
                                                                      {"n_heads", c.n_heads},
                                                                      {"n_kv_heads", c.n_kv_heads},
                                                                      {"seq_len", c.seq_len}}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) bad(std::string(name) + " = " + std::to_string(value) + " must be positive");
  }
  if (raw_vocab == 0) bad("vocab_size = 0 must be non-zero (negative means a separate classifier follows)");
  if (raw_vocab == std::numeric_limits<std::int32_t>::min()) {
    bad("vocab_size = " + std::to_string(raw_vocab) + " has no positive counterpart");
  }
  if (c.dim % c.n_heads != 0) {
    bad("dim " + std::to_string(c.dim) + " is not a multiple of n_heads " + std::to_string(c.n_heads));
  }
  if (c.n_kv_heads > c.n_heads) {
    bad("n_kv_heads " + std::to_string(c.n_kv_heads) + " exceeds n_heads " + std::to_string(c.n_heads));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    bad("n_heads " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads " + std::to_string(c.n_kv_heads));
  }
  if (c.head_size() % 2 != 0) {
    bad("head_size " + std::to_string(c.head_size()) + " (dim / n_heads) must be even: RoPE rotates pairs (2i, 2i+1)");
  }
}

}  // namespace detail

/// Reads a llama2.c legacy version-0 checkpoint (see the file comment for the layout).
///
/// Every size is checked against the file's size before anything is allocated, so a corrupt header can cause
/// neither an over-read nor a huge allocation. The weights are checked to be finite.
///
/// \throws file_error (a std::runtime_error, message `"<path>: <problem>"`) when the file is missing or not a
///   regular file; shorter than the 28-byte header; a llama2.c version-1+ export (magic "ak42"); has a header
///   field that is not positive (vocab_size: non-zero), dim not a multiple of n_heads, n_kv_heads > n_heads,
///   n_heads not a multiple of n_kv_heads, or an odd head_size; sizes whose byte count overflows 64 bits;
///   fewer bytes than the header promises ("truncated"); more bytes than it promises ("trailing data": a wrong
///   header or another format); a NaN or infinite weight ("corrupt").
///
/// **Example**:
///
///     const llama2c::checkpoint ck = llama2c::read_checkpoint("stories260K.bin");
///     std::span<const float> wq0 = ck.wq.slice(0);   // layer 0's [dim, dim] query matrix
///     float w = wq0[i * ck.config.dim + j];          // W[i, j], contributes to q[i] from x[j]
[[nodiscard]] inline checkpoint read_checkpoint(const std::filesystem::path& path) {
  detail::binary_file file(path, "checkpoint");
  if (file.size() < checkpoint_header_bytes) {
    throw file_error(path, "not a llama2.c checkpoint: the file has " + std::to_string(file.size()) +
                               " bytes, fewer than the " + std::to_string(checkpoint_header_bytes) + "-byte header");
  }
  std::array<unsigned char, checkpoint_header_bytes> header{};
  file.read(header.data(), header.size(), "the header");
  std::array<std::int32_t, 7> h{};
  for (std::size_t i = 0; i < h.size(); ++i) {
    h[i] = static_cast<std::int32_t>(detail::load_le_u32(header.data() + 4 * i));
  }
  // export.py's version 1+ files start with the magic "ak42" (0x616b3432) and an int32 version.
  if (static_cast<std::uint32_t>(h[0]) == 0x616b3432u) {
    throw file_error(path, "is a llama2.c version-" + std::to_string(h[1]) +
                               " export (magic \"ak42\"); only the legacy version-0 format is supported "
                               "(re-export with llama2.c's export.py --version 0)");
  }
  model_config c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.seq_len = h[6];
  detail::validate_config(path, c, h[5]);
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] > 0 ? h[5] : -h[5];

  const auto specs = detail::checkpoint_layout(c);
  std::uint64_t total_floats = 0;
  for (const auto& spec : specs) {
    std::optional<std::uint64_t> n = 1;
    for (const std::size_t e : spec.shape) n = n ? detail::checked_mul(*n, e) : std::nullopt;
    const auto sum = n ? detail::checked_add(total_floats, *n) : std::nullopt;
    const auto bytes = sum ? detail::checked_mul(*sum, sizeof(float)) : std::nullopt;
    if (!bytes) {
      throw file_error(path, "invalid header: the weight sizes overflow 64 bits (tensor " + std::string(spec.name) +
                                 " " + detail::shape_string(spec.shape) + ")");
    }
    total_floats = *sum;
  }
  const std::uint64_t weight_bytes = total_floats * sizeof(float);
  if (weight_bytes > file.remaining()) {
    throw file_error(path, "truncated: the header promises " + std::to_string(weight_bytes) +
                               " bytes of weights after the " + std::to_string(checkpoint_header_bytes) +
                               "-byte header, the file has " + std::to_string(file.remaining()));
  }
  if (weight_bytes < file.remaining()) {
    throw file_error(path, "trailing data: " + std::to_string(file.remaining() - weight_bytes) + " bytes after the " +
                               std::to_string(weight_bytes) +
                               " bytes of weights the header promises (a wrong header, another export "
                               "format, or a corrupt file)");
  }

  checkpoint ck;
  ck.config = c;
  for (const auto& spec : specs) {
    tensor& t = ck.*spec.member;
    t.shape = spec.shape;
    std::size_t n = 1;
    for (const std::size_t e : spec.shape) n *= e;  // cannot overflow: bounded by the file size above
    t.values.resize(n);
    file.read(t.values.data(), n * sizeof(float), "tensor " + std::string(spec.name));
    detail::little_endian_to_native(t.values.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(t.values[i])) {
        throw file_error(path, "corrupt: tensor " + std::string(spec.name) + " " + detail::shape_string(spec.shape) +
                                   " holds a non-finite value (" + std::to_string(t.values[i]) + ") at " +
                                   detail::index_string(i, spec.shape));
      }
    }
  }
  return ck;
}

}  // namespace llama2c
