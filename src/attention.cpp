// The compiled library (mixprec/kernels/compiled.hpp): attention's tiled forward and its backward.
#include "mixprec/kernels/attention.hpp"
#include "mixprec/nn/scaled_dot_product_attention.hpp"

MIXPREC_ATTENTION_INSTANTIATIONS()
MIXPREC_ATTENTION_BACKWARD_INSTANTIATIONS()
