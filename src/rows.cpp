// The compiled library (mixprec/kernels/compiled.hpp): the SIMD rows of the activations, norms and
// softmax, the batch normalisation passes, and the AdamW step.
#include "mixprec/kernels/adamw.hpp"
#include "mixprec/kernels/batch_norm.hpp"
#include "mixprec/kernels/detail/activation_rows.hpp"
#include "mixprec/kernels/detail/norm_rows.hpp"
#include "mixprec/kernels/softmax.hpp"

#if MIXPREC_X86_DISPATCH
MIXPREC_ACTIVATION_ROW_INSTANTIATIONS()
#endif
MIXPREC_NORM_ROW_INSTANTIATIONS()
MIXPREC_SOFTMAX_ROW_INSTANTIATIONS()
MIXPREC_ADAMW_INSTANTIATIONS()
MIXPREC_BATCH_NORM_INSTANTIATIONS()
