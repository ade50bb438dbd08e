/// \file
/// \brief Every number format of mixprec: the small floats, their limits, finfo, saturate_cast and
/// the sub-byte integers. Light: no Eigen, no xtensor.
#pragma once

// IWYU pragma: begin_exports
#include "mixprec/types/basic_float.hpp"
#include "mixprec/types/bfloat16.hpp"
#include "mixprec/types/finfo.hpp"
#include "mixprec/types/float16.hpp"
#include "mixprec/types/float4.hpp"
#include "mixprec/types/float6.hpp"
#include "mixprec/types/float8.hpp"
#include "mixprec/types/float_format.hpp"
#include "mixprec/types/intn.hpp"
#include "mixprec/types/numeric_limits.hpp"
#include "mixprec/types/saturate_cast.hpp"
// IWYU pragma: end_exports
