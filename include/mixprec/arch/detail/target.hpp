/// \file
/// \brief Private: how code for an instruction-set level is compiled into a program built without
/// `-m` flags, and kept apart from the same code compiled with other flags.
///
/// 1. A function written for a level carries `MIXPREC_TARGET_AVX2`, `MIXPREC_TARGET_AVX512` or
///    `MIXPREC_TARGET_AVX512BF16` (GCC/Clang `target` attributes: intrinsics of that level compile
///    inside it with no command-line flag). Its caller dispatches on `mixprec::active_isa()` once per
///    operation; a target function is never inlined into a caller of a lower level.
/// 2. Every such function lives in `namespace mixprec::detail::MIXPREC_ISA_BASELINE` (an inline
///    namespace, opened with `MIXPREC_BEGIN_ISA_NAMESPACE`), whose name spells the translation unit's
///    own target macros. A target attribute *adds* features to the command line's, so one inline
///    function compiled in a `-march=native` TU and in a plain TU has two different bodies; with the
///    baseline in the name they are two symbols, and the linker cannot pick the `-march=native` body
///    for the plain TU's call (numpy#25274 and botan#5260 crashed that way).
/// 3. Only pointers, sizes and scalars cross from a caller into a target function: vector types in a
///    signature change the ABI between levels (Clang rejects `__m512` parameters in non-AVX-512 code).
#pragma once

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && !defined(MIXPREC_NO_SIMD)
/// 1 where the x86 fast paths are compiled (GCC or Clang on x86); define MIXPREC_NO_SIMD to keep only
/// the portable code.
#define MIXPREC_X86_DISPATCH 1
#define MIXPREC_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
/// MIXPREC_TARGET_AVX2 for the small vector helpers of the kernels' inner loops (a load, a rounding, an
/// exp of 8 lanes), always inlined into their AVX2 callers: GCC's inliner otherwise keeps some as
/// calls, which costs a call and a reload of every constant per vector.
#define MIXPREC_TARGET_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline))
#define MIXPREC_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
/// MIXPREC_TARGET_AVX512 for small vector helpers, always inlined (MIXPREC_TARGET_AVX2_INLINE's reason).
#define MIXPREC_TARGET_AVX512_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"), always_inline))
#define MIXPREC_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
/// MIXPREC_TARGET_AVX512BF16 for small vector helpers, always inlined (MIXPREC_TARGET_AVX2_INLINE's reason).
#define MIXPREC_TARGET_AVX512BF16_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c"), always_inline))
/// The avx512bf16 level plus AVX512_VBMI, for kernels called only where
/// `mixprec::detail::cpu_has_avx512_vbmi()` is also true (arch/isa.hpp: not part of any level).
#define MIXPREC_TARGET_AVX512BF16_VBMI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,f16c")))
/// MIXPREC_TARGET_AVX512BF16_VBMI for small vector helpers, always inlined (MIXPREC_TARGET_AVX2_INLINE's reason).
#define MIXPREC_TARGET_AVX512BF16_VBMI_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,f16c"), always_inline))
#else
#define MIXPREC_X86_DISPATCH 0
#endif

// The baseline key: one token per target macro that changes generated code, empty when the macro is
// undefined. Pasted together below (an empty argument pastes to nothing).
#ifdef __SSE3__
#define MIXPREC_DETAIL_ISA_K01 _sse3
#else
#define MIXPREC_DETAIL_ISA_K01
#endif
#ifdef __SSSE3__
#define MIXPREC_DETAIL_ISA_K02 _ssse3
#else
#define MIXPREC_DETAIL_ISA_K02
#endif
#ifdef __SSE4_1__
#define MIXPREC_DETAIL_ISA_K03 _sse41
#else
#define MIXPREC_DETAIL_ISA_K03
#endif
#ifdef __SSE4_2__
#define MIXPREC_DETAIL_ISA_K04 _sse42
#else
#define MIXPREC_DETAIL_ISA_K04
#endif
#ifdef __AVX__
#define MIXPREC_DETAIL_ISA_K05 _avx
#else
#define MIXPREC_DETAIL_ISA_K05
#endif
#ifdef __AVX2__
#define MIXPREC_DETAIL_ISA_K06 _avx2
#else
#define MIXPREC_DETAIL_ISA_K06
#endif
#ifdef __FMA__
#define MIXPREC_DETAIL_ISA_K07 _fma
#else
#define MIXPREC_DETAIL_ISA_K07
#endif
#ifdef __F16C__
#define MIXPREC_DETAIL_ISA_K08 _f16c
#else
#define MIXPREC_DETAIL_ISA_K08
#endif
#ifdef __BMI2__
#define MIXPREC_DETAIL_ISA_K09 _bmi2
#else
#define MIXPREC_DETAIL_ISA_K09
#endif
#ifdef __AVX512F__
#define MIXPREC_DETAIL_ISA_K10 _avx512f
#else
#define MIXPREC_DETAIL_ISA_K10
#endif
#ifdef __AVX512BW__
#define MIXPREC_DETAIL_ISA_K11 _avx512bw
#else
#define MIXPREC_DETAIL_ISA_K11
#endif
#ifdef __AVX512VL__
#define MIXPREC_DETAIL_ISA_K12 _avx512vl
#else
#define MIXPREC_DETAIL_ISA_K12
#endif
#ifdef __AVX512DQ__
#define MIXPREC_DETAIL_ISA_K13 _avx512dq
#else
#define MIXPREC_DETAIL_ISA_K13
#endif
#ifdef __AVX512BF16__
#define MIXPREC_DETAIL_ISA_K14 _avx512bf16
#else
#define MIXPREC_DETAIL_ISA_K14
#endif
#ifdef __AVX512VBMI__
#define MIXPREC_DETAIL_ISA_K15 _avx512vbmi
#else
#define MIXPREC_DETAIL_ISA_K15
#endif
#ifdef __AVX512VNNI__
#define MIXPREC_DETAIL_ISA_K16 _avx512vnni
#else
#define MIXPREC_DETAIL_ISA_K16
#endif
#ifdef __AVX512FP16__
#define MIXPREC_DETAIL_ISA_K17 _avx512fp16
#else
#define MIXPREC_DETAIL_ISA_K17
#endif
#ifdef MIXPREC_NO_SIMD
#define MIXPREC_DETAIL_ISA_K18 _nosimd
#else
#define MIXPREC_DETAIL_ISA_K18
#endif

#define MIXPREC_DETAIL_ISA_PASTE(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s) \
  a##b##c##d##e##f##g##h##i##j##k##l##m##n##o##p##q##r##s
#define MIXPREC_DETAIL_ISA_EXPAND(...) MIXPREC_DETAIL_ISA_PASTE(__VA_ARGS__)

/// The name of the inline namespace that holds this translation unit's level-specific code, e.g.
/// `baseline` for plain x86-64 or `baseline_sse3_..._avx512bf16_...` under `-march=native`.
#define MIXPREC_ISA_BASELINE                                                                                  \
  MIXPREC_DETAIL_ISA_EXPAND(baseline, MIXPREC_DETAIL_ISA_K01, MIXPREC_DETAIL_ISA_K02, MIXPREC_DETAIL_ISA_K03, \
                            MIXPREC_DETAIL_ISA_K04, MIXPREC_DETAIL_ISA_K05, MIXPREC_DETAIL_ISA_K06,           \
                            MIXPREC_DETAIL_ISA_K07, MIXPREC_DETAIL_ISA_K08, MIXPREC_DETAIL_ISA_K09,           \
                            MIXPREC_DETAIL_ISA_K10, MIXPREC_DETAIL_ISA_K11, MIXPREC_DETAIL_ISA_K12,           \
                            MIXPREC_DETAIL_ISA_K13, MIXPREC_DETAIL_ISA_K14, MIXPREC_DETAIL_ISA_K15,           \
                            MIXPREC_DETAIL_ISA_K16, MIXPREC_DETAIL_ISA_K17, MIXPREC_DETAIL_ISA_K18)

/// Opens `namespace mixprec::detail` and its baseline-keyed inline namespace; close with
/// `MIXPREC_END_ISA_NAMESPACE`.
#define MIXPREC_BEGIN_ISA_NAMESPACE \
  namespace mixprec::detail {       \
  inline namespace MIXPREC_ISA_BASELINE {
#define MIXPREC_END_ISA_NAMESPACE \
  }                               \
  }
