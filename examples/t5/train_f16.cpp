// The t5 example's training run under p=f32,c=f16,o=f32 (mixprec::mixed_float16): one translation unit per
// policy, since each instantiates the whole model with its forward and backward passes (runs.hpp).
#include "train.hpp"

namespace t5_example {
template train_report train_policy<mixprec::mixed_float16>(const train_settings&, const reversal_data&, std::ostream&);
}  // namespace t5_example
