/// \file
/// \brief safetensors checkpoints: `mixprec::train::checkpoint` (named tensors, each a dtype, a shape
/// and its raw bytes, plus a string->string `__metadata__` map), read and written in the safetensors
/// format of Hugging Face (`huggingface/safetensors`: README "Format", `safetensors/src/tensor.rs`).
///
/// **The format** (what `from_bytes` accepts and `to_bytes` writes):
///
///     | N: u64, little-endian | N bytes: UTF-8 JSON object, may end in spaces | byte buffer |
///
/// The JSON maps each tensor name to `{"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}`,
/// offsets in bytes relative to the start of the buffer, `end` exclusive. The optional key
/// `"__metadata__"` maps strings to strings. Data is little-endian and row-major (C order). 0-rank
/// tensors (shape `[]`, one element) and empty tensors (a 0 in the shape, `begin == end`) are allowed.
///
/// **What the reader checks** (each failure throws `safetensors_error`, whose message starts with
/// "safetensors: <file or '<memory>'>:" and names the tensor when one is at fault):
///  - the file holds at least the 8 bytes of N; N <= 100,000,000 (tensor.rs `MAX_HEADER_SIZE`);
///    8 + N <= the file size;
///  - the header starts with `{`, is valid UTF-8 and valid JSON (parsed by nlohmann-json, never by hand),
///    is an object, and has no duplicate key at any level (nlohmann keeps the last value of a duplicate
///    key silently; a parser callback sees each key and refuses a repeat; tensor.rs forbids them too);
///  - `__metadata__`, if present, is an object of strings;
///  - every other entry is an object with `dtype` (a string naming a dtype of the table below),
///    `shape` (an array of non-negative integers) and `data_offsets` (two non-negative integers,
///    begin <= end); other fields are ignored, as serde does by default;
///  - the buffer is covered exactly: sorted by offsets, each tensor begins where the previous one ended
///    (no hole, no overlap), `end - begin == product(shape) * itemsize` (without overflow), no tensor
///    extends beyond the buffer, and the last one ends at the end of the file (no trailing bytes)
///    (tensor.rs `Metadata::validate` and `MetadataIncompleteBuffer`).
///
/// **What the writer does** (tensor.rs `prepare`): entries sorted by descending dtype alignment (the
/// item size), then by name; `__metadata__` first when the map is not empty; compact JSON with the
/// fields in the order dtype, shape, data_offsets; the header padded with spaces to a multiple of 8 so
/// every tensor's data is aligned to its item size within the file. tensor.rs breaks ties between dtypes
/// of equal size by its enum order (I64 before F64); mixprec sorts them by name only. Readers must not
/// rely on the order.
///
/// **Dtypes** (the safetensors name, the `mixprec::dtype`, the item size in bytes):
///
/// | safetensors | mixprec::dtype | bytes |  | safetensors | mixprec::dtype | bytes |
/// |---|---|---|---|---|---|---|
/// | F64 | float64 | 8 | | I64 / U64 | int64 / uint64 | 8 |
/// | F32 | float32 | 4 | | I32 / U32 | int32 / uint32 | 4 |
/// | BF16 | bfloat16 | 2 | | I16 / U16 | int16 / uint16 | 2 |
/// | F16 | float16 | 2 | | I8 / U8 | int8 / uint8 | 1 |
/// | F8_E4M3 | **float8_e4m3fn** (torch.float8_e4m3fn) | 1 | | BOOL | bool_ | 1 |
/// | F8_E5M2 | float8_e5m2 | 1 | | F8_E4M3FNUZ | float8_e4m3fnuz | 1 |
/// | F8_E8M0 | float8_e8m0fnu | 1 | | F8_E5M2FNUZ | float8_e5m2fnuz | 1 |
///
/// `F8_E4M3` is *not* `mixprec::float8_e4m3` (the IEEE-style e4m3 with infinities). The sub-byte
/// safetensors dtypes (`F4`, `F6_E2M3`, `F6_E3M2`) are not supported: the safetensors README leaves
/// their packing unsettled.
///
/// **Bit-exact round trips**: tensors are kept as raw bytes; nothing is converted on reading or writing,
/// so NaN payloads and signalling NaNs survive (`get` copies bytes, it does not go through float).
/// The host must be little-endian (checked at compile time).
///
/// **Example**:
///
///     mixprec::train::checkpoint ck;
///     ck.put("wte.kernel", xt::xtensor<float, 2>{{1, 2}, {3, 4}});
///     ck.metadata["policy"] = "p=f32,c=bf16,o=f32";
///     ck.save("params.safetensors");
///     auto back = mixprec::train::checkpoint::load("params.safetensors");
///     xt::xtensor<float, 2> w = back.get<float, 2>("wte.kernel");   // checks dtype F32 and rank 2
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/kernels/compiled.hpp"

/// Helpers of the safetensors reader and writer (messages, overflow-checked products).
namespace mixprec::detail {
[[nodiscard]] inline std::string st_prefix(std::string_view source) {
  return "safetensors: " + std::string(source) + ": ";
}
[[nodiscard]] inline std::string st_quote(std::string_view name) { return "tensor \"" + std::string(name) + "\""; }
[[nodiscard]] inline std::string st_shape(std::span<const std::uint64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
/// a * b, or std::nullopt on overflow of u64.
[[nodiscard]] inline std::optional<std::uint64_t> st_mul(std::uint64_t a, std::uint64_t b) noexcept {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::nullopt;
  return a * b;
}
}  // namespace mixprec::detail

namespace mixprec::train {

static_assert(std::endian::native == std::endian::little,
              "mixprec::train safetensors: the tensors are copied byte for byte, which is the little-endian "
              "layout the format requires only on a little-endian host.");
static_assert(sizeof(bool) == 1, "mixprec::train safetensors: BOOL is stored as one byte per element.");

/// Thrown for every malformed safetensors file or buffer and for a `get` that cannot be satisfied
/// (missing name, wrong dtype, wrong rank or size). The message starts with "safetensors: <source>:",
/// where the source is the file's path or "<memory>", and names the tensor at fault.
class safetensors_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One row of the dtype table: the safetensors name, the mixprec dtype, the item size in bytes.
struct safetensors_dtype_info {
  std::string_view name;
  dtype type;
  std::size_t itemsize;
};

/// Every dtype mixprec reads and writes in safetensors files (see the file comment's table).
inline constexpr std::array<safetensors_dtype_info, 18> safetensors_dtypes{{
    {"F64", dtype::float64, 8},
    {"F32", dtype::float32, 4},
    {"BF16", dtype::bfloat16, 2},
    {"F16", dtype::float16, 2},
    {"F8_E4M3", dtype::float8_e4m3fn, 1},
    {"F8_E5M2", dtype::float8_e5m2, 1},
    {"F8_E4M3FNUZ", dtype::float8_e4m3fnuz, 1},
    {"F8_E5M2FNUZ", dtype::float8_e5m2fnuz, 1},
    {"F8_E8M0", dtype::float8_e8m0fnu, 1},
    {"I64", dtype::int64, 8},
    {"I32", dtype::int32, 4},
    {"I16", dtype::int16, 2},
    {"I8", dtype::int8, 1},
    {"U64", dtype::uint64, 8},
    {"U32", dtype::uint32, 4},
    {"U16", dtype::uint16, 2},
    {"U8", dtype::uint8, 1},
    {"BOOL", dtype::bool_, 1},
}};

/// The table row of the safetensors dtype name `text` ("F32", "F8_E4M3"; exact, case-sensitive), or
/// std::nullopt for a name mixprec does not support.
[[nodiscard]] constexpr std::optional<safetensors_dtype_info> find_safetensors_dtype(std::string_view text) noexcept {
  for (const auto& info : safetensors_dtypes) {
    if (info.name == text) return info;
  }
  return std::nullopt;
}

/// The table row of the mixprec dtype `d`, or std::nullopt when safetensors cannot store it (complex,
/// int4, float6, the weak types...).
[[nodiscard]] constexpr std::optional<safetensors_dtype_info> find_safetensors_dtype(dtype d) noexcept {
  for (const auto& info : safetensors_dtypes) {
    if (info.type == d) return info;
  }
  return std::nullopt;
}

/// True for the C++ element types a checkpoint stores (their dtype is in the table).
template <class T>
concept safetensors_element = has_dtype<T> && find_safetensors_dtype(dtype_of_v<T>)
.has_value();

/// One tensor of a checkpoint: its dtype, its shape (row-major) and its bytes (little-endian,
/// `product(shape) * itemsize` of them; a 0-rank tensor has shape {} and one element).
struct stored_tensor {
  dtype type = dtype::float32;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> bytes;

  /// The number of elements: the product of the shape (1 for 0-rank).
  [[nodiscard]] std::uint64_t element_count() const noexcept {
    std::uint64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
};

}  // namespace mixprec::train

/// The two halves of the safetensors reader and writer that go through JSON (nlohmann-json): defined in
/// train/detail/safetensors_json.hpp, which header-only translation units include and the compiled
/// library (`mixprec::compiled`, src/checkpoints.cpp) compiles once, so that a translation unit of a
/// program built in the compiled mode does not parse nlohmann-json.
namespace mixprec::detail {
/// One tensor of a safetensors header: its name, dtype, shape and byte offsets [begin, end) in the buffer.
struct st_entry {
  std::string name;
  train::safetensors_dtype_info info;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;
};
/// The header's compact JSON text (not yet padded) for `entries`, written in their order, and
/// `metadata` (first, when not empty). \throws train::safetensors_error (naming `source`) when a name or
/// metadata string is not valid UTF-8.
std::string st_write_header(std::span<const st_entry> entries, const std::map<std::string, std::string>& metadata,
                            const std::string& source);
/// Parses the header text [text, text + n) into its entries (header order) and metadata, with the
/// checks of the file comment that concern the header alone (valid JSON, an object, no duplicate key,
/// each entry's fields). \throws train::safetensors_error naming `source` and the entry at fault.
void st_read_header(const char* text, std::size_t n, const std::string& source, std::vector<st_entry>& entries,
                    std::map<std::string, std::string>& metadata);
}  // namespace mixprec::detail

namespace mixprec::train {

/// A safetensors checkpoint in memory: named tensors (kept sorted by name) and the `__metadata__` map.
/// Reading and writing are `from_bytes`/`load` and `to_bytes`/`save`; typed access is `put` and `get`
/// for `xt::xtensor<T, N>` and for spans. See the file comment for the format and its checks.
class checkpoint {
 public:
  /// The `__metadata__` map (string -> string); written only when not empty.
  std::map<std::string, std::string> metadata;

  checkpoint() = default;

  /// Where this checkpoint was read from (the path, or "<memory>"); used in error messages.
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

  /// The tensors, by name.
  [[nodiscard]] const std::map<std::string, stored_tensor>& tensors() const noexcept { return tensors_; }
  /// True when a tensor `name` exists.
  [[nodiscard]] bool contains(std::string_view name) const {
    return tensors_.find(std::string(name)) != tensors_.end();
  }
  /// The number of tensors.
  [[nodiscard]] std::size_t size() const noexcept { return tensors_.size(); }
  /// The tensor names, sorted.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& [name, t] : tensors_) out.push_back(name);
    return out;
  }
  /// Removes tensor `name` if present; returns whether it was.
  bool erase(std::string_view name) { return tensors_.erase(std::string(name)) > 0; }

  /// The tensor `name`. Throws safetensors_error ("no tensor \"name\"") when it is missing.
  [[nodiscard]] const stored_tensor& at(std::string_view name) const {
    auto it = tensors_.find(std::string(name));
    if (it == tensors_.end()) throw safetensors_error(detail::st_prefix(source_) + "no " + detail::st_quote(name));
    return it->second;
  }

  /// Adds (or replaces) a tensor from raw bytes. Throws safetensors_error when safetensors cannot store
  /// `type`, when `name` is "__metadata__" or empty, or when `bytes.size() != product(shape) * itemsize`.
  void put_bytes(std::string name, dtype type, std::vector<std::uint64_t> shape, std::vector<std::uint8_t> bytes) {
    const auto info = find_safetensors_dtype(type);
    const std::string where = detail::st_prefix(source_) + detail::st_quote(name) + ": ";
    if (!info)
      throw safetensors_error(where + "dtype " + std::string(mixprec::name(type)) + " has no safetensors name");
    if (name.empty() || name == "__metadata__") throw safetensors_error(where + "this name is reserved");
    std::optional<std::uint64_t> n = info->itemsize;
    for (auto s : shape) n = n ? detail::st_mul(*n, s) : n;
    if (!n || *n != bytes.size())
      throw safetensors_error(where + std::to_string(bytes.size()) + " bytes for shape " + detail::st_shape(shape) +
                              " of " + std::string(info->name));
    tensors_[std::move(name)] = stored_tensor{type, std::move(shape), std::move(bytes)};
  }

  /// Adds (or replaces) tensor `name` with the elements of `data`, row-major, of shape `shape`
  /// (`product(shape) == data.size()`, else safetensors_error). T: any element type of the table.
  template <safetensors_element T>
  void put(std::string_view name, std::span<const T> data, std::span<const std::uint64_t> shape) {
    std::vector<std::uint8_t> bytes(data.size_bytes());
    if (!bytes.empty()) std::memcpy(bytes.data(), data.data(), bytes.size());
    put_bytes(std::string(name), dtype_of_v<T>, std::vector<std::uint64_t>(shape.begin(), shape.end()),
              std::move(bytes));
  }

  /// As above, with the shape written in braces (`ck.put("bias", std::span<const float>(b), {16})`).
  template <safetensors_element T>
  void put(std::string_view name, std::span<const T> data, std::initializer_list<std::uint64_t> shape) {
    put(name, data, std::span<const std::uint64_t>(shape.begin(), shape.size()));
  }

  /// As above, for any contiguous range of a table element type (`std::vector<float>`, `std::span<float>`).
  template <std::ranges::contiguous_range R>
  requires safetensors_element<std::ranges::range_value_t<R>>
  void put(std::string_view name, const R& data, std::initializer_list<std::uint64_t> shape) {
    using T = std::ranges::range_value_t<R>;
    put(name, std::span<const T>(std::ranges::data(data), std::ranges::size(data)),
        std::span<const std::uint64_t>(shape.begin(), shape.size()));
  }

  /// The tensors and metadata entries named `prefix.<rest>`, renamed `<rest>`: the part of a train-state
  /// file one component saved under `prefix` (see `insert`). Its `source()` names this checkpoint's
  /// source and the prefix, so that errors point into the file. An empty prefix copies everything.
  [[nodiscard]] checkpoint scoped(std::string_view prefix) const {
    checkpoint out;
    out.source_ = prefix.empty() ? source_ : source_ + " (under \"" + std::string(prefix) + ".\")";
    const std::string head = prefix.empty() ? std::string() : std::string(prefix) + ".";
    for (const auto& [name, t] : tensors_) {
      if (name.starts_with(head)) out.tensors_.emplace(name.substr(head.size()), t);
    }
    for (const auto& [key, value] : metadata) {
      if (key.starts_with(head)) out.metadata.emplace(key.substr(head.size()), value);
    }
    return out;
  }

  /// Adds (or replaces) every tensor and metadata entry of `other`, each renamed `prefix.<name>` (or
  /// kept when `prefix` is empty): how one file holds several components' states (`scoped` reads one
  /// back).
  void insert(std::string_view prefix, const checkpoint& other) {
    const std::string head = prefix.empty() ? std::string() : std::string(prefix) + ".";
    for (const auto& [name, t] : other.tensors_) tensors_[head + name] = t;
    for (const auto& [key, value] : other.metadata) metadata[head + key] = value;
  }

  /// Adds (or replaces) tensor `name` with a row-major xtensor (its shape and elements).
  template <safetensors_element T, std::size_t N>
  void put(std::string_view name, const xt::xtensor<T, N>& array) {
    const std::vector<std::uint64_t> shape(array.shape().begin(), array.shape().end());
    put(name, std::span<const T>(array.data(), array.size()), shape);
  }

  /// Adds (or replaces) the 0-rank tensor `name` holding `value` (shape []).
  template <safetensors_element T>
  void put_scalar(std::string_view name, T value) {
    put(name, std::span<const T>(&value, 1), {});
  }

  /// Tensor `name` as an `xt::xtensor<T, N>`. Throws safetensors_error when the name is missing, the
  /// stored dtype is not `dtype_of_v<T>`, or the rank is not N. A BOOL byte other than 0 or 1 is an error.
  template <safetensors_element T, std::size_t N>
  [[nodiscard]] xt::xtensor<T, N> get(std::string_view name) const {
    const stored_tensor& t = checked(name, dtype_of_v<T>);
    if (t.shape.size() != N)
      throw safetensors_error(detail::st_prefix(source_) + detail::st_quote(name) + ": rank " +
                              std::to_string(t.shape.size()) + " (shape " + detail::st_shape(t.shape) +
                              "), expected rank " + std::to_string(N));
    std::array<std::size_t, N> shape{};
    for (std::size_t i = 0; i < N; ++i) shape[i] = static_cast<std::size_t>(t.shape[i]);
    xt::xtensor<T, N> out(shape);
    copy_out(name, t, std::span<T>(out.data(), out.size()));
    return out;
  }

  /// Copies tensor `name` into `out` (any shape with `out.size()` elements). Throws safetensors_error
  /// when the name is missing, the dtype is not `dtype_of_v<T>` or the element count differs.
  template <safetensors_element T>
  void get_into(std::string_view name, std::span<T> out) const {
    const stored_tensor& t = checked(name, dtype_of_v<T>);
    if (t.element_count() != out.size())
      throw safetensors_error(detail::st_prefix(source_) + detail::st_quote(name) + ": " +
                              std::to_string(t.element_count()) + " elements (shape " + detail::st_shape(t.shape) +
                              "), expected " + std::to_string(out.size()));
    copy_out(name, t, out);
  }

  /// The single element of the 0-rank tensor `name` (errors as `get`; a shape other than [] is an error).
  template <safetensors_element T>
  [[nodiscard]] T get_scalar(std::string_view name) const {
    const stored_tensor& t = checked(name, dtype_of_v<T>);
    if (!t.shape.empty())
      throw safetensors_error(detail::st_prefix(source_) + detail::st_quote(name) + ": shape " +
                              detail::st_shape(t.shape) + ", expected a 0-rank tensor (shape [])");
    T value{};
    copy_out(name, t, std::span<T>(&value, 1));
    return value;
  }

  /// The file image: 8-byte header length, padded JSON header, buffer (see the file comment for the
  /// order and padding). Throws safetensors_error when a name or metadata string is not valid UTF-8.
  [[nodiscard]] std::vector<std::uint8_t> to_bytes() const {
    std::vector<std::pair<const std::string*, const stored_tensor*>> order;
    order.reserve(tensors_.size());
    for (const auto& [name, t] : tensors_) order.emplace_back(&name, &t);
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return find_safetensors_dtype(a.second->type)->itemsize > find_safetensors_dtype(b.second->type)->itemsize;
    });  // stable: names stay sorted within one alignment

    std::vector<detail::st_entry> entries;
    entries.reserve(order.size());
    std::uint64_t offset = 0;
    for (const auto& [name, t] : order) {
      entries.push_back({*name, *find_safetensors_dtype(t->type), t->shape, offset, offset + t->bytes.size()});
      offset += t->bytes.size();
    }
    std::string text = detail::st_write_header(entries, metadata, source_);
    text.append((8 - text.size() % 8) % 8, ' ');

    std::vector<std::uint8_t> out;
    out.reserve(8 + text.size() + offset);
    const auto n = static_cast<std::uint64_t>(text.size());
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
    out.insert(out.end(), text.begin(), text.end());
    for (const auto& [name, t] : order) out.insert(out.end(), t->bytes.begin(), t->bytes.end());
    return out;
  }

  /// Writes the checkpoint to `path` (through `<path>.tmp` and a rename, so a crash never leaves a
  /// half-written file under `path`). Throws safetensors_error when the file cannot be written.
  void save(const std::filesystem::path& path) const {
    const std::vector<std::uint8_t> bytes = to_bytes();
    std::filesystem::path tmp = path;
    tmp += ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (f) f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      if (!f) throw safetensors_error(detail::st_prefix(path.string()) + "cannot write " + tmp.string());
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec)
      throw safetensors_error(detail::st_prefix(path.string()) + "cannot rename " + tmp.string() + ": " + ec.message());
  }

  /// Parses a safetensors file image. `source` names it in error messages. Throws safetensors_error
  /// for every fault listed in the file comment.
  [[nodiscard]] static checkpoint from_bytes(std::span<const std::uint8_t> file, std::string source = "<memory>") {
    checkpoint ck;
    ck.source_ = std::move(source);
    ck.parse(file);
    return ck;
  }

  /// Reads and parses the file at `path` (errors as `from_bytes`, plus a file that cannot be read).
  [[nodiscard]] static checkpoint load(const std::filesystem::path& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw safetensors_error(detail::st_prefix(path.string()) + "cannot open the file");
    std::vector<std::uint8_t> bytes;
    try {  // libstdc++ throws std::ios_base::failure from the read (e.g. EISDIR for a directory)
      bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    } catch (const std::ios_base::failure& e) {
      throw safetensors_error(detail::st_prefix(path.string()) + "cannot read the file (" + e.what() + ")");
    }
    if (f.bad()) throw safetensors_error(detail::st_prefix(path.string()) + "cannot read the file");
    return from_bytes(bytes, path.string());
  }

  /// The largest header the reader accepts (tensor.rs `MAX_HEADER_SIZE`).
  static constexpr std::uint64_t max_header_size = 100'000'000;

 private:
  std::string source_ = "<memory>";
  std::map<std::string, stored_tensor> tensors_;

  const stored_tensor& checked(std::string_view name, dtype want) const {
    const stored_tensor& t = at(name);
    if (t.type != want)
      throw safetensors_error(detail::st_prefix(source_) + detail::st_quote(name) + ": stored as " +
                              std::string(find_safetensors_dtype(t.type)->name) + " (" +
                              std::string(mixprec::name(t.type)) + "), requested " +
                              std::string(find_safetensors_dtype(want)->name) + " (" +
                              std::string(mixprec::name(want)) + ")");
    return t;
  }

  template <class T>
  void copy_out(std::string_view name, const stored_tensor& t, std::span<T> out) const {
    if constexpr (std::is_same_v<T, bool>) {
      for (std::size_t i = 0; i < t.bytes.size(); ++i) {
        if (t.bytes[i] > 1)
          throw safetensors_error(detail::st_prefix(source_) + detail::st_quote(name) + ": BOOL element " +
                                  std::to_string(i) + " is the byte " + std::to_string(t.bytes[i]) + ", not 0 or 1");
        out[i] = t.bytes[i] != 0;
      }
    } else {
      if (!t.bytes.empty()) std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
    }
  }

  [[noreturn]] void fail(const std::string& what) const { throw safetensors_error(detail::st_prefix(source_) + what); }

  void parse(std::span<const std::uint8_t> file) {
    if (file.size() < 8)
      fail("truncated file: " + std::to_string(file.size()) + " bytes, fewer than the 8 bytes of the header length");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<std::size_t>(i)];
    if (n > max_header_size)
      fail("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(max_header_size) +
           " bytes");
    if (n > file.size() - 8)
      fail("header length " + std::to_string(n) + " goes beyond the end of the file (" + std::to_string(file.size()) +
           " bytes: truncated file?)");
    const auto* text = reinterpret_cast<const char*>(file.data() + 8);
    if (n == 0 || text[0] != '{') fail("the header does not start with '{'");

    std::vector<detail::st_entry> entries;
    detail::st_read_header(text, static_cast<std::size_t>(n), source_, entries, metadata);

    const std::uint64_t buffer_size = file.size() - 8 - n;
    std::sort(entries.begin(), entries.end(), [](const detail::st_entry& a, const detail::st_entry& b) {
      return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
    });
    std::uint64_t covered = 0;
    const detail::st_entry* previous = nullptr;
    for (const detail::st_entry& e : entries) {
      const std::string where =
          detail::st_quote(e.name) + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") ";
      std::optional<std::uint64_t> nbytes = e.info.itemsize;
      for (auto s : e.shape) nbytes = nbytes ? detail::st_mul(*nbytes, s) : nbytes;
      if (!nbytes) fail(where + "for shape " + detail::st_shape(e.shape) + ": the byte size overflows 64 bits");
      if (e.end > buffer_size)
        fail(where + "go beyond the buffer of " + std::to_string(buffer_size) + " bytes (truncated file?)");
      if (e.begin > covered)
        fail(where + "leave a hole of " + std::to_string(e.begin - covered) + " bytes before the tensor");
      if (e.begin < covered)
        fail(where + "overlap " + (previous ? detail::st_quote(previous->name) : std::string("another tensor")));
      if (e.end - e.begin != *nbytes)
        fail(where + "hold " + std::to_string(e.end - e.begin) + " bytes, but shape " + detail::st_shape(e.shape) +
             " of " + std::string(e.info.name) + " needs " + std::to_string(*nbytes));
      covered = e.end;
      previous = &e;
    }
    if (covered != buffer_size)
      fail(std::to_string(buffer_size - covered) + " trailing bytes after the last tensor (the tensors cover " +
           std::to_string(covered) + " of the buffer's " + std::to_string(buffer_size) + " bytes)");

    const std::uint8_t* buffer = file.data() + 8 + n;
    for (detail::st_entry& e : entries) {
      std::vector<std::uint8_t> bytes(buffer + e.begin, buffer + e.end);
      tensors_[e.name] = stored_tensor{e.info.type, std::move(e.shape), std::move(bytes)};
    }
  }
};

}  // namespace mixprec::train

#if !MIXPREC_EXTERN_CHECKPOINTS
#include "mixprec/train/detail/safetensors_json.hpp"
#endif
