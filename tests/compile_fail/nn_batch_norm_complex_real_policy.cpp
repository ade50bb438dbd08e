// Must not compile: complex input to a train-capable batch_norm whose policy computes in float32 (a
// real running mean cannot hold the complex batch mean) stops at the static_assert sentence of
// mixprec/nn/batch_norm.hpp. The twin uses a policy with a complex64 compute type, and compiles.
#include <complex>

#include <mixprec/nn/batch_norm.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using P = mixprec::policy<float>;
#else
using P = mixprec::policy<float, std::complex<float>, std::complex<float>>;
#endif

inline auto normalise(mixprec::nn::batch_norm<P>& bn, const xt::xtensor<std::complex<float>, 2>& x) {
  return bn(x, mixprec::nn::mode::train);
}
