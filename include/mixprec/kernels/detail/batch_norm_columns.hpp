/// \file
/// \brief Private: the vectorised passes of `kernels::batch_norm_sums` and `kernels::batch_norm_apply`,
/// one body (batch_norm_columns-inl.hpp) compiled for every SIMD target (`simd_avx2::batch_norm`, 8
/// lanes; `simd_avx512::batch_norm`, 16). A lane is a column: its sums are added in the portable
/// loops' order, so every level gives their bits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "mixprec/kernels/detail/simd/ops.hpp"

#define MIXPREC_SIMD_BODY "mixprec/kernels/detail/batch_norm_columns-inl.hpp"
#include "mixprec/kernels/detail/simd/foreach_target.hpp"
