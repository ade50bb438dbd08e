/// \file
/// \brief Private: the kernels and layers build their messages with `concat` (arch/detail/concat.hpp,
/// which says why not `operator+`).
#pragma once

#include "mixprec/arch/detail/concat.hpp"

namespace mixprec::kernels::detail {

using ::mixprec::detail::concat;

}  // namespace mixprec::kernels::detail
