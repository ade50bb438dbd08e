/// \file
/// \brief Private: which instruction sets this translation unit targets, as the name of an inline
/// namespace (`MIXPREC_DETAIL_CONVERT_ISA`, arch's baseline key `MIXPREC_ISA_BASELINE`) and the
/// macros `MIXPREC_DETAIL_CONVERT_{AVX512,AVX512BF16,F16C}`. Users include
/// `<mixprec/formats/convert.hpp>` or `<mixprec/formats/basic_float.hpp>`.
///
/// Every function whose machine code the compiler builds differently for these targets and that the
/// bulk conversion calls (the scalar codec of float_codec.hpp, the lane-wise and x86 code of
/// convert) lives in that namespace, so translation units compiled with different flags never share
/// one of them, and the linker cannot hand an AVX-512 body to a caller built for a CPU without it.
#pragma once

#include "mixprec/arch/detail/target.hpp"

// Which instruction sets `mixprec::convert` uses in this translation unit, fixed by the compiler's
// target macros (-mavx512f ..., -march=...). Define MIXPREC_NO_SIMD to force the portable loops.
#if !defined(MIXPREC_NO_SIMD) && (defined(__x86_64__) || defined(__i386__)) && defined(__AVX512F__) && \
    defined(__AVX512BW__) && defined(__AVX512VL__)
#define MIXPREC_DETAIL_CONVERT_AVX512 1
#if defined(__AVX512BF16__)
#define MIXPREC_DETAIL_CONVERT_AVX512BF16 1
#endif
#elif !defined(MIXPREC_NO_SIMD) && (defined(__x86_64__) || defined(__i386__)) && defined(__F16C__) && defined(__AVX__)
#define MIXPREC_DETAIL_CONVERT_F16C 1
#endif

// The namespace is named after every target macro that changes generated code (arch's baseline key:
// `baseline` for plain x86-64, `baseline_sse3_..._avx2_fma_f16c` under -march=haswell, ...).
#define MIXPREC_DETAIL_CONVERT_ISA MIXPREC_ISA_BASELINE
