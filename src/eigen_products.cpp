// The compiled library (mixprec/kernels/compiled.hpp): Eigen's products (the portable level, float64
// and complex compute).
#include "mixprec/kernels/matmul_accumulate.hpp"

MIXPREC_EIGEN_PRODUCT_INSTANTIATIONS()
MIXPREC_EIGEN_ACCUMULATE_INSTANTIATIONS()
