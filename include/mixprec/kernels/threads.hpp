/// \file
/// \brief How many threads mixprec's kernels may use: `mixprec::num_threads()`, set process-wide by
/// `mixprec::set_num_threads` or the environment (`MIXPREC_NUM_THREADS`, else OpenMP's
/// `OMP_NUM_THREADS`, which oneDNN and PyTorch also read, else the hardware's concurrency), and
/// `mixprec::single_threaded_scope`, which keeps the kernels called on one thread on that thread (for
/// programs that already run their own worker threads, such as examples/train's data-parallel
/// trainer). A small fork-join of std::jthreads per large product, no OpenMP runtime: a header-only
/// library cannot choose the program's OpenMP flags.
///
/// Threads never change a result: the engine splits work by output blocks and every output element
/// is summed in the same order whatever the split (kernels/detail/gemm_avx2.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace mixprec {

namespace detail {

/// A positive thread count from the environment variable `name`, or 0 when it is unset or empty;
/// anything but a positive integer is reported on stderr and ignored.
[[nodiscard]] inline std::size_t threads_from_environment(const char* name) noexcept {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || value == 0 || text[0] == '-') {
    std::fprintf(stderr, "mixprec: %s='%s' is not a positive integer; ignored\n", name, text);
    return 0;
  }
  return static_cast<std::size_t>(value);
}

/// The process-wide thread count, initialised from MIXPREC_NUM_THREADS, OMP_NUM_THREADS or the hardware.
[[nodiscard]] inline std::atomic<std::size_t>& num_threads_storage() noexcept {
  static std::atomic<std::size_t> threads{[]() -> std::size_t {
    if (const std::size_t n = threads_from_environment("MIXPREC_NUM_THREADS"); n != 0) return n;
    if (const std::size_t n = threads_from_environment("OMP_NUM_THREADS"); n != 0) return n;
    return std::max<std::size_t>(1, std::thread::hardware_concurrency());
  }()};
  return threads;
}

/// True on a thread whose kernels must stay on it: a worker of `parallel_for`, or inside a
/// `single_threaded_scope`.
[[nodiscard]] inline bool& single_threaded_flag() noexcept {
  static thread_local bool serial = false;
  return serial;
}

}  // namespace detail

/// The number of threads a kernel called on this thread may use (at least 1): the process-wide
/// setting, or 1 inside a `single_threaded_scope` or on one of the kernels' own workers. The matrix
/// products use them (kernels/detail/gemm_engine.hpp); threads never change a result.
[[nodiscard]] inline std::size_t num_threads() noexcept {
  return detail::single_threaded_flag() ? 1 : detail::num_threads_storage().load(std::memory_order_relaxed);
}

/// Sets the process-wide number of threads of the kernels (0 is taken as 1; overrides the
/// environment) and returns the previous setting. Thread-safe; a kernel already running keeps its count.
inline std::size_t set_num_threads(std::size_t threads) noexcept {
  return detail::num_threads_storage().exchange(std::max<std::size_t>(threads, 1), std::memory_order_relaxed);
}

/// RAII: the kernels called on this thread run on this thread only, for the scope's lifetime. For a
/// program's own worker threads, so that the kernels do not multiply their threads.
class single_threaded_scope {
 public:
  single_threaded_scope() noexcept : previous_(detail::single_threaded_flag()) {
    detail::single_threaded_flag() = true;
  }
  single_threaded_scope(const single_threaded_scope&) = delete;
  single_threaded_scope& operator=(const single_threaded_scope&) = delete;
  ~single_threaded_scope() { detail::single_threaded_flag() = previous_; }

 private:
  bool previous_;
};

namespace kernels::detail {

/// Runs `f(task)` for every task in [0, tasks) on `threads` threads (the caller is one of them); tasks
/// are taken in order from a shared counter. The first exception thrown by a task is rethrown on the
/// caller after every thread has finished.
template <class F>
void parallel_for(std::size_t tasks, std::size_t threads, const F& f) {
  if (tasks == 0) return;
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::atomic_flag error_set = ATOMIC_FLAG_INIT;
  auto work = [&] {
    const single_threaded_scope single;
    try {
      for (std::size_t task = next.fetch_add(1); task < tasks; task = next.fetch_add(1)) f(task);
    } catch (...) {
      if (!error_set.test_and_set()) error = std::current_exception();
      next.store(tasks);
    }
  };
  {
    std::vector<std::jthread> workers;
    const std::size_t extra = std::min(threads, tasks) - 1;
    workers.reserve(extra);
    for (std::size_t t = 0; t < extra; ++t) workers.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace kernels::detail

}  // namespace mixprec
