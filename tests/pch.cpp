// The translation unit that builds the tests' precompiled header (Catch2, Eigen, xtensor); see
// mixprec_add_test in tests/CMakeLists.txt.
