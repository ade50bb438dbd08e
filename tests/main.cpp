// The Catch2 v2 main, compiled once for every test executable. Every test case carries the tag of its
// file, "[#<file name without extension>]" (Catch2's --filenames-as-tags, always on): an area's
// executable holds several test files, and tests/CMakeLists.txt registers each file's cases with ctest
// by that tag (`mixprec_nn_tests "[#dense_test]"` runs dense_test.cpp's).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  Catch::Session session;
  session.configData().filenamesAsTags = true;
  if (const int status = session.applyCommandLine(argc, argv); status != 0) return status;
  return session.run();
}
