// Must not compile: decoding a layer_norm causal_lm stops at the static_assert sentence of
// mixprec/nn/causal_lm.hpp (decoding fuses the residual adds into rms_norm). The twin decodes an
// rms_norm model, and compiles.
#include <mixprec/nn/causal_lm.hpp>

namespace nn = mixprec::nn;
using P = mixprec::policy<float>;
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using model = nn::causal_lm<P, nn::layer_norm<P>>;
#else
using model = nn::causal_lm<P, nn::rms_norm<P>>;
#endif

inline auto start(const model& m) { return m.make_decode_state(16); }
