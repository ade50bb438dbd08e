/// \file
/// \brief The full umbrella: everything in `<mixprec/core.hpp>` (formats, dtypes, promotion,
/// policies, casting, loss scaling) plus the Eigen and xtensor adapters. Needs Eigen 3.4 and
/// xtensor 0.24 on the include path (the CMake target `mixprec::mixprec` puts them there). Code that
/// needs neither should include `<mixprec/core.hpp>` instead.
#pragma once

// IWYU pragma: begin_exports
#include "mixprec/core.hpp"
#include "mixprec/eigen.hpp"
#include "mixprec/xtensor.hpp"
// IWYU pragma: end_exports
