/// \file
/// \brief How many threads a matrix product may use: `gemm_threads()`, set process-wide by
/// `set_gemm_threads` or the environment variable `MIXPREC_NUM_THREADS` (oneDNN's and OpenMP's
/// `OMP_NUM_THREADS` play the same part), and `serial_gemm_scope`, which keeps the products of one
/// thread on that thread (for programs that already run their own worker threads, such as
/// examples/train's data-parallel trainer).
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

namespace mixprec::kernels {

namespace detail {

/// The process-wide thread count: `MIXPREC_NUM_THREADS` when it is a positive integer (anything else
/// is reported on stderr and ignored), else the hardware's concurrency.
[[nodiscard]] inline std::atomic<std::size_t>& gemm_threads_storage() noexcept {
  static std::atomic<std::size_t> threads{[]() -> std::size_t {
    const std::size_t hardware = std::max<std::size_t>(1, std::thread::hardware_concurrency());
    const char* text = std::getenv("MIXPREC_NUM_THREADS");
    if (text == nullptr || *text == '\0') return hardware;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (end == text || *end != '\0' || value == 0 || text[0] == '-') {
      std::fprintf(stderr, "mixprec: MIXPREC_NUM_THREADS='%s' is not a positive integer; ignored\n", text);
      return hardware;
    }
    return static_cast<std::size_t>(value);
  }()};
  return threads;
}

/// True on a thread whose products must stay on it: a worker of `parallel_for`, or inside a
/// `serial_gemm_scope`.
[[nodiscard]] inline bool& serial_gemm_flag() noexcept {
  static thread_local bool serial = false;
  return serial;
}

}  // namespace detail

/// The number of threads a matrix product started on this thread may use (at least 1): the
/// process-wide setting, or 1 inside a `serial_gemm_scope` or on one of the products' own workers.
[[nodiscard]] inline std::size_t gemm_threads() noexcept {
  return detail::serial_gemm_flag() ? 1 : detail::gemm_threads_storage().load(std::memory_order_relaxed);
}

/// Sets the process-wide number of threads of a matrix product (0 is taken as 1) and returns the
/// previous setting. Thread-safe; a product already running keeps its count.
inline std::size_t set_gemm_threads(std::size_t threads) noexcept {
  return detail::gemm_threads_storage().exchange(std::max<std::size_t>(threads, 1), std::memory_order_relaxed);
}

/// RAII: the matrix products started on this thread run on this thread only, for the scope's
/// lifetime. For a program's own worker threads, so that products do not multiply their threads.
class serial_gemm_scope {
 public:
  serial_gemm_scope() noexcept : previous_(detail::serial_gemm_flag()) { detail::serial_gemm_flag() = true; }
  serial_gemm_scope(const serial_gemm_scope&) = delete;
  serial_gemm_scope& operator=(const serial_gemm_scope&) = delete;
  ~serial_gemm_scope() { detail::serial_gemm_flag() = previous_; }

 private:
  bool previous_;
};

namespace detail {

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
    const serial_gemm_scope serial;
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

}  // namespace detail

}  // namespace mixprec::kernels
