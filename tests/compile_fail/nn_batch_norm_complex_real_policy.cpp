// Must not compile: complex input to a train-capable batch_norm whose running statistics are real
// (Input the param type, float32: a real running mean cannot hold the complex batch mean) stops at the
// static_assert sentence of mixprec/nn/batch_norm.hpp. The twin declares the input type,
// batch_norm<P, std::complex<float>> (a complex64 running mean), and compiles.
#include <complex>

#include <mixprec/nn/batch_norm.hpp>

using P = mixprec::policy<float>;
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using layer = mixprec::nn::batch_norm<P>;
#else
using layer = mixprec::nn::batch_norm<P, std::complex<float>>;
#endif

inline auto normalise(layer& bn, const xt::xtensor<std::complex<float>, 2>& x) {
  return bn(x, mixprec::nn::mode::train);
}
