/// \file
/// \brief The light umbrella: instruction-set levels, number formats, dtypes and promotion, trees of arrays and
/// accumulator types, policies, casting and loss scaling.
/// Includes neither Eigen nor xtensor (a ctest case compiles it without them on the include path).
#pragma once

// IWYU pragma: begin_exports
#include "mixprec/version.hpp"

#include "mixprec/arch/isa.hpp"

#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/convert.hpp"
#include "mixprec/formats/finfo.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float4.hpp"
#include "mixprec/formats/float6.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/float_format.hpp"
#include "mixprec/formats/intn.hpp"
#include "mixprec/formats/numeric_limits.hpp"
#include "mixprec/formats/saturate_cast.hpp"

#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/dtypes/promotion.hpp"

#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/tree.hpp"

#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/cast.hpp"
#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/policies/policy_scope.hpp"
#include "mixprec/policies/policy_string.hpp"
#include "mixprec/policies/runtime_policy.hpp"
// IWYU pragma: end_exports
