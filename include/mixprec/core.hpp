/// \file
/// \brief The light umbrella: number formats, dtypes, promotion, policies, casting and loss scaling.
/// Includes neither Eigen nor xtensor (a ctest case compiles it without them on the include path).
#pragma once

// IWYU pragma: begin_exports
#include "mixprec/all_finite.hpp"
#include "mixprec/cast.hpp"
#include "mixprec/dtype.hpp"
#include "mixprec/accumulator.hpp"
#include "mixprec/loss_scale.hpp"
#include "mixprec/policy.hpp"
#include "mixprec/policy_string.hpp"
#include "mixprec/promotion.hpp"
#include "mixprec/runtime_policy.hpp"
#include "mixprec/tree.hpp"
#include "mixprec/types.hpp"
#include "mixprec/types/convert.hpp"
// IWYU pragma: end_exports
