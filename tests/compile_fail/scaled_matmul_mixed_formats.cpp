// Must not compile: a product of two scaled tensors of different formats without a named result format.
#include <mixprec/formats/float8.hpp>
#include <mixprec/scaled/ops.hpp>

inline auto product(const mixprec::scaled_tensor<mixprec::float8_e5m2>& g,
                    const mixprec::scaled_tensor<mixprec::float8_e4m3fn>& w) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  return mixprec::scaled::matmul(g, w);
#else
  return mixprec::scaled::matmul<mixprec::float8_e5m2>(g, w);
#endif
}
