// Must not compile: a layer given a std::vector (no shape) stops at one static_assert sentence in
// mixprec/arrays/row_major.hpp saying what to pass instead. The twin passes the same buffer through
// xt::adapt with its shape, and compiles.
#include <array>
#include <cstddef>
#include <vector>
#include <xtensor/xadapt.hpp>

#include <mixprec/nn/dense.hpp>

inline auto project(const mixprec::nn::dense<mixprec::policy<float>>& layer, const std::vector<float>& x) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  return layer(x);
#else
  return layer(xt::adapt(x.data(), x.size(), xt::no_ownership(), std::array<std::size_t, 2>{x.size() / 4, 4}));
#endif
}
