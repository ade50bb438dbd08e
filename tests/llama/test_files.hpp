/// \file
/// \brief Helpers for tests that write small llama2.c files: little-endian byte builders and a temporary
/// file removed at scope exit.
#pragma once

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>

namespace llama_test {

/// Appends `v` as 4 little-endian bytes (byte by byte, independent of the host's order).
inline void put_u32(std::string& bytes, std::uint32_t v) {
  for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<char>((v >> (8 * k)) & 0xffu));
}
/// Appends a little-endian int32.
inline void put_i32(std::string& bytes, std::int32_t v) { put_u32(bytes, static_cast<std::uint32_t>(v)); }
/// Appends a little-endian IEEE binary32.
inline void put_f32(std::string& bytes, float v) { put_u32(bytes, std::bit_cast<std::uint32_t>(v)); }

/// A uniquely named file in the temporary directory, deleted when this object dies.
class temp_file {
 public:
  /// Creates `<tmp>/mixprec_llama_<stem>_<random>.bin` holding `contents`.
  temp_file(std::string_view stem, const std::string& contents) {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("mixprec_llama_" + std::string(stem) + "_" + std::to_string(rd()) + std::to_string(rd()) + ".bin");
    std::ofstream out(path_, std::ios::binary);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  ~temp_file() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace llama_test
