// Compile-time check that std::numeric_limits of a small float comes with the type itself: this file
// includes float16.hpp alone, as a header that only needs the type would. Before the specialisation
// travelled with basic_float.hpp, mixprec/train/rounding.hpp read std::numeric_limits<float16> in
// such a context and got the primary template (is_specialized false, digits 0, max() +0): a silent
// garbage bound for its stochastic rounding. Compiling is passing.
#include <limits>

#include "mixprec/formats/float16.hpp"

namespace {

using limits = std::numeric_limits<mixprec::float16>;

static_assert(limits::is_specialized, "numeric_limits<float16> must be the specialisation, not the primary template");
// IEEE 754-2019 binary16: 11 significand bits (10 stored), emin = -14, emax = 15, largest finite
// (2 - 2^-10) * 2^15 = 65504.
static_assert(limits::digits == 11);
static_assert(limits::min_exponent == -13);
static_assert(limits::max_exponent == 16);
static_assert(static_cast<float>(limits::max()) == 65504.0f);

}  // namespace
