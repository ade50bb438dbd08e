/// \file
/// \brief The light umbrella: number formats, dtypes, promotion, policies and loss scaling.
/// Includes neither Eigen nor xtensor (a ctest case compiles it without them on the include path).
#pragma once

// IWYU pragma: begin_exports
#include "mixprec/dtype.hpp"
#include "mixprec/policy.hpp"
#include "mixprec/types.hpp"
// IWYU pragma: end_exports
