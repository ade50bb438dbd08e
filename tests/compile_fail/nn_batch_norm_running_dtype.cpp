// Must not compile: a train-capable (non-const) batch_norm call whose input's statistics are wider than
// the running statistics the policy fixed at construction (float64 input, promote policy with float32
// parameters: float32 running statistics) stops at the static_assert sentence of
// mixprec/nn/batch_norm.hpp. The twin calls eval mode on a const layer, which only reads them, and
// compiles.
#include <utility>

#include <mixprec/nn/batch_norm.hpp>

using P = mixprec::policy<float, mixprec::promote, mixprec::promote>;

inline auto normalise(mixprec::nn::batch_norm<P>& bn, const xt::xtensor<double, 2>& x) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  return bn(x, mixprec::nn::mode::train);
#else
  return std::as_const(bn)(x, mixprec::nn::mode::eval);
#endif
}
