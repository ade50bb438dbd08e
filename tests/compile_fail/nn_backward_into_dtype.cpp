// Must not compile: backward_into a dx whose element type is not the forward input's stops at the
// static_assert sentence of mixprec/nn/detail/arrays.hpp. The twin writes into a float dx (the input's
// type), and compiles.
#include <mixprec/nn/dense.hpp>

using P = mixprec::mixed_bfloat16;

inline void backward(const mixprec::nn::dense<P>& layer, const mixprec::nn::dense<P>::saved<float>& ctx,
                     const xt::xtensor<float, 2>& dy, mixprec::nn::dense<P>::gradients& grads) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  xt::xtensor<mixprec::bfloat16, 2> dx = xt::xtensor<mixprec::bfloat16, 2>::from_shape({2, 4});
#else
  xt::xtensor<float, 2> dx = xt::xtensor<float, 2>::from_shape({2, 4});
#endif
  layer.backward_into(dx, ctx, dy, grads);
}
