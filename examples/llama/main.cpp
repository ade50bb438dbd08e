// mixprec-llama: runs the pretrained llama2.c model stories260K, assembled from mixprec's layers, under
// mixed-precision policies chosen by strings (jmp's grammar, dispatched with mixprec::visit), and reports
// how far each policy drifts from a float32 reference, site by site. See docs/example_llama.md.
//
//   mixprec-llama                                   the full report (see --help)
//   mixprec-llama --text-only --policy f32          llama2.c's `./run stories260K.bin -z tok512.bin -t 0 -n 200`
//   mixprec-llama --policy bf16 --plot parity.svg   one policy against float32, with a chart
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <mixprec/diagnostics/parity.hpp>
#include <mixprec/diagnostics/recording_probe.hpp>

#include "cli.hpp"
#include "generation.hpp"
#include "llama2c_checkpoint.hpp"
#include "llama2c_file.hpp"
#include "llama2c_tokenizer.hpp"
#include "report.hpp"

#ifndef MIXPREC_LLAMA_DATA_DIR
#error "MIXPREC_LLAMA_DATA_DIR must name the data folder (examples/llama/CMakeLists.txt sets it)"
#endif
#ifndef MIXPREC_LLAMA_BUILD_TYPE
#define MIXPREC_LLAMA_BUILD_TYPE "unknown build type"
#endif

namespace {

constexpr std::string_view program = "mixprec-llama";

std::string compiler() {
#if defined(__clang__)
  return std::string("clang++ ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("g++ ") + __VERSION__;
#else
  return "unknown compiler";
#endif
}

std::string build_type() {
  std::string type = MIXPREC_LLAMA_BUILD_TYPE;
  if (type.empty()) type = "no CMAKE_BUILD_TYPE";
#ifdef NDEBUG
  type += ", NDEBUG";
#endif
#if defined(__OPTIMIZE__)
  type += ", optimised";
#else
  type += ", not optimised";
#endif
  return type;
}

void print_report(const llama::options& o, const llama2c::checkpoint& ck, const llama2c::tokenizer& tok) {
  const auto& cfg = ck.config;
  std::cout << program << ": llama2.c stories260K under mixed-precision policies, built from mixprec's layers\n"
            << "model:     " << o.model.string() << " (dim " << cfg.dim << ", hidden " << cfg.hidden_dim << ", "
            << cfg.n_layers << " layers, " << cfg.n_heads << " heads / " << cfg.n_kv_heads << " kv heads of "
            << cfg.head_size() << ", vocab " << cfg.vocab_size << ", seq_len " << cfg.seq_len << ")\n"
            << "tokenizer: " << o.tokenizer.string() << "\n"
            << "decoding:  " << o.steps << " steps from BOS, "
            << (o.temperature == 0.0f ? std::string("greedy (temperature 0)")
                                      : "sampled (temperature " + std::to_string(o.temperature) + ", top-p " +
                                            std::to_string(o.topp) + ", seed " + std::to_string(o.seed) + ")")
            << "\n"
            << "build:     " << build_type() << "; " << compiler() << "; " << llama::cpu_name() << ", one thread\n\n";

  const llama::comparison c = llama::run_comparison(ck, o);
  const llama::policy_run& first = c.runs.front();
  std::cout << "== Text generated under " << first.name << " (" << first.free.tokens.size() << " tokens) ==\n"
            << tok.decode_text(first.free.tokens) << "\n\n";

  std::cout << "== Summary: each policy against " << c.reference.name << " ==\n"
            << llama::summary(c) << "tokens = " << c.reference.name << ": generated tokens equal to "
            << c.reference.name << "'s before the first divergence (each policy decoding freely).\n";
  if (const auto call = llama::closest_greedy_call(c.reference, static_cast<std::size_t>(cfg.vocab_size));
      call && o.temperature == 0.0f) {
    std::cout << "          " << c.reference.name << "'s closest greedy call: step " << call->step
              << ", top-2 logit gap " << llama::detail::format("%.3g", call->gap)
              << " (a policy erring by more there may pick another token).\n";
  }
  std::cout << "max|a-b|, p99.9: over every element of the site in all " << c.reference.free.inputs.size()
            << " steps, each policy fed " << c.reference.name << "'s tokens (teacher-forced).\n"
            << "tokens/s: forward passes per second of the free-running generation (wall clock, steady_clock;\n"
            << "          "
            << (o.repeats == 1 ? std::string("one run") : "fastest of " + std::to_string(o.repeats) + " runs")
            << ").\n\n";

  for (const llama::policy_run& run : c.runs) {
    if (c.is_reference(run)) continue;
    std::cout << "== Parity per site: " << run.name << " against " << c.reference.name << " ==\n"
              << llama::parity(run, c.reference) << "\n";
  }
  std::cout << "== Activation ranges of the " << c.reference.name << " run (headroom to float16's max) ==\n"
            << mixprec::diagnostics::to_string(c.reference.replay, mixprec::dtype::float16);

  if (o.plot) {
    const std::string svg = llama::plot(c);
    std::ofstream out(*o.plot, std::ios::binary);
    if (!(out << svg) || !out.flush()) throw std::runtime_error(o.plot->string() + ": cannot write the plot");
    std::cout << "\nplot written to " << o.plot->string() << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path data = llama::data_dir(MIXPREC_LLAMA_DATA_DIR);
  llama::options o;
  try {
    const std::vector<std::string_view> args(argv + (argc > 0 ? 1 : 0), argv + argc);
    o = llama::parse_args(args, data);
  } catch (const llama::usage_error& e) {
    std::cerr << program << ": " << e.what() << "\nTry '" << program << " --help'.\n";
    return 2;
  }
  if (o.help) {
    std::cout << llama::usage(program, data);
    return 0;
  }
  try {
    const llama2c::checkpoint ck = llama2c::read_checkpoint(o.model);
    const llama2c::tokenizer tok = llama2c::read_tokenizer(o.tokenizer, ck.config.vocab_size);
    if (o.steps > ck.config.seq_len) {
      std::cerr << program << ": --steps " << o.steps << " exceeds the model's seq_len " << ck.config.seq_len
                << "\nTry '" << program << " --help'.\n";
      return 2;
    }
    if (o.text_only) {
      o.repeats = 1;
      const llama::policy_run run = llama::run_policy(o.policies.front().policy, ck, o, nullptr);
      std::cout << tok.decode_text(run.free.tokens) << std::flush;
      return 0;
    }
    print_report(o, ck, tok);
    return 0;
  } catch (const llama2c::file_error& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    if (!std::filesystem::exists(e.path())) {
      std::cerr << "(stories260K ships in the repository's data/ folder: give --model and --tokenizer, or set "
                << llama::data_dir_env << " to the folder holding stories260K/; the default folder is " << data.string()
                << ")\n";
    }
    return 1;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 1;
  }
}
