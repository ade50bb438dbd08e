/// \file
/// \brief The command line of `mixprec-train`: options, their parsing (strict: every bad flag or value is a
/// `usage_error`, a std::invalid_argument whose sentence names the flag and the fix), and the help text.
///
///     mixprec-train --policy STRING [--policy STRING ...] [--iters N] [--threads T] [--seed S]
///                   [--eval-every N] [--eval-iters N] [--data FILE] [--out DIR] [--batch B]
///                   [--resume DIR] [--help]
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "mixprec/policies/runtime_policy.hpp"

namespace train_example {

/// A bad command line: unknown flag, missing or malformed value, unsupported policy. `mixprec-train` should
/// print `what()` and the usage hint and exit with status 2.
class usage_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A policy named on the command line, with the text it was given as.
struct policy_arg {
  std::string text;                ///< as typed, e.g. "p=f32,c=bf16,o=f32" (the name in output and charts)
  mixprec::runtime_policy policy;  ///< parsed (jmp grammar)
  bool float8 = false;             ///< "+fp8" after the policy: float8 products in the projections
};

/// The policies run when no --policy is given (issue 10): float32 throughout; float32 parameters and
/// outputs with bfloat16 or float16 compute (float16 with dynamic loss scaling); bfloat16 parameters and
/// compute with float32 outputs.
inline const std::vector<std::string_view> default_policies{"f32", "p=f32,c=bf16,o=f32", "p=f32,c=f16,o=f32",
                                                            "p=bf16,c=bf16,o=f32"};

/// Everything the command line sets; the defaults are nanoGPT's shakespeare_char CPU recipe (TRAINING.md §4).
struct cli_options {
  std::vector<policy_arg> policies;  ///< run in order, then compared; default `default_policies`
  std::int64_t iters = 2000;         ///< last iteration: iterations 0..iters run (iters + 1 updates), ≥ 1
  int threads = 2;                   ///< worker threads, ≥ 1
  std::uint64_t seed = 1337;         ///< initialisation and batch sampling (std::mt19937_64)
  std::int64_t eval_every = 250;     ///< evaluate at every multiple of this (and at the end), ≥ 1
  std::size_t eval_iters = 20;       ///< batches per split in a periodic evaluation, ≥ 1
  std::size_t batch = 12;            ///< sequences per step, ≥ 1
  std::filesystem::path data;        ///< the training text; default: the caller's (tinyshakespeare)
  std::filesystem::path out = "mixprec-train-out";  ///< folder for the SVG chart and the checkpoints
  bool help = false;                                ///< --help: print the usage and exit 0
  std::size_t grad_accum = 1;   ///< micro-batches per optimiser step (gradients add; default 1 as the recipe)
  std::size_t val_windows = 0;  ///< windows of the final validation loss; 0: the whole split (a test's shortcut)
  std::size_t n_layer = 4;      ///< transformer blocks (the recipe: 4; smaller for a quick test)
  std::size_t n_head = 4;       ///< attention heads, dividing n_embd
  std::size_t n_embd = 128;     ///< residual width
  std::size_t block = 64;       ///< context length
  /// --resume DIR: continue each policy's run from DIR/params_<policy>.safetensors and
  /// DIR/train_state_<policy>.safetensors (written by an earlier run with the same settings) up to --iters.
  std::optional<std::filesystem::path> resume;
  bool profile = false;  ///< --profile: time every region of the training steps, print and write the table
  /// --distributed: data parallel across the MPI ranks mpiexec started (a build with mixprec::distributed).
  bool distributed = false;
  bool bf16_wire = false;              ///< --wire bf16: the gradients cross between ranks as bfloat16
  bool error_feedback = false;         ///< --error-feedback: the bfloat16 wire's rounding residuals fed back
  bool zero = false;                   ///< --zero: ZeRO-1, each rank keeps and steps the optimiser state of its share
  std::size_t bucket_kib = 25 * 1024;  ///< --bucket-kb: KiB of gradient per all-reduce (DDP's bucket_cap_mb)
};

/// The help text. `default_data` is the text file used without --data.
[[nodiscard]] inline std::string usage(std::string_view program, const std::filesystem::path& default_data) {
  std::string u;
  u += "Usage: " + std::string(program) +
       " [--policy P ...] [--iters N] [--threads T] [--seed S] [--eval-every N]\n"
       "       [--eval-iters N] [--data FILE] [--out DIR] [--batch B] [--grad-accum N] [--val-windows N]\n"
       "       [--n-layer N] [--n-head N] [--n-embd N] [--block N] [--resume DIR] [--profile] [--distributed]\n"
       "       [--wire f32|bf16] [--error-feedback] [--zero] [--bucket-kb N] [--help]\n";
  u += "Trains nanoGPT's shakespeare_char GPT (4 layers, 4 heads, n_embd 128, block 64, character vocabulary)\n"
       "with mixprec's layers under each mixed-precision policy given, printing a line per evaluation and a final\n"
       "line per policy with the loss over the whole validation split and the training tokens per second; writes\n"
       "the loss curves (SVG) and the trained parameters (safetensors) to the output folder.\n\n";
  u += "Options:\n";
  u += "  --policy P       a policy to train with (repeatable), jmp grammar: f32, bf16, f16, f64, or p=..,c=..,o=..\n"
       "                   over those dtypes. Default: f32, p=f32,c=bf16,o=f32, p=f32,c=f16,o=f32, "
       "p=bf16,c=bf16,o=f32. A policy followed by +fp8 (p=f32,c=bf16,o=f32+fp8) runs the\n"
       "                   projections' products in float8 with delayed scaling (e4m3fn forward, e5m2\n"
       "                   backward) and writes their amax histories to float8_<policy>.svg\n";
  u += "  --iters N        last iteration, a positive integer: iterations 0..N run (default 2000)\n";
  u += "  --threads T      worker threads, a positive integer (default 2)\n";
  u += "  --seed S         seed of the initialisation and of the batches, an integer >= 0 (default 1337)\n";
  u += "  --eval-every N   estimate the train and validation losses every N iterations (default 250)\n";
  u += "  --eval-iters N   batches per split in each estimate (default 20)\n";
  u += "  --batch B        sequences per step (default 12)\n";
  u += "  --grad-accum N   micro-batches of --batch sequences per optimiser step (default 1)\n";
  u += "  --val-windows N final validation loss over the first N windows only (default 0: the whole split)\n";
  u += "  --n-layer N, --n-head N, --n-embd N, --block N\n"
       "                   model size (default 4, 4, 128, 64: the recipe; smaller for a quick check)\n";
  u += "  --data FILE      the training text (default " + default_data.string() + ")\n";
  u += "  --out DIR        output folder, created if missing (default mixprec-train-out)\n";
  u += "  --resume DIR     continue each policy's run from the parameters and train state an earlier run\n"
       "                   wrote to DIR (same settings, fewer iterations) up to --iters: the result is the\n"
       "                   uninterrupted run's, bit for bit\n";
  u += "  --profile        time every region of the training steps (layers' forward and backward, products by\n"
       "                   shape, loss, optimiser, threads; evaluations excluded); prints the table per policy\n"
       "                   and writes it to profile_<policy>.md in the output folder\n";
  u += "  --distributed    data parallel across processes: run under mpiexec -n R (a build with MPI); each rank\n"
       "                   takes --batch / R sequences of every batch (R must divide --batch), the gradients\n"
       "                   are averaged across the ranks; rank 0 prints and writes the files\n";
  u += "  --wire W         with --distributed: the gradients' format between ranks, f32 (default) or bf16\n"
       "                   (rounded to bfloat16 for the wire, summed in float32 on arrival: half the bytes)\n";
  u += "  --error-feedback with --wire bf16: each rank adds its last rounding residual to its next gradient\n";
  u += "  --bucket-kb N    with --distributed: KiB of gradient per all-reduce (default 25600, DDP's 25 MiB; the\n"
       "                   first bucket, the last layers', closes at 1 MiB so that it can start during the\n"
       "                   backward pass)\n";
  u += "  --zero           with --distributed: ZeRO stage 1, each rank keeps the AdamW state of its share of the\n"
       "                   parameter tensors, steps them and sends the new values to the other ranks (the\n"
       "                   same results as without it, bit for bit; the files hold the whole state)\n";
  u += "  --help           print this help\n\n";
  u += "Flags take their value as the next argument or after '=' (--iters 200, --iters=200).\n";
  u += "Exit status: 0 success, 1 unreadable data or a failed run, 2 bad command line.\n";
  return u;
}

namespace detail {

/// Parses the whole of `text` as an integer T >= `min`, or throws usage_error naming the flag and the fix.
template <class T>
[[nodiscard]] T parse_integer(std::string_view flag, std::string_view text, T min, std::string_view what) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end) {
    throw usage_error(std::string(flag) + " expects " + std::string(what) + ", got '" + std::string(text) +
                      "': write it in decimal digits, e.g. " + std::string(flag) + " " + std::to_string(min + 1));
  }
  if (value < min) {
    throw usage_error(std::string(flag) + " must be " + std::string(what) + ", got " + std::string(text) +
                      ": give a value of at least " + std::to_string(min));
  }
  return value;
}

/// A policy string, parsed and checked to use only dtypes `mixprec::visit` dispatches (f32, f64, bf16, f16).
[[nodiscard]] inline policy_arg parse_policy_arg(std::string_view flag, std::string_view text) {
  policy_arg arg{std::string(text), {}, false};
  constexpr std::string_view fp8_suffix = "+fp8";
  if (text.ends_with(fp8_suffix)) {
    arg.float8 = true;
    text.remove_suffix(fp8_suffix.size());
  }
  try {
    arg.policy = mixprec::parse_policy(text);
  } catch (const mixprec::policy_parse_error& e) {
    throw usage_error(std::string(flag) + ": " + e.what());
  }
  for (const mixprec::dtype d : {arg.policy.param, arg.policy.compute, arg.policy.output}) {
    if (std::find(mixprec::visit_dtypes.begin(), mixprec::visit_dtypes.end(), d) == mixprec::visit_dtypes.end()) {
      throw usage_error(std::string(flag) + " '" + std::string(text) + "' uses " + std::string(mixprec::name(d)) +
                        ": use a policy over f32, f64, bf16 and f16 only");
    }
  }
  return arg;
}

}  // namespace detail

/// Parses `args` (without the program name). `default_data` is the text used without --data (the caller's
/// tinyshakespeare path). Flags take their value as the next argument or after '='. A policy given twice
/// (the same three dtypes, however spelled) is an error.
/// \throws usage_error (a std::invalid_argument) for an unknown flag, a flag without its value, a value that
///   is not a number or is out of range (0 iterations, threads, batch, eval-every or eval-iters; a negative
///   number), an empty file or folder name, a policy that does not parse or uses a dtype other than
///   f32/f64/bf16/f16, a repeated policy, or a stray argument.
[[nodiscard]] inline cli_options parse_cli(std::span<const std::string_view> args,
                                           const std::filesystem::path& default_data) {
  cli_options o;
  o.data = default_data;
  bool bucket_given = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    std::optional<std::string_view> inline_value;
    if (flag.starts_with("--")) {
      if (const auto eq = flag.find('='); eq != std::string_view::npos) {
        inline_value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
      }
    }
    const auto value = [&]() -> std::string_view {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) {
        throw usage_error(std::string(flag) + " needs a value: write it after the flag, e.g. " + std::string(flag) +
                          " VALUE");
      }
      return args[++i];
    };
    if (flag == "--help" || flag == "-h") {
      if (inline_value) throw usage_error(std::string(flag) + " takes no value: write it alone");
      o.help = true;
    } else if (flag == "--policy") {
      policy_arg p = detail::parse_policy_arg(flag, value());
      for (const policy_arg& q : o.policies) {
        if (q.policy == p.policy && q.float8 == p.float8) {
          throw usage_error("--policy '" + p.text + "' repeats '" + q.text + "' (the same policy): give each once");
        }
      }
      o.policies.push_back(std::move(p));
    } else if (flag == "--iters") {
      o.iters = detail::parse_integer<std::int64_t>(flag, value(), 1, "a positive integer");
    } else if (flag == "--threads") {
      o.threads = detail::parse_integer<int>(flag, value(), 1, "a positive integer");
    } else if (flag == "--seed") {
      o.seed = detail::parse_integer<std::uint64_t>(flag, value(), 0, "an integer >= 0");
    } else if (flag == "--eval-every") {
      o.eval_every = detail::parse_integer<std::int64_t>(flag, value(), 1, "a positive integer");
    } else if (flag == "--eval-iters") {
      o.eval_iters = detail::parse_integer<std::size_t>(flag, value(), 1, "a positive integer");
    } else if (flag == "--batch") {
      o.batch = detail::parse_integer<std::size_t>(flag, value(), 1, "a positive integer");
    } else if (flag == "--grad-accum") {
      o.grad_accum = detail::parse_integer<std::size_t>(flag, value(), 1, "a positive integer");
    } else if (flag == "--val-windows") {
      o.val_windows = detail::parse_integer<std::size_t>(flag, value(), 0, "an integer >= 0");
    } else if (flag == "--n-layer") {
      o.n_layer = detail::parse_integer<std::size_t>(flag, value(), 1, "a positive integer");
    } else if (flag == "--n-head") {
      o.n_head = detail::parse_integer<std::size_t>(flag, value(), 1, "a positive integer");
    } else if (flag == "--n-embd") {
      o.n_embd = detail::parse_integer<std::size_t>(flag, value(), 1, "a positive integer");
    } else if (flag == "--block") {
      o.block = detail::parse_integer<std::size_t>(flag, value(), 1, "a positive integer");
    } else if (flag == "--data") {
      o.data = value();
      if (o.data.empty()) throw usage_error("--data needs a file name: give the path of a text file");
    } else if (flag == "--out") {
      o.out = value();
      if (o.out.empty()) throw usage_error("--out needs a folder name: give a path (created if missing)");
    } else if (flag == "--profile") {
      if (inline_value) throw usage_error("--profile takes no value: write it alone");
      o.profile = true;
    } else if (flag == "--distributed") {
      if (inline_value) throw usage_error("--distributed takes no value: write it alone");
      o.distributed = true;
    } else if (flag == "--wire") {
      const std::string_view w = value();
      if (w != "f32" && w != "bf16") {
        throw usage_error("--wire takes f32 or bf16, not '" + std::string(w) + "'");
      }
      o.bf16_wire = w == "bf16";
    } else if (flag == "--error-feedback") {
      if (inline_value) throw usage_error("--error-feedback takes no value: write it alone");
      o.error_feedback = true;
    } else if (flag == "--bucket-kb") {
      o.bucket_kib = detail::parse_integer<std::size_t>(flag, value(), 1, "a positive integer");
      if (o.bucket_kib > (std::size_t{1} << 22)) {
        throw usage_error("--bucket-kb takes at most 4194304 (4 GiB per bucket), not " + std::to_string(o.bucket_kib));
      }
      bucket_given = true;
    } else if (flag == "--zero") {
      if (inline_value) throw usage_error("--zero takes no value: write it alone");
      o.zero = true;
    } else if (flag == "--resume") {
      o.resume = std::filesystem::path(value());
      if (o.resume->empty())
        throw usage_error("--resume needs a folder name: give the --out folder of the run to continue");
    } else if (flag.starts_with("-")) {
      throw usage_error("unknown option '" + std::string(flag) + "': see --help for the options");
    } else {
      throw usage_error("unexpected argument '" + std::string(flag) + "': options start with --, e.g. --policy " +
                        std::string(flag));
    }
  }
  if ((o.bf16_wire || o.error_feedback || o.zero || bucket_given) && !o.distributed) {
    throw usage_error(
        "--wire, --error-feedback, --zero and --bucket-kb choose how ranks share the work: add --distributed");
  }
  if (o.error_feedback && !o.bf16_wire) {
    throw usage_error("--error-feedback compensates the bfloat16 wire's rounding: add --wire bf16");
  }
  if (o.policies.empty()) {
    for (const std::string_view p : default_policies) o.policies.push_back(detail::parse_policy_arg("--policy", p));
  }
  return o;
}

/// `parse_cli` over `main`'s arguments (argv[0], the program name, skipped).
/// \throws usage_error as `parse_cli`.
[[nodiscard]] inline cli_options parse_cli(int argc, const char* const* argv,
                                           const std::filesystem::path& default_data) {
  std::vector<std::string_view> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse_cli(std::span<const std::string_view>(args), default_data);
}

}  // namespace train_example
