/// \file
/// \brief Private: which instruction sets this translation unit targets, as the name of an inline
/// namespace (`MIXPREC_DETAIL_CONVERT_ISA`: isa_avx512bf16, isa_avx512, isa_f16c or isa_portable)
/// and the macros `MIXPREC_DETAIL_CONVERT_{AVX512,AVX512BF16,F16C}`. Users include
/// `<mixprec/formats/convert.hpp>` or `<mixprec/formats/basic_float.hpp>`.
///
/// Every function whose machine code the compiler builds differently for these targets and that the
/// bulk conversion calls (the scalar codec of float_codec.hpp, the lane-wise and x86 code of
/// convert) lives in that namespace, so translation units compiled with different flags never share
/// one of them, and the linker cannot hand an AVX-512 body to a caller built for a CPU without it.
#pragma once

// Which instruction sets `mixprec::convert` uses in this translation unit, fixed by the compiler's
// target macros (-mavx512f ..., -march=...). Define MIXPREC_NO_SIMD to force the portable loops.
// The namespace also names the widest vector extension the compiler may use for ordinary code
// (AVX, AVX2, AVX-512F), so that a "portable" loop compiled with -mavx2 (VEX-encoded even when
// scalar) is not shared with one compiled for baseline x86-64.
#if !defined(MIXPREC_NO_SIMD) && (defined(__x86_64__) || defined(__i386__)) && defined(__AVX512F__) && \
    defined(__AVX512BW__) && defined(__AVX512VL__)
#define MIXPREC_DETAIL_CONVERT_AVX512 1
#if defined(__AVX512BF16__)
#define MIXPREC_DETAIL_CONVERT_AVX512BF16 1
#define MIXPREC_DETAIL_CONVERT_ISA isa_avx512bf16
#else
#define MIXPREC_DETAIL_CONVERT_ISA isa_avx512
#endif
#elif !defined(MIXPREC_NO_SIMD) && (defined(__x86_64__) || defined(__i386__)) && defined(__F16C__) && defined(__AVX__)
#define MIXPREC_DETAIL_CONVERT_F16C 1
#if defined(__AVX512F__)
#define MIXPREC_DETAIL_CONVERT_ISA isa_f16c_avx512f
#elif defined(__AVX2__)
#define MIXPREC_DETAIL_CONVERT_ISA isa_f16c_avx2
#else
#define MIXPREC_DETAIL_CONVERT_ISA isa_f16c
#endif
#elif defined(__AVX512F__)
#define MIXPREC_DETAIL_CONVERT_ISA isa_portable_avx512f
#elif defined(__AVX2__)
#define MIXPREC_DETAIL_CONVERT_ISA isa_portable_avx2
#elif defined(__AVX__)
#define MIXPREC_DETAIL_CONVERT_ISA isa_portable_avx
#else
#define MIXPREC_DETAIL_CONVERT_ISA isa_portable
#endif
