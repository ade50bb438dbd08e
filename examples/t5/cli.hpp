/// \file
/// \brief The command line of the t5 example: its two modes (training one policy; the parity study of a
/// trained float32 model), their flags, strict parsing (every bad flag or value is a `usage_error` whose
/// sentence names the flag and the fix) and the help text.
///
///     t5 [--policy f32|bf16|f16|STRING] [--steps N] [--batch B] [--save FILE] [--plan] [--check] ...
///     t5 --parity --load FILE [--growth G] [--parity-batches N] ...
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "mixprec/policies/policy.hpp"
#include "mixprec/policies/runtime_policy.hpp"
#include "runs.hpp"

namespace t5_example {

/// A bad command line. main prints `what()` and the usage hint and exits with status 2.
class usage_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The policies the example trains: float32 parameters and outputs, with float32, bfloat16 or float16
/// compute (float16 with dynamic loss scaling).
enum class policy_kind { f32, bf16, f16 };

/// Everything the command line sets.
struct cli_options {
  bool parity = false;                    ///< --parity: the parity study instead of a training run
  policy_kind policy = policy_kind::f32;  ///< the training run's policy
  train_settings train;                   ///< the training run (the model's shape included)
  parity_settings parity_run;             ///< the parity study
  std::filesystem::path data;             ///< the text; default: the caller's (tinyshakespeare)
  std::size_t min_chars = 8;              ///< shortest chunk
  std::size_t max_chars = 32;             ///< longest chunk
  bool max_distance_given = false;        ///< --max-distance was given (else derived from max_chars)
  std::optional<std::size_t> threads;     ///< --threads: training's workers, the kernels' threads of --parity
  bool help = false;                      ///< --help
};

/// The help text; `default_data` is the text used without --data.
[[nodiscard]] inline std::string usage(std::string_view program, const std::filesystem::path& default_data) {
  const t5_config m;
  const train_settings t;
  const parity_settings p;
  const cli_options defaults;
  const auto n = [](auto v) {
    std::ostringstream s;
    s << v;  // 0.003, not std::to_string's 0.003000
    return s.str();
  };
  std::string u;
  u += "Usage: " + std::string(program) + " [training flags]            train one policy and report it\n";
  u += "       " + std::string(program) + " --parity --load FILE [...]   parity of a trained float32 model\n\n";
  u += "Training:\n";
  u += "  --policy P          f32 (p=f32,c=f32,o=f32; default), bf16 (p=f32,c=bf16,o=f32) or f16\n";
  u += "                      (p=f32,c=f16,o=f32, with dynamic loss scaling); or one of these jmp strings\n";
  u += "  --steps N           optimiser steps (" + n(t.steps) + ")\n";
  u += "  --batch B           chunks per step (" + n(t.batch) + ")\n";
  u += "  --lr X, --min-lr X  the cosine schedule's peak and floor (" + n(t.learning_rate) + ", " + n(t.min_lr) + ")\n";
  u += "  --warmup N          linear warm-up steps (" + n(t.warmup) + ")\n";
  u += "  --weight-decay X    AdamW's decay of matrices and tables (" + n(t.weight_decay) + ")\n";
  u += "  --clip X            global gradient-norm clipping (" + n(t.grad_clip) + ")\n";
  u += "  --eval-every N      validation estimate every N steps (" + n(t.eval_every) + ")\n";
  u += "  --val-size N        validation chunks of the final loss and exact match (" + n(t.val_size) + ")\n";
  u += "  --eval-subset N     chunks of the periodic estimate (" + n(t.eval_subset) + ")\n";
  u += "  --plan              f16: calibrate a float16 residual-scale plan on the initial weights and apply it\n";
  u += "  --save FILE         write the trained parameters (safetensors; --parity reads a float32 one)\n";
  u += "  --check             smoke test: exit 1 unless the losses are finite and decrease and the cached\n";
  u += "                      decoding reproduces the teacher-forced argmax\n";
  u += "Model (training):\n";
  u += "  --d-model N (" + n(m.d_model) + ")  --heads N (" + n(m.n_heads) + ")  --d-ff N (" + n(m.d_ff) +
       ")  --layers N (encoder, " + n(m.encoder_layers) + ")  --decoder-layers N (" + n(m.decoder_layers) + ")\n";
  u += "  --buckets N (" + n(m.num_buckets) +
       ")  --max-distance N (default: the smallest power of two >= max(longest sequence, buckets))\n";
  u += "Data:\n";
  u += "  --data FILE         the text (" + default_data.string() + ")\n";
  u +=
      "  --min-chars N, --max-chars N   chunk lengths (" + n(defaults.min_chars) + ", " + n(defaults.max_chars) + ")\n";
  u += "  --seed S            initialisation, batches and the validation set (" + n(t.seed) + ")\n";
  u += "Parity (--parity):\n";
  u += "  --load FILE         a float32 run's --save file (its shape is read from the file)\n";
  u += "  --parity-batches N  validation batches of " + n(p.eval_batch) + " chunks compared (" + n(p.batches) + ")\n";
  u += "  --growth G          the stress test's factor: block l's feed-forward out-projection times G^l\n";
  u += "                      (default: the smallest power of two that overflows float16 without a plan)\n";
  u += "Both:\n";
  u += "  --threads T         training's data-parallel workers; the kernels' threads of --parity\n";
  u += "                      (default: MIXPREC_NUM_THREADS, OMP_NUM_THREADS or the hardware's)\n";
  u += "  --eval-batch N      chunks per evaluation batch; parity: per compared and calibration batch (" +
       n(t.eval_batch) + ")\n";
  u += "  --help              this text\n";
  return u;
}

namespace detail {

/// Parses a whole decimal integer in [min, max] for `flag`.
template <class Int>
Int parse_integer(std::string_view flag, std::string_view text, Int min, Int max) {
  Int v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v < min || v > max) {
    throw usage_error(std::string(flag) + " takes a whole number from " + std::to_string(min) + " to " +
                      std::to_string(max) + ", not \"" + std::string(text) + "\"");
  }
  return v;
}

/// Parses a finite number > 0 (or >= 0 with `allow_zero`) for `flag`.
inline double parse_number(std::string_view flag, std::string_view text, bool allow_zero = false) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(std::string(text), &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v) || v < 0 || (v == 0 && !allow_zero)) {
    throw usage_error(std::string(flag) + " takes a finite number " + (allow_zero ? ">= 0" : "> 0") + ", not \"" +
                      std::string(text) + "\"");
  }
  return v;
}

/// The policy named by `text`.
inline policy_kind parse_policy_kind(std::string_view text) {
  if (text == "f32") return policy_kind::f32;
  if (text == "bf16") return policy_kind::bf16;
  if (text == "f16") return policy_kind::f16;
  const std::string supported =
      "the example trains f32 (p=f32,c=f32,o=f32), bf16 (p=f32,c=bf16,o=f32) and f16 (p=f32,c=f16,o=f32)";
  mixprec::runtime_policy p;
  try {
    p = mixprec::parse_policy(text);
  } catch (const mixprec::policy_error& e) {
    throw usage_error("--policy \"" + std::string(text) + "\": " + e.what() + "; " + supported);
  }
  if (p == mixprec::to_runtime_policy<mixprec::full_precision>()) return policy_kind::f32;
  if (p == mixprec::to_runtime_policy<mixprec::mixed_bfloat16>()) return policy_kind::bf16;
  if (p == mixprec::to_runtime_policy<mixprec::mixed_float16>()) return policy_kind::f16;
  throw usage_error("--policy \"" + std::string(text) + "\" is not one of the example's policies: " + supported);
}

}  // namespace detail

/// Parses the arguments after the program name.
/// \throws usage_error for an unknown flag, a missing or malformed value, an unsupported policy, a flag
///         of the other mode, or --parity without --load.
[[nodiscard]] inline cli_options parse_command_line(std::span<const char* const> args) {
  cli_options o;
  constexpr std::size_t big = std::size_t{1} << 30;
  std::set<std::string> training_flags, parity_flags;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view flag = args[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= args.size()) throw usage_error(std::string(flag) + " needs a value");
      return args[++i];
    };
    const auto count = [&](std::size_t min = 1) { return detail::parse_integer<std::size_t>(flag, value(), min, big); };
    const auto train_flag = [&] { training_flags.insert(std::string(flag)); };
    if (flag == "--help" || flag == "-h") {
      o.help = true;
    } else if (flag == "--parity") {
      o.parity = true;
    } else if (flag == "--policy") {
      train_flag();
      o.policy = detail::parse_policy_kind(value());
    } else if (flag == "--steps") {
      train_flag();
      o.train.steps = static_cast<std::int64_t>(count());
    } else if (flag == "--batch") {
      train_flag();
      o.train.batch = count();
    } else if (flag == "--lr") {
      train_flag();
      o.train.learning_rate = detail::parse_number(flag, value());
    } else if (flag == "--min-lr") {
      train_flag();
      o.train.min_lr = detail::parse_number(flag, value(), true);
    } else if (flag == "--warmup") {
      train_flag();
      o.train.warmup = static_cast<std::int64_t>(count(0));
    } else if (flag == "--weight-decay") {
      train_flag();
      o.train.weight_decay = detail::parse_number(flag, value(), true);
    } else if (flag == "--clip") {
      train_flag();
      o.train.grad_clip = detail::parse_number(flag, value());
    } else if (flag == "--eval-every") {
      train_flag();
      o.train.eval_every = static_cast<std::int64_t>(count());
    } else if (flag == "--val-size") {
      train_flag();
      o.train.val_size = count();
    } else if (flag == "--eval-subset") {
      train_flag();
      o.train.eval_subset = count();
    } else if (flag == "--plan") {
      train_flag();
      o.train.plan = true;
    } else if (flag == "--save") {
      train_flag();
      o.train.save = std::filesystem::path(value());
    } else if (flag == "--check") {
      train_flag();
      o.train.check = true;
    } else if (flag == "--d-model") {
      train_flag();
      o.train.model.d_model = count();
    } else if (flag == "--heads") {
      train_flag();
      o.train.model.n_heads = count();
    } else if (flag == "--d-ff") {
      train_flag();
      o.train.model.d_ff = count();
    } else if (flag == "--layers") {
      train_flag();
      o.train.model.encoder_layers = count();
    } else if (flag == "--decoder-layers") {
      train_flag();
      o.train.model.decoder_layers = count();
    } else if (flag == "--buckets") {
      train_flag();
      o.train.model.num_buckets = count(2);
    } else if (flag == "--max-distance") {
      train_flag();
      o.train.model.max_distance = count(2);
      o.max_distance_given = true;
    } else if (flag == "--load") {
      parity_flags.insert(std::string(flag));
      o.parity_run.load = std::filesystem::path(value());
    } else if (flag == "--parity-batches") {
      parity_flags.insert(std::string(flag));
      o.parity_run.batches = count();
    } else if (flag == "--growth") {
      parity_flags.insert(std::string(flag));
      o.parity_run.growth = detail::parse_number(flag, value());
    } else if (flag == "--data") {
      o.data = std::filesystem::path(value());
    } else if (flag == "--min-chars") {
      o.min_chars = count();
    } else if (flag == "--max-chars") {
      o.max_chars = count();
    } else if (flag == "--seed") {
      o.train.seed = detail::parse_integer<std::uint64_t>(flag, value(), 0, UINT64_MAX - 3);
      o.parity_run.seed = o.train.seed;
    } else if (flag == "--threads") {
      o.threads = count();
    } else if (flag == "--eval-batch") {
      o.train.eval_batch = count();
      o.parity_run.eval_batch = o.train.eval_batch;
    } else {
      throw usage_error("unknown flag \"" + std::string(flag) + "\"");
    }
  }
  if (o.help) return o;
  if (o.parity && !training_flags.empty()) {
    throw usage_error(*training_flags.begin() +
                      " is a training flag; --parity reads the model's shape from --load and takes --load, "
                      "--parity-batches, --growth, --data, --min-chars, --max-chars, --seed, --threads and "
                      "--eval-batch");
  }
  if (!o.parity && !parity_flags.empty()) {
    throw usage_error(*parity_flags.begin() + " belongs to the parity study: add --parity");
  }
  if (o.parity && o.parity_run.load.empty()) {
    throw usage_error("--parity needs --load FILE: the parameters a float32 run wrote with --policy f32 --save FILE");
  }
  if (o.train.plan && o.policy != policy_kind::f16) {
    throw usage_error("--plan is for float16 compute: use it with --policy f16");
  }
  if (o.min_chars > o.max_chars) {
    throw usage_error("--min-chars " + std::to_string(o.min_chars) + " is above --max-chars " +
                      std::to_string(o.max_chars));
  }
  if (o.train.model.d_model % o.train.model.n_heads != 0) {
    throw usage_error("--heads " + std::to_string(o.train.model.n_heads) + " does not divide --d-model " +
                      std::to_string(o.train.model.d_model));
  }
  return o;
}

}  // namespace t5_example
