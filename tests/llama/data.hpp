/// \file
/// \brief Where the tests find the stories260K fixture: the repository's `data/stories260K` (its
/// provenance in SOURCE.md there), passed in by CMake as MIXPREC_TEST_DATA_DIR.
#pragma once

#include <filesystem>

#include <catch2/catch.hpp>

#ifndef MIXPREC_TEST_DATA_DIR
#error "MIXPREC_TEST_DATA_DIR must be defined (tests/llama/CMakeLists.txt sets it to the repository's data/)"
#endif

namespace llama_test {

/// `<repository>/data/stories260K`, after REQUIRE-ing that the model and tokenizer are there: the data
/// ships with the repository, so a missing file fails the test instead of skipping it.
inline std::filesystem::path stories260k_dir() {
  const auto dir = std::filesystem::path(MIXPREC_TEST_DATA_DIR) / "stories260K";
  INFO("stories260K is part of the repository (data/stories260K); looked in " << dir.string());
  REQUIRE(std::filesystem::is_regular_file(dir / "stories260K.bin"));
  REQUIRE(std::filesystem::is_regular_file(dir / "tok512.bin"));
  return dir;
}

}  // namespace llama_test
