/// \file
/// \brief Private: the vectorised AdamW step of `kernels::adamw_update` on float32 state, one body
/// (adamw_rows-inl.hpp) compiled for every SIMD target (`simd_avx2::adamw::row`, 8 lanes;
/// `simd_avx512::adamw::row`, 16). Each lane does kernels/adamw_element.hpp's `adamw_element` operation for
/// operation (IEEE additions, multiplications, divisions and square roots, each rounded once, none
/// fused), so every level gives the scalar code's bits.
#pragma once

#include <algorithm>
#include <cstddef>

#include "mixprec/kernels/adamw_element.hpp"
#include "mixprec/kernels/detail/simd/ops.hpp"

#define MIXPREC_SIMD_BODY "mixprec/kernels/detail/adamw_rows-inl.hpp"
#include "mixprec/kernels/detail/simd/foreach_target.hpp"
