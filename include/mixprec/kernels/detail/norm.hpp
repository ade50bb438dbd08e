/// \file
/// \brief Private: the SIMD rows of layer_norm and rms_norm (plain and fused with the residual add),
/// written once in norm-inl.hpp and compiled per target (`simd_avx2::norm`, `simd_avx512::norm`:
/// foreach_target.hpp); norm_rows.hpp chooses them.
///
/// A row makes one trip through memory: a first pass reads it for its statistics, a second reads it
/// again from L1 (a row of 4096 floats is 16 KiB) and writes the result; no row buffer is written.
/// The sums accumulate in float64 (exact products of floats, ~2^-53 relative error per addition), so
/// the statistics are at least as accurate as the compensated float32 sums of the portable path
/// (kernels/reductions.hpp); non-finite rows and rows that would need the portable path's
/// power-of-two rescaling are reported back (the caller takes the portable path for them).
///
/// Element types: T, C, O each float, bfloat16 or float16 (`simd_avx2::convertible`). Conversions are
/// exact widenings, and roundings to nearest-even that give the scalar `round_to`'s bits (NaN included).
///
/// What differs by target is stated in the body's constants: the statistics pass keeps 2 sets of
/// float64 accumulators at 8 lanes and 4 at 16 (each set's additions are one dependent chain), so the
/// two targets add the sums in different orders and their statistics can differ in the last float64
/// bits, which can move a float32 result by one rounding (tests/kernels/norm_rows_test.cpp holds
/// every level to a long double reference). The normalisation is the same operations element for
/// element at either width. The rms_norm rows run at 8 lanes on every level: 16-lane rms_norm rows
/// gained nothing and made the translation units that use them slower to compile
/// (docs/performance.md, "Norm rows: measurements behind the design").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mixprec/kernels/detail/simd/ops.hpp"
#include "mixprec/kernels/reductions.hpp"

namespace mixprec::detail {

/// How the SIMD norm rows write their outputs.
enum class store_kind : std::uint8_t {
  cached,     ///< ordinary stores: the output stays in the caches for the next layer
  streaming,  ///< non-temporal stores, for outputs larger than the last-level cache
};

}  // namespace mixprec::detail

#define MIXPREC_SIMD_BODY "mixprec/kernels/detail/norm-inl.hpp"
#include "mixprec/kernels/detail/simd/foreach_target.hpp"
