// The t5 example's training run under p=f32,c=f32,o=f32 (mixprec::full_precision): one translation unit per
// policy, since each instantiates the whole model with its forward and backward passes (runs.hpp).
#include "train.hpp"

namespace t5_example {
template train_report train_policy<mixprec::full_precision>(const train_settings&, const reversal_data&, std::ostream&);
}  // namespace t5_example
