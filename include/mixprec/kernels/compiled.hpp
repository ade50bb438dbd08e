/// \file
/// \brief The compiled mode: the kernels' instantiations that a program takes from the precompiled
/// library `mixprec::compiled` instead of generating them in every translation unit ({fmt}'s
/// `FMT_HEADER_ONLY` against its compiled library, spdlog's `SPDLOG_COMPILED_LIB`).
///
/// - **Header-only** (the default, CMake target `mixprec::mixprec`): every translation unit that calls
///   a kernel instantiates it and generates its code: the GEMM engine for every instruction set, the
///   Eigen fallback products, the SIMD rows, the threads.
/// - **Compiled** (`MIXPREC_COMPILED` defined; linking the CMake target `mixprec::compiled` defines it
///   and links the library): the kernels' headers declare the instantiations listed beside each
///   template (`MIXPREC_*_INSTANTIATIONS` in kernels/gemm.hpp, kernels/packed_b.hpp,
///   kernels/matmul_accumulate.hpp, kernels/detail/activation_rows.hpp, kernels/detail/norm_rows.hpp,
///   kernels/softmax.hpp, kernels/attention.hpp, nn/scaled_dot_product_attention.hpp) `extern
///   template`, and the library (src/) defines them once. A translation unit then parses the
///   templates but generates none of those functions. A type the lists do not hold (float8 weights,
///   complex products, a float64 input to a bfloat16 product) is instantiated from the header as in
///   header-only mode: the same code, the same bits.
///
/// The lists hold the compute types float, bfloat16 and float16 (float64 where the layers compute in
/// it) with each operand in float32 or in the compute type: what the layers generate under the
/// policies of policies/policy.hpp. A program uses one mode in all its translation units (the
/// library is built with the header definitions, so mixing the modes is harmless but gains nothing).
#pragma once

/// 1 when this translation unit takes the listed instantiations from the compiled library.
#if defined(MIXPREC_COMPILED) && !defined(MIXPREC_COMPILED_LIBRARY)
#define MIXPREC_EXTERN_KERNELS 1
#else
#define MIXPREC_EXTERN_KERNELS 0
#endif

// The type combinations of the lists. `F(E, C, T1, ..., Tn)` for each choice of every Ti in {float, C}
// (C a 16-bit compute type; float compute is listed on its own, as it has one combination).
#define MIXPREC_OPERANDS_1(F, E, C, ...) F(E, C, __VA_ARGS__, float) F(E, C, __VA_ARGS__, C)
#define MIXPREC_OPERANDS_2(F, E, C, ...) \
  MIXPREC_OPERANDS_1(F, E, C, __VA_ARGS__, float) MIXPREC_OPERANDS_1(F, E, C, __VA_ARGS__, C)
#define MIXPREC_OPERANDS_3(F, E, C, ...) \
  MIXPREC_OPERANDS_2(F, E, C, __VA_ARGS__, float) MIXPREC_OPERANDS_2(F, E, C, __VA_ARGS__, C)
/// `F(E, C, T1)` for T1 in {float, C}.
#define MIXPREC_FOR_OPERANDS_1(F, E, C) F(E, C, float) F(E, C, C)
/// `F(E, C, T1, T2)` for the 4 choices of T1, T2 in {float, C}.
#define MIXPREC_FOR_OPERANDS_2(F, E, C) F(E, C, float, float) F(E, C, float, C) F(E, C, C, float) F(E, C, C, C)
/// `F(E, C, T1, T2, T3)` for the 8 choices.
#define MIXPREC_FOR_OPERANDS_3(F, E, C) MIXPREC_OPERANDS_2(F, E, C, float) MIXPREC_OPERANDS_2(F, E, C, C)
/// `F(E, C, T1, T2, T3, T4)` for the 16 choices.
#define MIXPREC_FOR_OPERANDS_4(F, E, C) MIXPREC_OPERANDS_3(F, E, C, float) MIXPREC_OPERANDS_3(F, E, C, C)

/// `F(E, T)` for the element types of the SIMD rows: float, bfloat16, float16.
#define MIXPREC_FOR_ROW_TYPES(F, E) F(E, float) F(E, ::mixprec::bfloat16) F(E, ::mixprec::float16)
