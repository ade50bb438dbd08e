/// \file
/// \brief `diagnostics::profile`: where the time of a training step or a forward pass goes, per region
/// — each layer's forward and backward, every matrix product by compute type and shape, packing,
/// conversion passes, attention's kernels, the loss, the optimiser — with calls, inclusive and self
/// time, summed over threads (PyTorch's `torch.profiler` `key_averages()`, CPU time only).
///
///     mixprec::diagnostics::profile prof;          // starts timing (one profile at a time)
///     run_a_few_steps();
///     const auto regions = prof.stop();            // sorted by self time, largest first
///     std::cout << mixprec::diagnostics::profile_table(regions, 20);
///
/// Self times add up to the time spent inside regions (a region's self time excludes the regions
/// opened inside it on the same thread); inclusive times nest and do not add up. With several threads
/// the times are CPU-thread time summed over threads, so they can exceed the wall time. Profiling
/// costs about 0.1 µs per region when on, one atomic load per region when off.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/arch/profile.hpp"

namespace mixprec::diagnostics {

/// One region's totals over every thread.
struct profile_region {
  std::string name;         ///< e.g. "nn::dense.backward", "gemm bf16 m768 k128 n384"
  std::uint64_t calls = 0;  ///< times the region was entered
  double seconds = 0;       ///< inclusive time (nested regions counted in it)
  double self_seconds = 0;  ///< time in this region and in none opened inside it
};

/// Times every region while it lives (or until `stop()`): construction clears the tables of an earlier
/// profile and switches timing on, `stop()` switches it off and returns the regions.
/// \throws std::logic_error when another profile is running.
class profile {
 public:
  profile() {
    auto& state = internal::profile_state();
    if (state.active.exchange(true)) {
      throw std::logic_error("diagnostics::profile: a profile is already running; stop it before starting another");
    }
    {
      const std::lock_guard lock(state.mutex);
      for (auto& table : state.tables) {
        const std::lock_guard table_lock(table->mutex);
        table->regions.clear();
      }
    }
    state.on.store(true);
  }
  profile(const profile&) = delete;
  profile& operator=(const profile&) = delete;
  ~profile() { (void)stop(); }

  /// Stops timing until `resume()` (an evaluation between training steps, say); regions opened before
  /// still count when they close.
  void pause() noexcept {
    if (running_) internal::profile_state().on.store(false);
  }
  /// Times again after `pause()`.
  void resume() noexcept {
    if (running_) internal::profile_state().on.store(true);
  }

  /// Switches timing off and returns every region, summed over threads, sorted by self time (largest
  /// first). Regions still open on other threads are not counted. A second call returns nothing.
  std::vector<profile_region> stop() {
    if (!running_) return {};
    running_ = false;
    auto& state = internal::profile_state();
    state.on.store(false);
    state.active.store(false);
    std::vector<profile_region> out;
    const std::lock_guard lock(state.mutex);
    for (auto& table : state.tables) {
      const std::lock_guard table_lock(table->mutex);
      for (const auto& entry : table->regions) {
        const std::string& name = entry.first;
        const internal::profile_totals& t = entry.second;
        auto found = std::find_if(out.begin(), out.end(), [&](const profile_region& r) { return r.name == name; });
        if (found == out.end()) found = out.insert(out.end(), profile_region{name});
        found->calls += t.calls;
        found->seconds += static_cast<double>(t.inclusive) * 1e-9;
        found->self_seconds += static_cast<double>(t.self) * 1e-9;
      }
    }
    std::sort(out.begin(), out.end(), [](const profile_region& a, const profile_region& b) {
      return a.self_seconds != b.self_seconds ? a.self_seconds > b.self_seconds : a.name < b.name;
    });
    return out;
  }

 private:
  bool running_ = true;
};

/// A Markdown table of the first `rows` regions (0: all) with calls, self and inclusive milliseconds,
/// the self time's share of all self time, and µs per call; then a line with the total self time.
[[nodiscard]] inline std::string profile_table(const std::vector<profile_region>& regions, std::size_t rows = 0) {
  double total = 0;
  for (const auto& r : regions) total += r.self_seconds;
  std::string out = "| region | calls | self ms | self % | incl. ms | self µs/call |\n|---|---|---|---|---|---|\n";
  char line[160];
  const std::size_t n = rows == 0 ? regions.size() : std::min(rows, regions.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto& r = regions[i];
    std::snprintf(line, sizeof line, " | %llu | %.1f | %.1f | %.1f | %.1f |\n",
                  static_cast<unsigned long long>(r.calls), r.self_seconds * 1e3,
                  total > 0 ? 100.0 * r.self_seconds / total : 0.0, r.seconds * 1e3,
                  r.calls > 0 ? r.self_seconds * 1e6 / static_cast<double>(r.calls) : 0.0);
    out.append("| `").append(r.name).append("`").append(line);
  }
  std::snprintf(line, sizeof line, "\nTotal self time %.1f ms over %zu regions.\n", total * 1e3, regions.size());
  out += line;
  return out;
}

}  // namespace mixprec::diagnostics
