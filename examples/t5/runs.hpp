/// \file
/// \brief The t5 example's two modes as plain functions, so that main.cpp instantiates no model: the
/// training run of one policy (`train_policy<P>`, defined in train.hpp and compiled once per policy, one
/// translation unit each: train_f32.cpp, train_bf16.cpp, train_f16.cpp) and the inference parity study
/// (`run_parity`, parity.cpp). Also their settings and what they report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"
#include "mixprec/policies/policy.hpp"
#include "reversal_data.hpp"

namespace t5_example {

/// The settings of one training run (the defaults are the example's full run, docs/example_t5.md).
struct train_settings {
  t5_config model;                ///< the shape (vocab is taken from the data)
  std::int64_t steps = 2000;      ///< optimiser steps
  std::size_t batch = 32;         ///< chunks per step
  std::uint64_t seed = 1337;      ///< initialisation (seed), batches (seed + 1), validation lengths (seed + 2)
  double learning_rate = 3e-3;    ///< peak of the cosine schedule
  double min_lr = 3e-4;           ///< its floor, reached at the last step
  std::int64_t warmup = 100;      ///< linear warm-up steps
  double weight_decay = 0.0;      ///< AdamW's decoupled decay of the rank >= 2 parameters (T5: none)
  double grad_clip = 1.0;         ///< global-norm clipping of the unscaled gradients
  std::int64_t eval_every = 250;  ///< a validation estimate every this many steps (and at the end)
  std::size_t eval_subset = 256;  ///< chunks of the periodic estimate (the first of the validation set)
  std::size_t val_size = 1024;    ///< chunks of the final validation loss and exact-match accuracy
  std::size_t eval_batch = 128;   ///< chunks per evaluation batch
  bool plan = false;              ///< float16 compute: calibrate a residual-scale plan at initialisation and apply it
  std::size_t calibration_batches = 4;        ///< training batches (of `batch` chunks) the plan is calibrated on
  std::optional<std::filesystem::path> save;  ///< write the trained parameters here (safetensors)
  bool check = false;  ///< smoke test: exit status says whether the run is sane (see `train_report`)
  /// Worker threads sharing each batch (data parallel) and the evaluation batches. The bits of a run
  /// depend on this count (the workers' gradients are summed in worker order), not on timing.
  std::size_t workers = 1;
};

/// One periodic evaluation of a training run.
struct eval_point {
  std::int64_t step = 0;     ///< steps done before it
  double train_loss = 0;     ///< mean training loss of the steps since the previous point (NaN at step 0)
  double val_loss = 0;       ///< teacher-forced loss on the first `eval_subset` validation chunks
  float loss_scale = 1.0f;   ///< the dynamic loss scale then (1 without loss scaling)
  std::int64_t skipped = 0;  ///< steps skipped so far
};

/// What a training run reports (and prints).
struct train_report {
  std::string policy;               ///< jmp's string, e.g. "p=f32,c=bf16,o=f32"
  std::vector<eval_point> curve;    ///< the periodic evaluations
  std::vector<double> step_losses;  ///< the training loss of every step
  double val_loss = 0;              ///< teacher-forced mean loss per target over the validation set
  double token_accuracy = 0;        ///< teacher-forced argmax == target, over the validation targets
  double exact_match = 0;           ///< greedy decodings equal to the reversed chunk (then eos)
  std::size_t val_chunks = 0;       ///< chunks in the validation set
  double tokens_per_s = 0;          ///< non-padding encoder + decoder ids per second of training steps
  double train_seconds = 0;         ///< wall time of the training steps (evaluations excluded)
  std::int64_t skipped_steps = 0;   ///< steps skipped by loss scaling (non-finite gradients)
  float final_loss_scale = 1.0f;    ///< the loss scale at the end
  std::size_t parameters = 0;       ///< parameter count
  /// The greedy decodings disagreeing with a teacher-forced pass over the same ids (the key/value caches'
  /// consistency check of a smoke run): 0 when decoding step by step gives the argmax of the full pass.
  std::size_t decode_mismatches = 0;
  bool sane = true;  ///< smoke test: finite losses, the loss decreased, decodings consistent
};

/// Trains the model under policy `P` (float32 parameters; float32, bfloat16 or float16 compute) on
/// `data` and prints its progress and results to `out`. Float16 compute uses dynamic loss scaling.
/// \throws std::invalid_argument for settings that do not fit the data or the model.
template <class P>
train_report train_policy(const train_settings& settings, const reversal_data& data, std::ostream& out);

extern template train_report train_policy<mixprec::full_precision>(const train_settings&, const reversal_data&,
                                                                   std::ostream&);
extern template train_report train_policy<mixprec::mixed_bfloat16>(const train_settings&, const reversal_data&,
                                                                   std::ostream&);
extern template train_report train_policy<mixprec::mixed_float16>(const train_settings&, const reversal_data&,
                                                                  std::ostream&);

/// The settings of the parity study.
struct parity_settings {
  std::filesystem::path load;           ///< parameters of a float32 training run (`--save` of `--policy f32`)
  std::size_t batches = 4;              ///< validation batches compared (of `eval_batch` chunks)
  std::size_t eval_batch = 128;         ///< chunks per batch
  std::size_t calibration_batches = 4;  ///< training batches the float16 plans are calibrated on
  std::uint64_t seed = 1337;     ///< the validation set's lengths (seed + 2, as training) and calibration batches
  std::optional<double> growth;  ///< the stress test's factor; empty: the smallest power of two that overflows
  double headroom_bits = 2.0;    ///< the plans' headroom below float16's largest value
};

/// Runs the parity study (docs/example_t5.md, "Parity") and prints it to `out`. Returns the exit
/// status: 0 when the planned float16 runs stay finite and the stress test's unplanned one does not.
/// \throws std::invalid_argument or mixprec::train::safetensors_error when the file is not a float32
///         t5 example checkpoint made from the same text.
int run_parity(const parity_settings& settings, const reversal_data& data, std::ostream& out);

}  // namespace t5_example
