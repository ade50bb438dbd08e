/// \file
/// \brief Where the tests find the stories260K fixture (never copied into the repository): the folder
/// `shared/data` beside the repository root, passed in by CMake as MIXPREC_SHARED_DATA_DIR.
#pragma once

#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#ifndef MIXPREC_SHARED_DATA_DIR
#error "MIXPREC_SHARED_DATA_DIR must be defined (tests/llama/CMakeLists.txt sets it to <repo>/../shared/data)"
#endif

namespace llama_test {

/// `<shared data>/stories260K`.
inline std::filesystem::path stories260k_dir() {
  return std::filesystem::path(MIXPREC_SHARED_DATA_DIR) / "stories260K";
}

/// True when stories260K.bin and tok512.bin are present; otherwise WARNs (the test then checks nothing).
inline bool stories260k_available() {
  const auto dir = stories260k_dir();
  if (std::filesystem::is_regular_file(dir / "stories260K.bin") && std::filesystem::is_regular_file(dir / "tok512.bin")) {
    return true;
  }
  WARN("SKIPPED: stories260K data not found in " + dir.string() +
       " (expected at shared/data/stories260K beside the repository root; see SOURCE.md there)");
  return false;
}

}  // namespace llama_test
