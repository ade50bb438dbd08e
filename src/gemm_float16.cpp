// The compiled library (mixprec/kernels/compiled.hpp): the products in float16 compute.
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/packed_b.hpp"

MIXPREC_MATMUL_INSTANTIATIONS(, ::mixprec::float16)
MIXPREC_MATMUL_ACCUMULATE_INSTANTIATIONS(, ::mixprec::float16)
MIXPREC_PACKED_PRODUCT_INSTANTIATIONS(, ::mixprec::float16)
