/// \file
/// \brief The full umbrella: everything in `<mixprec/core.hpp>` (formats, dtypes, promotion,
/// policies, casting, loss scaling) plus the Eigen and xtensor adapters, the kernels, the layers
/// (`nn::`, `nn::sequential`), training (`train::`: optimisers, `scaled_step`, checkpoints and state
/// dicts), the scaled tensors (`scaled::` ops) and the diagnostics. Needs Eigen 3.4, xtensor 0.24
/// and nlohmann-json 3 on the include path (the CMake target `mixprec::mixprec` puts them there; in
/// the compiled mode nlohmann-json is not parsed). Code that needs none of them should include
/// `<mixprec/core.hpp>` instead.
#pragma once

// IWYU pragma: begin_exports
#include "mixprec/arrays/eigen.hpp"
#include "mixprec/arrays/row_major.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/core.hpp"

#include "mixprec/kernels/activations.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/reductions.hpp"
#include "mixprec/kernels/softmax.hpp"

#include "mixprec/nn/alibi.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/batch_norm.hpp"
#include "mixprec/nn/causal_lm.hpp"
#include "mixprec/nn/cross_entropy.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/dot_product.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/error_bound.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/group_norm.hpp"
#include "mixprec/nn/kv_cache.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/layer_types.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/nn/probe.hpp"
#include "mixprec/nn/relative_position_bias.hpp"
#include "mixprec/nn/repeated.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/nn/rotary.hpp"
#include "mixprec/nn/scaled_dot_product_attention.hpp"
#include "mixprec/nn/sequential.hpp"
#include "mixprec/nn/transformer_block.hpp"
#include "mixprec/nn/weight_cache.hpp"
#include "mixprec/nn/workspace.hpp"

#include "mixprec/scaled/block_scaling.hpp"
#include "mixprec/scaled/delayed_scaling.hpp"
#include "mixprec/scaled/float8_dot.hpp"
#include "mixprec/scaled/ops.hpp"
#include "mixprec/scaled/scale_estimate.hpp"
#include "mixprec/scaled/scaled_format.hpp"
#include "mixprec/scaled/scaled_tensor.hpp"

#include "mixprec/train/adamw.hpp"
#include "mixprec/train/clip.hpp"
#include "mixprec/train/lr_schedule.hpp"
#include "mixprec/train/optimizer.hpp"
#include "mixprec/train/rounding.hpp"
#include "mixprec/train/safetensors.hpp"
#include "mixprec/train/scaled_step.hpp"
#include "mixprec/train/sgd.hpp"
#include "mixprec/train/state_dict.hpp"

#include "mixprec/diagnostics/parity.hpp"
#include "mixprec/diagnostics/probe.hpp"
#include "mixprec/diagnostics/quantile.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/diagnostics/residual_scale_plan.hpp"
#include "mixprec/diagnostics/tensor_stats.hpp"
// IWYU pragma: end_exports
