/// \file
/// \brief Shared plumbing of the llama2.c file readers: the error type, checked sizes, little-endian
/// decoding and "read exactly these bytes or say why not".
///
/// Used by llama2c_checkpoint.hpp and llama2c_tokenizer.hpp; not an API of its own.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>

namespace llama2c {

/// A llama2.c file that cannot be read: missing, truncated, corrupt, or with a header that describes an
/// impossible model. `what()` is `"<path>: <problem>"`, e.g.
/// `"models/x.bin: truncated: the header promises 1056512 bytes of weights after the 28-byte header, the file
/// has 1000"`.
class file_error : public std::runtime_error {
 public:
  /// Builds the message `"<path>: <problem>"`.
  file_error(const std::filesystem::path& path, const std::string& problem)
      : std::runtime_error(path.string() + ": " + problem), path_(path) {}

  /// The file the problem is about.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

namespace detail {

static_assert(std::numeric_limits<float>::is_iec559 && sizeof(float) == 4,
              "llama2.c files store IEEE-754 binary32 floats: this reader needs float to be binary32.");

/// `a * b`, or nothing when the product does not fit in 64 bits.
[[nodiscard]] constexpr std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) noexcept {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::nullopt;
  return a * b;
}

/// `a + b`, or nothing when the sum does not fit in 64 bits.
[[nodiscard]] constexpr std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) noexcept {
  if (b > std::numeric_limits<std::uint64_t>::max() - a) return std::nullopt;
  return a + b;
}

/// The 32-bit little-endian word at `bytes[0..3]`, whatever the host's byte order.
[[nodiscard]] constexpr std::uint32_t load_le_u32(const unsigned char* bytes) noexcept {
  return static_cast<std::uint32_t>(bytes[0]) | (static_cast<std::uint32_t>(bytes[1]) << 8) |
         (static_cast<std::uint32_t>(bytes[2]) << 16) | (static_cast<std::uint32_t>(bytes[3]) << 24);
}

/// Reverses the bytes of every float read straight from a little-endian file, on big-endian hosts only.
inline void little_endian_to_native(float* values, std::size_t count) noexcept {
  if constexpr (std::endian::native == std::endian::big) {
    for (std::size_t i = 0; i < count; ++i) {
      const auto b = std::bit_cast<std::uint32_t>(values[i]);
      values[i] = std::bit_cast<float>((b >> 24) | ((b >> 8) & 0xff00u) | ((b << 8) & 0xff0000u) | (b << 24));
    }
  } else {
    (void)values;
    (void)count;
  }
}

/// An open binary file of known size; every read is checked against that size first, so a corrupt length
/// field can never trigger an over-read or an allocation larger than the file.
class binary_file {
 public:
  /// Opens `path` for reading. `what` names the kind of file for messages ("checkpoint", "tokenizer").
  /// \throws file_error when the path does not exist, is not a regular file, or cannot be opened.
  binary_file(const std::filesystem::path& path, const char* what) : path_(path) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(status)) {
      throw file_error(path, std::string("cannot open ") + what + ": no such file");
    }
    if (!std::filesystem::is_regular_file(status)) {
      throw file_error(path, std::string("cannot open ") + what + ": not a regular file");
    }
    size_ = std::filesystem::file_size(path, ec);
    if (ec) throw file_error(path, std::string("cannot read the size of the ") + what + ": " + ec.message());
    in_.open(path, std::ios::binary);
    if (!in_) throw file_error(path, std::string("cannot open ") + what + " for reading (check its permissions)");
  }

  /// The file's size in bytes, as reported when it was opened.
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  /// Bytes consumed so far.
  [[nodiscard]] std::uint64_t offset() const noexcept { return offset_; }
  /// Bytes left after the current offset.
  [[nodiscard]] std::uint64_t remaining() const noexcept { return size_ - offset_; }
  /// The file's path.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  /// Checks that `count` more bytes can be read, before anything is allocated for them (a corrupt size
  /// must not make a reader allocate gigabytes).
  /// \throws file_error("truncated: <context>") when fewer than `count` bytes remain.
  void require(std::uint64_t count, const std::string& context) const {
    if (count > remaining()) {
      throw file_error(path_, "truncated: " + context + " needs " + std::to_string(count) + " bytes at offset " +
                                  std::to_string(offset_) + ", the file has only " + std::to_string(remaining()) +
                                  " left");
    }
  }

  /// Reads exactly `count` bytes into `out`.
  /// \throws file_error("truncated: <context>") when fewer than `count` bytes remain.
  void read(void* out, std::uint64_t count, const std::string& context) {
    require(count, context);
    if (count == 0) return;
    if (!in_.read(static_cast<char*>(out), static_cast<std::streamsize>(count))) {
      throw file_error(path_, "truncated: reading " + context + " failed at offset " + std::to_string(offset_) +
                                  " (did the file change while it was being read?)");
    }
    offset_ += count;
  }

  /// Reads one little-endian 32-bit word.
  [[nodiscard]] std::uint32_t read_u32(const std::string& context) {
    unsigned char bytes[4];
    read(bytes, 4, context);
    return load_le_u32(bytes);
  }

 private:
  std::filesystem::path path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
  std::uint64_t offset_ = 0;
};

}  // namespace detail
}  // namespace llama2c
