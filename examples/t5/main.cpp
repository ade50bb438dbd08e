// t5: a small T5 v1.1-style encoder-decoder assembled from mixprec's layers, trained to reverse chunks of
// tinyshakespeare under one policy per run (float32, or float32 parameters with bfloat16 or float16
// compute), and the inference parity study of a trained float32 model (docs/example_t5.md).
//
//   t5 --policy f32 --save t5_f32.safetensors      train, report, keep the weights
//   t5 --policy f16 --plan                          float16 compute, loss scaling, a residual-scale plan
//   t5 --parity --load t5_f32.safetensors           bf16/f16 against f32 per site; the float16 stress test
//
// Exit status: 0, or 1 for a failed --check or parity expectation and for run-time errors, 2 for a bad
// command line.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <span>

#include "cli.hpp"
#include "mixprec/kernels/threads.hpp"
#include "reversal_data.hpp"
#include "runs.hpp"

namespace {

/// The data folder: $MIXPREC_DATA_DIR when set and not empty, else the one CMake baked in.
std::filesystem::path data_dir() {
  if (const char* env = std::getenv("MIXPREC_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return MIXPREC_T5_DATA_DIR;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace t5_example;
  const std::filesystem::path default_data = data_dir() / "tinyshakespeare" / "input.txt";
  cli_options options;
  try {
    options = parse_command_line(std::span<const char* const>(argv + 1, static_cast<std::size_t>(argc - 1)));
  } catch (const usage_error& e) {
    std::cerr << "t5: " << e.what() << "\n(t5 --help lists the flags)\n";
    return 2;
  }
  if (options.help) {
    std::cout << usage("t5", default_data);
    return 0;
  }
  try {
    if (options.threads) mixprec::set_num_threads(*options.threads);
    const reversal_data data = reversal_data::from_file(options.data.empty() ? default_data : options.data,
                                                        options.min_chars, options.max_chars);
    if (options.parity) return run_parity(options.parity_run, data, std::cout);

    train_settings settings = options.train;
    settings.workers = mixprec::num_threads();  // --threads, MIXPREC_NUM_THREADS or the hardware's
    if (!options.max_distance_given) {
      // Long enough for the longest sequence (T5's 128 is sized for its 512-token inputs), and above the
      // exact range of a unidirectional bucketing (num_buckets / 2).
      settings.model.max_distance = std::bit_ceil(std::max(data.max_sequence(), settings.model.num_buckets));
    }
    train_report report;
    switch (options.policy) {
      case policy_kind::f32: report = train_policy<mixprec::full_precision>(settings, data, std::cout); break;
      case policy_kind::bf16: report = train_policy<mixprec::mixed_bfloat16>(settings, data, std::cout); break;
      case policy_kind::f16: report = train_policy<mixprec::mixed_float16>(settings, data, std::cout); break;
    }
    return settings.check && !report.sane ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "t5: " << e.what() << '\n';
    return 1;
  }
}
