/// \file
/// \brief Internal API: the region timer behind `diagnostics::profile` (`internal::profile_scope`).
/// Every folder marks its costly regions with it (a layer's forward and backward, a product with its
/// shape, a conversion pass, an optimiser step); when profiling is off — always, unless a program
/// started a `diagnostics::profile` — a scope costs one relaxed atomic load and a branch.
///
/// When on, each thread keeps its own table (no lock on the hot path): per region name, the calls,
/// the inclusive time and the self time (inclusive minus the regions opened inside it on the same
/// thread), from `std::chrono::steady_clock`. The tables live until the program ends, so a pool
/// thread's table survives it. Namespace `mixprec::internal` (docs/kernels.md, "Internal API").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mixprec::internal {

/// One region's totals on one thread.
struct profile_totals {
  std::uint64_t calls = 0;     ///< scopes closed
  std::int64_t inclusive = 0;  ///< nanoseconds inside the region
  std::int64_t self = 0;       ///< nanoseconds inside it and in no region opened within it
};

/// One thread's table, and the stack of its open scopes' child time.
struct profile_table {
  std::mutex mutex;  ///< taken by the owner to insert a name, and by the reader
  std::unordered_map<std::string, profile_totals> regions;
  std::vector<std::int64_t> child_time;  ///< per open scope: time of the scopes closed inside it
  bool in_use = false;                   ///< owned by a live thread (guarded by the registry's mutex)
};

/// Every thread's table, and the switch. A thread takes a free table on its first region and gives it
/// back when it ends (its totals stay), so a program that starts a thread per step keeps a table per
/// concurrent thread, not per thread ever started.
struct profile_registry {
  std::atomic<bool> on{false};      ///< regions are being timed
  std::atomic<bool> active{false};  ///< a diagnostics::profile exists (timing or paused)
  std::mutex mutex;
  std::vector<std::unique_ptr<profile_table>> tables;

  /// The calling thread's table.
  profile_table& local() {
    struct holder {
      profile_registry* registry = nullptr;
      profile_table* table = nullptr;
      ~holder() {
        if (table == nullptr) return;
        const std::lock_guard lock(registry->mutex);
        table->in_use = false;
      }
    };
    thread_local holder mine;
    if (mine.table == nullptr) {
      const std::lock_guard lock(mutex);
      for (auto& t : tables) {
        if (!t->in_use) {
          mine.table = t.get();
          break;
        }
      }
      if (mine.table == nullptr) mine.table = tables.emplace_back(std::make_unique<profile_table>()).get();
      mine.table->in_use = true;
      mine.registry = this;
    }
    return *mine.table;
  }
};

/// The process's registry.
inline profile_registry& profile_state() {
  static profile_registry registry;
  return registry;
}

/// Whether regions are being timed.
[[nodiscard]] inline bool profiling() noexcept { return profile_state().on.load(std::memory_order_relaxed); }

/// Times the region it lives in, under `name`, when profiling is on at its construction. Scopes on one
/// thread must nest (close in reverse order), as C++ scopes do.
class profile_scope {
 public:
  /// A region with a fixed name.
  explicit profile_scope(const char* name) {
    if (profiling()) open(std::string(name));
  }
  /// A region whose name `make_name()` builds (a product's shape), called only when profiling is on.
  template <class MakeName>
  requires std::is_invocable_r_v<std::string, const MakeName&>
  explicit profile_scope(const MakeName& make_name) {
    if (profiling()) open(make_name());
  }
  profile_scope(const profile_scope&) = delete;
  profile_scope& operator=(const profile_scope&) = delete;
  ~profile_scope() {
    if (table_ == nullptr) return;
    const std::int64_t elapsed =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
    const std::int64_t children = table_->child_time.back();
    table_->child_time.pop_back();
    if (!table_->child_time.empty()) table_->child_time.back() += elapsed;
    const std::lock_guard lock(table_->mutex);
    profile_totals& t = table_->regions[name_];
    ++t.calls;
    t.inclusive += elapsed;
    t.self += elapsed - children;
  }

 private:
  void open(std::string name) {
    table_ = &profile_state().local();
    name_ = std::move(name);
    table_->child_time.push_back(0);
    start_ = std::chrono::steady_clock::now();
  }

  profile_table* table_ = nullptr;
  std::string name_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace mixprec::internal
