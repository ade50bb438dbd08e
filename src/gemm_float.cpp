// The compiled library (mixprec/kernels/compiled.hpp): the float and float64 products.
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/packed_b.hpp"

MIXPREC_MATMUL_INSTANTIATIONS_FLOAT()
MIXPREC_MATMUL_ACCUMULATE_INSTANTIATIONS_FLOAT()
MIXPREC_PACKED_PRODUCT_INSTANTIATIONS_FLOAT()
