/// \file
/// \brief Private: the vector operations the SIMD kernels are written against (ops-inl.hpp), compiled
/// for each x86 target (`simd_avx2`: 8 lanes, `simd_avx512`: 16; foreach_target.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/detail/convert_f16c.hpp"
#include "mixprec/formats/detail/convert_x86.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float_format.hpp"

#define MIXPREC_SIMD_BODY "mixprec/kernels/detail/simd/ops-inl.hpp"
#include "mixprec/kernels/detail/simd/foreach_target.hpp"
