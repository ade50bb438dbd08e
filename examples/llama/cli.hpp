/// \file
/// \brief The command line of `mixprec-llama`: options, their parsing (strict: every bad flag or value is
/// a `usage_error` naming it), the help text, and where the model and tokenizer are found by default.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <mixprec/policies/runtime_policy.hpp>

namespace llama {

/// A bad command line: unknown flag, missing or malformed value, unsupported policy. `mixprec-llama`
/// prints `what()` and the usage hint and exits with status 2.
class usage_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A policy named on the command line, with the text it was given as.
struct policy_arg {
  std::string text;                ///< as typed, e.g. "p=f32,c=bf16,o=f32"
  mixprec::runtime_policy policy;  ///< parsed (jmp grammar)
};

/// The policies compared by default (besides the reference): bfloat16 and float16 compute with float32
/// parameters and outputs (jmp's "mixed" policies), bfloat16 everywhere, and float64.
inline const std::vector<std::string_view> default_policies{"f32", "p=f32,c=bf16,o=f32", "p=f32,c=f16,o=f32", "bf16",
                                                            "f64"};

/// Everything the command line sets.
struct options {
  /// Policies to run, in order; the first one's generated text is printed. Default: `default_policies`.
  std::vector<policy_arg> policies;
  /// The policy the others are compared against (and whose tokens they replay). Default f32.
  policy_arg reference;
  int steps = 200;                            ///< forward passes (run.c -n); at most the model's seq_len
  float temperature = 0.0f;                   ///< 0 = greedy (run.c -t)
  float topp = 0.9f;                          ///< nucleus mass when sampling (run.c -p; 0 or 1 = plain multinomial)
  std::uint64_t seed = 42;                    ///< sampler seed (run.c -s), non-zero
  int repeats = 3;                            ///< timed generations per policy; tokens/s is the fastest's
  std::filesystem::path model;                ///< checkpoint (llama2.c version 0)
  std::filesystem::path tokenizer;            ///< tokenizer (tok512.bin)
  std::optional<std::filesystem::path> plot;  ///< --plot FILE.svg
  bool text_only = false;                     ///< print the generated text only (no newline added)
  bool help = false;                          ///< --help: print the usage and exit 0
};

/// Environment variable naming the data folder (holding stories260K/), overriding the folder
/// baked in at configure time.
inline constexpr const char* data_dir_env = "MIXPREC_DATA_DIR";

/// The data folder: $MIXPREC_DATA_DIR when set and non-empty, else `baked` (CMake's
/// ${MIXPREC_DATA_DIR}, by default the repository's data/).
[[nodiscard]] inline std::filesystem::path data_dir(const char* baked) {
  if (const char* env = std::getenv(data_dir_env); env != nullptr && *env != '\0') return env;
  return baked;
}

/// The help text.
[[nodiscard]] inline std::string usage(std::string_view program, const std::filesystem::path& data) {
  std::string u;
  u += "Usage: " + std::string(program) + " [options]\n";
  u += "Runs the llama2.c model stories260K with mixprec's layers under mixed-precision policies: prints the\n"
       "text generated under the first policy, then each policy's parity against the reference (per layer\n"
       "site and on the logits, teacher-forced on the reference's tokens), how many generated tokens match the\n"
       "reference before the first divergence, and tokens per second.\n\n";
  u += "Options:\n";
  u += "  --policy P         a policy to run (repeatable), jmp grammar: f32, bf16, f16, f64, or p=..,c=..,o=..\n"
       "                     over those four dtypes. Default: f32, p=f32,c=bf16,o=f32, p=f32,c=f16,o=f32, bf16, f64\n";
  u += "  --reference P      the policy the others are compared against (default f32)\n";
  u += "  --steps N          forward passes, 1..seq_len (default 200)\n";
  u += "  --temperature T    0 = greedy (default 0); > 0 samples as llama2.c's run.c does\n";
  u += "  --topp P           nucleus mass when sampling, in [0, 1] (default 0.9; 0 or 1 = no nucleus cut)\n";
  u += "  --seed S           sampler seed, a positive integer (default 42)\n";
  u += "  --repeats N        time the generation N times per policy and report the fastest (default 3)\n";
  u += "  --model PATH       llama2.c checkpoint (default <data>/stories260K/stories260K.bin)\n";
  u += "  --tokenizer PATH   tokenizer (default <data>/stories260K/tok512.bin)\n";
  u += "  --plot FILE.svg    also write an SVG chart of the per-site error of each policy\n";
  u += "  --text-only        print only the text generated under the first policy (no newline added)\n";
  u += "  --help             print this help\n\n";
  u += "<data> is $" + std::string(data_dir_env) + " if set, else " + data.string() + "\n";
  u += "Exit status: 0 success, 1 unreadable model or tokenizer (or a failed run), 2 bad command line.\n";
  return u;
}

namespace detail {

/// Parses a whole string as a T with std::from_chars, or throws usage_error naming the flag.
template <class T>
[[nodiscard]] T parse_number(std::string_view flag, std::string_view text, std::string_view what) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end) {
    throw usage_error(std::string(flag) + " expects " + std::string(what) + ", got '" + std::string(text) + "'");
  }
  return value;
}

/// A policy string, parsed and checked to be one `mixprec::visit` dispatches.
[[nodiscard]] inline policy_arg parse_policy_arg(std::string_view flag, std::string_view text) {
  policy_arg arg{std::string(text), {}};
  try {
    arg.policy = mixprec::parse_policy(text);
  } catch (const mixprec::policy_parse_error& e) {
    throw usage_error(std::string(flag) + ": " + e.what());
  }
  for (const mixprec::dtype d : {arg.policy.param, arg.policy.compute, arg.policy.output}) {
    if (std::find(mixprec::visit_dtypes.begin(), mixprec::visit_dtypes.end(), d) == mixprec::visit_dtypes.end()) {
      throw usage_error(std::string(flag) + " '" + std::string(text) + "' uses " + std::string(mixprec::name(d)) +
                        "; this example runs policies over f32, f64, bf16 and f16 only");
    }
  }
  return arg;
}

}  // namespace detail

/// Parses `args` (without the program name). `data` is the default data folder (see `data_dir`).
/// Flags take their value as the next argument or after '=' (`--steps 20`, `--steps=20`).
/// \throws usage_error for an unknown flag, a flag without its value, a value that does not parse or is out
///   of range, a policy that does not parse or uses a dtype other than f32/f64/bf16/f16, or a stray argument.
[[nodiscard]] inline options parse_args(std::span<const std::string_view> args, const std::filesystem::path& data) {
  options o;
  o.reference = detail::parse_policy_arg("--reference", "f32");
  o.model = data / "stories260K" / "stories260K.bin";
  o.tokenizer = data / "stories260K" / "tok512.bin";
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
      if (i + 1 >= args.size()) throw usage_error(std::string(flag) + " needs a value");
      return args[++i];
    };
    const auto no_value = [&] {
      if (inline_value) throw usage_error(std::string(flag) + " takes no value");
    };
    if (flag == "--help" || flag == "-h") {
      no_value();
      o.help = true;
    } else if (flag == "--text-only") {
      no_value();
      o.text_only = true;
    } else if (flag == "--policy") {
      o.policies.push_back(detail::parse_policy_arg(flag, value()));
    } else if (flag == "--reference") {
      o.reference = detail::parse_policy_arg(flag, value());
    } else if (flag == "--steps") {
      o.steps = detail::parse_number<int>(flag, value(), "a positive integer");
      if (o.steps < 1) throw usage_error("--steps must be at least 1, got " + std::to_string(o.steps));
    } else if (flag == "--repeats") {
      o.repeats = detail::parse_number<int>(flag, value(), "a positive integer");
      if (o.repeats < 1) throw usage_error("--repeats must be at least 1, got " + std::to_string(o.repeats));
    } else if (flag == "--temperature") {
      const std::string_view v = value();
      o.temperature = detail::parse_number<float>(flag, v, "a number >= 0");
      if (!(std::isfinite(o.temperature) && o.temperature >= 0.0f)) {
        throw usage_error("--temperature must be a finite number >= 0 (0 = greedy), got '" + std::string(v) + "'");
      }
    } else if (flag == "--topp") {
      const std::string_view v = value();
      o.topp = detail::parse_number<float>(flag, v, "a number in [0, 1]");
      if (!(o.topp >= 0.0f && o.topp <= 1.0f)) {
        throw usage_error("--topp must be in [0, 1], got '" + std::string(v) + "'");
      }
    } else if (flag == "--seed") {
      o.seed = detail::parse_number<std::uint64_t>(flag, value(), "a positive integer");
      if (o.seed == 0) throw usage_error("--seed must be positive (xorshift stays at 0 forever from seed 0)");
    } else if (flag == "--model") {
      o.model = value();
      if (o.model.empty()) throw usage_error("--model needs a file name");
    } else if (flag == "--tokenizer") {
      o.tokenizer = value();
      if (o.tokenizer.empty()) throw usage_error("--tokenizer needs a file name");
    } else if (flag == "--plot") {
      o.plot = value();
      if (o.plot->empty()) throw usage_error("--plot needs a file name");
    } else if (flag.starts_with("-")) {
      throw usage_error("unknown option '" + std::string(flag) + "'");
    } else {
      throw usage_error("unexpected argument '" + std::string(flag) + "' (options start with --)");
    }
  }
  if (o.policies.empty()) {
    for (const std::string_view p : default_policies) o.policies.push_back(detail::parse_policy_arg("--policy", p));
  }
  return o;
}

}  // namespace llama
