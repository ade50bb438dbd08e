// mixprec-train: trains nanoGPT's shakespeare_char GPT with mixprec's layers under each policy given on
// the command line, and compares them (docs/example_train.md). See --help.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "char_dataset.hpp"
#include "cli.hpp"
#include "loss_chart.hpp"
#include "mixprec/policies/runtime_policy.hpp"
#include "trainer.hpp"

#if MIXPREC_TRAIN_DISTRIBUTED
#include <memory>

#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/gather_checkpoint.hpp"
#include "mixprec/distributed/gradient_reducer.hpp"
#include "mixprec/distributed/parameters.hpp"
#include "mixprec/distributed/shard_plan.hpp"
#endif

namespace {

using namespace train_example;

/// The policies this program instantiates (mixprec::visit<...> over these only: each compiles the whole
/// model and its backward pass once).
using bf16_params = mixprec::policy<mixprec::bfloat16, mixprec::bfloat16, float>;

/// "p=f32,c=bf16,o=f32" -> "p-f32_c-bf16_o-f32": a file-name-safe form of a policy string.
std::string file_safe(const std::string& text) {
  std::string s;
  for (char c : text) s += (c == '=' ? '-' : c == ',' ? '_' : c == '+' ? '_' : c);
  return s;
}

/// A float8 run's chart: per block, the amax of each projection's input and output gradient against
/// the iteration (log scale; about 40 iterations shown).
void write_float8_chart(const std::filesystem::path& file, const std::string& policy,
                        const std::vector<float8_layer_report>& layers) {
  if (layers.empty() || layers.front().x_amax.empty()) return;
  const std::size_t steps = layers.front().x_amax.size();
  const std::size_t every = std::max<std::size_t>(1, steps / 40);
  std::vector<std::string> sites;
  for (std::size_t t = 0; t < steps; t += every) sites.push_back(std::to_string(t));
  std::vector<llama::svg::panel> panels;
  for (const bool gradient : {false, true}) {
    for (std::size_t l = 0; l < layers.size(); l += 6) {
      const std::string block = layers[l].name.substr(0, layers[l].name.find(".attn"));
      llama::svg::panel p{block + (gradient ? ": output-gradient amax" : ": input amax"), {}};
      for (std::size_t j = l; j < std::min(layers.size(), l + 6); ++j) {
        llama::svg::series s{layers[j].name.substr(block.size() + 1), {}};
        const auto& v = gradient ? layers[j].dy_amax : layers[j].x_amax;
        for (std::size_t t = 0; t < steps; t += every) s.values.push_back(v[t]);
        p.lines.push_back(std::move(s));
      }
      panels.push_back(std::move(p));
    }
  }
  const std::string svg = llama::svg::line_chart(
      "mixprec-train " + policy + ": float8 amax histories",
      "delayed scaling: the scale of step t is the largest amax of the steps before it", sites, panels, "iteration");
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << svg;
  if (!out) throw std::runtime_error("cannot write the float8 chart '" + file.string() + "'");
}

/// --profile: the run's regions (diagnostics::profile_table, the 40 largest by self time) printed and
/// written to `file`, headed by the run's settings and its step wall time.
void write_profile(const std::filesystem::path& file, const std::string& policy, const cli_options& options,
                   const run_result& r) {
  char head[512];
  const double steps = static_cast<double>(options.iters + 1);
  std::snprintf(head, sizeof head,
                "# mixprec-train --profile, policy %s\n\n%lld steps of batch %zu x block %zu, %d worker threads: "
                "%.1f ms per step (wall), %.0f tokens/s. Times are summed over threads.\n\n",
                policy.c_str(), static_cast<long long>(options.iters + 1), options.batch, options.block,
                options.threads, r.train_seconds * 1e3 / steps, r.tokens_per_s);
  const std::string text = std::string(head) + mixprec::diagnostics::profile_table(r.profile, 40);
  std::printf("profile policy=%s\n%s\n", policy.c_str(), text.c_str());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write the profile '" + file.string() + "'");
}

#if MIXPREC_TRAIN_DISTRIBUTED
/// The trainer's data-parallel hooks over MPI: the gradient average of mixprec::distributed (its buckets
/// laid out at the first step, after the check that every rank has the same gradients), the
/// parameter checksum compared across the ranks, and with `zero` ZeRO-1 (`shard_plan`,
/// `all_gather_parameters`, `gather_checkpoint`).
data_parallel mpi_ranks(const mixprec::distributed::communicator& comm,
                        const mixprec::distributed::reducer_options& options, bool zero) {
  data_parallel dp;
  dp.rank = comm.rank();
  dp.ranks = comm.size();
  auto reducer = std::make_shared<std::optional<mixprec::distributed::gradient_reducer>>();
  dp.average = [&comm, reducer, options](const named_flat_tensors<float>& grads) {
    if (!reducer->has_value()) reducer->emplace(comm, grads, options);
    (*reducer)->average(grads);
  };
  dp.ready = [reducer](const named_flat_tensors<float>& grads, std::string_view prefix) {
    if (reducer->has_value()) (*reducer)->ready(grads, prefix);  // from the second step: the reducer exists
  };
  dp.rescale = [reducer](float factor) {
    if (reducer->has_value()) (*reducer)->scale_residuals(factor);
  };
  dp.agree = [&comm](const named_flat_tensors<std::byte>& params) {
    return mixprec::distributed::parameters_agree(comm, params);
  };
  if (!zero) return dp;
  auto plan = std::make_shared<std::optional<mixprec::distributed::shard_plan>>();
  dp.shard = [&comm, plan](const named_flat_tensors<std::byte>& params) {
    plan->emplace(comm, [&](auto&& f) { params.for_each_parameter(f); });
    return [plan, rank = comm.rank()](std::string_view name) { return (*plan)->owns(rank, name); };
  };
  dp.gather_parameters = [&comm, plan](const named_flat_tensors<std::byte>& params) {
    mixprec::distributed::all_gather_parameters(comm, **plan, params);
  };
  dp.gather_state = [&comm](mixprec::train::checkpoint& ck) { mixprec::distributed::gather_checkpoint(comm, ck); };
  return dp;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  cli_options options;
  try {
    options = parse_cli(argc, argv, MIXPREC_TRAIN_DATA);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "mixprec-train: %s\n%s", e.what(), usage("mixprec-train", MIXPREC_TRAIN_DATA).c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(usage("mixprec-train", MIXPREC_TRAIN_DATA).c_str(), stdout);
    return 0;
  }
#if MIXPREC_TRAIN_DISTRIBUTED
  // --distributed: MPI for the whole run (the environment outlives the communicator); ranks other than
  // 0 train silently and write no file.
  std::optional<mixprec::distributed::environment> mpi;
  std::optional<mixprec::distributed::communicator> comm;
#endif
  bool writes = true;  // this process prints and writes the files (rank 0, or the only process)
  try {
    if (options.distributed) {
#if MIXPREC_TRAIN_DISTRIBUTED
      mpi.emplace(argc, argv);
      comm.emplace();
      writes = comm->rank() == 0;
      if (!writes && std::freopen("/dev/null", "w", stdout) == nullptr) {
        throw std::runtime_error("rank " + std::to_string(comm->rank()) + ": cannot silence standard output");
      }
#else
      throw usage_error(
          "--distributed needs a build with MPI (mixprec::distributed): install libopenmpi-dev and "
          "configure the build again");
#endif
    }
    const char_dataset data = char_dataset::from_file(options.data);
    std::filesystem::create_directories(options.out);
    gpt_config config;
    config.vocab = data.vocab_size();
    config.n_layer = options.n_layer;
    config.n_head = options.n_head;
    config.n_embd = options.n_embd;
    config.block = options.block;
    if (config.n_embd % config.n_head != 0) {
      throw usage_error("--n-embd " + std::to_string(config.n_embd) + " is not a multiple of --n-head " +
                        std::to_string(config.n_head) + ": choose sizes where the heads divide the width");
    }
    std::printf("data %s: %zu characters, vocabulary %zu, train %zu, val %zu\n", options.data.string().c_str(),
                data.size(), data.vocab_size(), data.size(split::train), data.size(split::val));

    std::vector<loss_curve> curves;
    std::vector<std::string> finals;
    for (const policy_arg& pa : options.policies) {
      if (pa.float8 && options.distributed) {
        throw usage_error("--policy " + pa.text +
                          ": float8 delayed scaling keeps its amax histories per process, "
                          "which the ranks do not share yet; drop +fp8 or --distributed");
      }
      run_options run;
      run.iters = options.iters;
      run.batch = options.batch;
      run.seed = options.seed;
      run.eval_every = options.eval_every;
      run.eval_iters = options.eval_iters;
      run.threads = static_cast<std::size_t>(options.threads);
      run.val_windows = options.val_windows;
      run.grad_accum = options.grad_accum;
      run.loss_scaling = pa.policy.compute == mixprec::dtype::float16;
      run.float8 = pa.float8;
      run.profile = options.profile;
      mixprec::train::checkpoint params, state;
      params.metadata["policy"] = pa.text;
      // --resume: the earlier run's parameters and state for this policy.
      std::optional<mixprec::train::checkpoint> resume_params, resume_state;
      resume_from resume;
      if (options.resume) {
        resume_params =
            mixprec::train::checkpoint::load(*options.resume / ("params_" + file_safe(pa.text) + ".safetensors"));
        resume_state =
            mixprec::train::checkpoint::load(*options.resume / ("train_state_" + file_safe(pa.text) + ".safetensors"));
        const auto saved = resume_state->metadata.find("policy");
        if (saved == resume_state->metadata.end() || saved->second != pa.text) {
          throw std::invalid_argument("--resume: " + resume_state->source() + " was written for policy '" +
                                      (saved == resume_state->metadata.end() ? std::string("?") : saved->second) +
                                      "', not '" + pa.text + "'");
        }
        resume = {&*resume_params, &*resume_state};
      }
      params.metadata["format"] = "mixprec-train GPT parameters, kernels [in, out]";
      auto log = [&](const eval_point& e, float loss_scale, std::int64_t skipped) {
        std::printf("policy=%s iter=%lld train_loss=%.4f val_loss=%.4f loss_scale=%g skipped_steps=%lld\n",
                    pa.text.c_str(), static_cast<long long>(e.iter), e.train_loss, e.val_loss,
                    static_cast<double>(loss_scale), static_cast<long long>(skipped));
        std::fflush(stdout);
      };
      data_parallel ranks;  // one process
#if MIXPREC_TRAIN_DISTRIBUTED
      if (comm) {
        ranks = mpi_ranks(*comm,
                          {.bucket_bytes = options.bucket_kib << 10,
                           .wire = options.bf16_wire ? mixprec::distributed::wire_format::bfloat16
                                                     : mixprec::distributed::wire_format::float32,
                           .error_feedback = options.error_feedback},
                          options.zero);
      }
#endif
      const run_result r =
          mixprec::visit<mixprec::full_precision, mixprec::mixed_bfloat16, mixprec::mixed_float16, bf16_params>(
              pa.policy, [&]<class P>(P) { return train<P>(config, run, data, log, &params, &state, resume, ranks); });
      if (!writes) continue;
      params.save(options.out / ("params_" + file_safe(pa.text) + ".safetensors"));
      state.metadata["policy"] = pa.text;
      state.save(options.out / ("train_state_" + file_safe(pa.text) + ".safetensors"));
      loss_curve curve{pa.text, {}};
      for (const auto& e : r.curve) curve.points.push_back({e.iter, e.train_loss, e.val_loss});
      curves.push_back(curve);
      std::printf("sample policy=%s:\n%s\n", pa.text.c_str(), r.sample.c_str());
      for (const auto& layer : r.float8) {
        std::printf(
            "float8 policy=%s layer=%s final_x_amax=%.4g final_dy_amax=%.4g clipped_x=%zu clipped_kernel=%zu "
            "clipped_dy=%zu\n",
            pa.text.c_str(), layer.name.c_str(), layer.x_amax.empty() ? 0.0 : layer.x_amax.back(),
            layer.dy_amax.empty() ? 0.0 : layer.dy_amax.back(), layer.clips.x, layer.clips.kernel, layer.clips.dy);
      }
      write_float8_chart(options.out / ("float8_" + file_safe(pa.text) + ".svg"), pa.text, r.float8);
      if (options.profile) write_profile(options.out / ("profile_" + file_safe(pa.text) + ".md"), pa.text, options, r);
      std::printf("optimizer_state policy=%s bytes=%zu%s\n", pa.text.c_str(), r.optimizer_state_bytes,
                  ranks.ranks > 1 ? (options.zero ? " (rank 0's share: --zero)" : " (every rank)") : "");
      char line[512];
      std::snprintf(line, sizeof line,
                    "final policy=%s iters=%lld train_loss=%.4f val_loss=%.4f tokens_per_s=%.0f skipped_steps=%lld%s",
                    pa.text.c_str(), static_cast<long long>(options.iters), r.train_loss, r.val_loss, r.tokens_per_s,
                    static_cast<long long>(r.skipped_steps),
                    ranks.ranks > 1 ? (" ranks=" + std::to_string(ranks.ranks)).c_str() : "");
      std::printf("%s\n", line);
      std::fflush(stdout);
      finals.emplace_back(line);
    }
    if (!writes) return 0;
    write_loss_chart(options.out / "loss.svg", curves, "mixprec-train: nanoGPT shakespeare_char",
                     "train (dashed) and validation (solid) loss estimates per policy");
    if (finals.size() > 1) {
      std::printf("\nsummary\n");
      for (const auto& f : finals) std::printf("%s\n", f.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixprec-train: %s\n", e.what());
    const int status = dynamic_cast<const usage_error*>(&e) != nullptr ? 2 : 1;
#if MIXPREC_TRAIN_DISTRIBUTED
    // A failure on one rank (a file it cannot write, say) would leave the others waiting in the next
    // collective: end every rank.
    if (comm && comm->size() > 1) MPI_Abort(MPI_COMM_WORLD, status);
#endif
    return status;
  }
  return 0;
}
