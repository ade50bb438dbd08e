/// \file
/// \brief Forwarding header: `accumulator_t` lives in `<mixprec/accumulator.hpp>` (part of the core).
#pragma once

#include "mixprec/accumulator.hpp"  // IWYU pragma: export
