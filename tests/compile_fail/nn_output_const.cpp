// Must not compile: forward_into into an xt::adapt over a const buffer stops at the static_assert
// sentence of mixprec/arrays/row_major.hpp. The twin adapts the same buffer without const, and compiles.
#include <array>
#include <cstddef>
#include <vector>
#include <xtensor/xadapt.hpp>

#include <mixprec/nn/dense.hpp>

inline void project(const mixprec::nn::dense<mixprec::policy<float>>& layer, const xt::xtensor<float, 2>& x,
                    std::vector<float>& buffer) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  const float* data = buffer.data();
#else
  float* data = buffer.data();
#endif
  auto out = xt::adapt(data, buffer.size(), xt::no_ownership(), std::array<std::size_t, 2>{3, 4});
  layer.forward_into(out, x);
}
