// The compiled library (mixprec/kernels/compiled.hpp): the products in bfloat16 compute.
#include "mixprec/kernels/packed_b.hpp"

MIXPREC_ENGINE_INSTANTIATIONS_BFLOAT16()
