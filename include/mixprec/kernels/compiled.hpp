/// \file
/// \brief The compiled mode: the kernels' instantiations that a program takes from the precompiled
/// library `mixprec::compiled` instead of generating them in every translation unit ({fmt}'s
/// `FMT_HEADER_ONLY` against its compiled library, spdlog's `SPDLOG_COMPILED_LIB`).
///
/// - **Header-only** (the default, CMake target `mixprec::mixprec`): every translation unit that calls
///   a kernel instantiates it and generates its code: the GEMM engine for every instruction set, the
///   Eigen fallback products, the SIMD rows, the threads.
/// - **Compiled** (`MIXPREC_COMPILED` defined; linking the CMake target `mixprec::compiled` defines it
///   and links the library): the kernels' headers declare the instantiations listed at their end
///   (`MIXPREC_*_INSTANTIATIONS` in kernels/gemm.hpp, kernels/packed_b.hpp,
///   kernels/matmul_accumulate.hpp, kernels/detail/activation_rows.hpp, kernels/detail/norm_rows.hpp,
///   kernels/softmax.hpp, kernels/attention.hpp, kernels/adamw.hpp, nn/scaled_dot_product_attention.hpp) `extern
///   template`, and the library (src/) defines them once. A translation unit then parses the
///   templates but generates none of those functions. Anything the lists do not hold (a float8
///   compute type, a caller's own scratch type for `attention`) is instantiated from the header as in
///   header-only mode: the same code, the same bits.
///
/// The library also holds the one definition of the safetensors header's JSON reader and writer
/// (train/detail/safetensors_json.hpp) and of the optimisers' state saving and loading
/// (train/detail/optimizer_state.hpp), `MIXPREC_EXTERN_CHECKPOINTS`: a compiled-mode translation unit
/// that trains or saves checkpoints parses neither.
///
/// The lists hold the GEMM engine per compute type (float, bfloat16, float16: the engine erases the
/// element types of a, b and y, so one instantiation serves them all), Eigen's products per
/// accumulator type, and the row kernels and attention for their element types. A program uses one
/// mode in all its translation units (the library is built from the header definitions, so mixing
/// the modes is harmless but gains nothing).
#pragma once

/// 1 when this translation unit takes the listed instantiations from the compiled library.
#if defined(MIXPREC_COMPILED) && !defined(MIXPREC_COMPILED_LIBRARY)
#define MIXPREC_EXTERN_KERNELS 1
#else
#define MIXPREC_EXTERN_KERNELS 0
#endif

/// 1 when this translation unit takes the safetensors header's JSON reader and writer and the
/// optimisers' state saving and loading (train/detail/) from the compiled library instead of parsing them.
#define MIXPREC_EXTERN_CHECKPOINTS MIXPREC_EXTERN_KERNELS

// The type combinations of the lists: `F(E, C, T1, ..., Tn)` for each choice of every Ti in {float, C}
// (C a 16-bit compute type; float compute is listed on its own, as it has one combination).
/// `F(E, C, T1)` for T1 in {float, C}.
#define MIXPREC_FOR_OPERANDS_1(F, E, C) F(E, C, float) F(E, C, C)
/// `F(E, C, T1, T2)` for the 4 choices of T1, T2 in {float, C}.
#define MIXPREC_FOR_OPERANDS_2(F, E, C) F(E, C, float, float) F(E, C, float, C) F(E, C, C, float) F(E, C, C, C)

/// `F(E, T)` for the element types of the SIMD rows: float, bfloat16, float16.
#define MIXPREC_FOR_ROW_TYPES(F, E) F(E, float) F(E, ::mixprec::bfloat16) F(E, ::mixprec::float16)
/// `F(E, C)` for the real compute types of attention: float64 and the row types.
#define MIXPREC_FOR_REAL_COMPUTE_TYPES(F, E) F(E, double) MIXPREC_FOR_ROW_TYPES(F, E)
/// `F(E, Acc)` for every accumulator type (`accumulator_t`): float, double and their complex types.
#define MIXPREC_FOR_ACCUMULATOR_TYPES(F, E) \
  F(E, float) F(E, double) F(E, std::complex<float>) F(E, std::complex<double>)
