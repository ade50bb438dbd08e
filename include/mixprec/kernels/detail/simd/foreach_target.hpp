/// \file
/// \brief Private: compiles one SIMD body once per x86 target, as Highway's foreach_target.h does.
///
/// A kernel written once against the operations of ops-inl.hpp lives in a body file (`*-inl.hpp`, no
/// include guard). Its driver header defines `MIXPREC_SIMD_BODY` as the body's path and includes this
/// file, which includes the body twice inside the per-baseline namespace (arch/detail/target.hpp):
///
/// | namespace | `MIXPREC_SIMD_LANES` | target attributes | float vector `vf` |
/// |---|---|---|---|
/// | `simd_avx2` | 8 | `MIXPREC_TARGET_AVX2` | `__m256` |
/// | `simd_avx512` | 16 | `MIXPREC_TARGET_AVX512` | `__m512` |
///
/// Inside a body, `MIXPREC_SIMD_FN` marks a function called from portable code (a row: only pointers,
/// sizes and scalars in its signature), `MIXPREC_SIMD_INLINE` a vector helper, always inlined into its
/// callers of the same target. Both targets also have the 8-lane `vf8` (`__m256`), for rows whose
/// order of operations is fixed in steps of 8 whatever the width. A kernel's dispatch (the `kernels/`
/// operation) calls `simd_avx512::f` or `simd_avx2::f` by `mixprec::active_isa()`.
///
/// Without `MIXPREC_X86_DISPATCH` nothing is compiled: the kernels keep only their portable code.
// No include guard: included once per body.

#include "mixprec/arch/detail/target.hpp"

// Included without MIXPREC_SIMD_BODY (on its own, as the header check compiles every header) it does
// nothing.
#if MIXPREC_X86_DISPATCH && defined(MIXPREC_SIMD_BODY)
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE

#define MIXPREC_SIMD_NS simd_avx2
#define MIXPREC_SIMD_LANES 8
#define MIXPREC_SIMD_FN MIXPREC_TARGET_AVX2
#define MIXPREC_SIMD_INLINE MIXPREC_TARGET_AVX2_INLINE
#include MIXPREC_SIMD_BODY
#undef MIXPREC_SIMD_NS
#undef MIXPREC_SIMD_LANES
#undef MIXPREC_SIMD_FN
#undef MIXPREC_SIMD_INLINE

#define MIXPREC_SIMD_NS simd_avx512
#define MIXPREC_SIMD_LANES 16
#define MIXPREC_SIMD_FN MIXPREC_TARGET_AVX512
#define MIXPREC_SIMD_INLINE MIXPREC_TARGET_AVX512_INLINE
#include MIXPREC_SIMD_BODY
#undef MIXPREC_SIMD_NS
#undef MIXPREC_SIMD_LANES
#undef MIXPREC_SIMD_FN
#undef MIXPREC_SIMD_INLINE

MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH && defined(MIXPREC_SIMD_BODY)

#undef MIXPREC_SIMD_BODY
