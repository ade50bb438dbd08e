/// \file
/// \brief How many threads mixprec's kernels may use: `mixprec::num_threads()`, set process-wide by
/// `mixprec::set_num_threads` or the environment (`MIXPREC_NUM_THREADS`, else OpenMP's
/// `OMP_NUM_THREADS`, which oneDNN and PyTorch also read, else the hardware's concurrency), and
/// `mixprec::single_threaded_scope`, which keeps the kernels called on one thread on that thread (for
/// programs that already run their own worker threads, such as examples/train's data-parallel
/// trainer). A small fork-join on a pool of workers started on first use and kept for the process
/// (a thread start costs tens of microseconds, as much as a single-row product's work), no OpenMP
/// runtime: a header-only library cannot choose the program's OpenMP flags.
///
/// Threads never change a result: the engine splits work by output blocks and every output element
/// is summed in the same order whatever the split (kernels/detail/gemm_avx2.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cfenv>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif

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

/// The kernels' workers: started on first use (as many as the largest fork asked for) and kept for
/// the life of the process. Between forks a worker spins for a while (a token's step forks once per
/// single-row product, tens of microseconds apart; waking a sleeping thread costs about as much), then sleeps on
/// a condition variable. One fork at a time: `run` returns false when another thread's fork holds the
/// pool (the caller then starts threads of its own).
class thread_pool {
 public:
  /// The process's pool. Never destroyed: its workers may still be waiting when static objects are.
  /// A child process made by POSIX fork() starts a pool of its own (it has none of the parent's
  /// threads; the parent's pool, whose locks may have been held at the fork, is left alone).
  static thread_pool& instance() {
    static const bool registered = [] {
#if defined(__unix__) || defined(__APPLE__)
      pthread_atfork(nullptr, nullptr, [] { current().store(nullptr); });
#endif
      return true;
    }();
    (void)registered;
    thread_pool* pool = current().load(std::memory_order_acquire);
    if (pool == nullptr) {
      auto* fresh = new thread_pool;  // NOLINT(cppcoreguidelines-owning-memory): never destroyed, see above
      if (current().compare_exchange_strong(pool, fresh, std::memory_order_acq_rel)) {
        pool = fresh;
      } else {
        delete fresh;  // NOLINT(cppcoreguidelines-owning-memory): another thread made the pool first
      }
    }
    return *pool;
  }

  /// Runs `work()` on `extra` workers and on the calling thread, and returns once all have returned;
  /// false (nothing run) when the pool is busy with another fork. `work` must not throw.
  /// \throws std::system_error when a worker cannot be started.
  template <class Work>
  bool run(std::size_t extra, Work& work) {
    const std::unique_lock fork(fork_, std::try_to_lock);
    if (!fork.owns_lock()) return false;
    {
      const std::lock_guard lock(mutex_);
      while (workers_ < extra) {
        std::thread(&thread_pool::worker, this, generation_.load()).detach();
        ++workers_;
      }
      job_ = [](void* context) { (*static_cast<Work*>(context))(); };
      context_ = &work;
      environment_ = floating_point_environment::current();
      wanted_ = extra;
      pending_.store(extra);
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    work();
    for (std::size_t spin = 0; spin < spin_limit && pending_.load() != 0; ++spin) pause();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_.load() == 0; });
    job_ = nullptr;
    context_ = nullptr;
    return true;
  }

 private:
  /// Spins before sleeping: ~0.1 ms of PAUSE on current x86 cores.
  static constexpr std::size_t spin_limit = std::size_t{1} << 12;

  /// The floating-point modes a fork's tasks run under: the forking thread's (rounding, and on x86
  /// MXCSR's flush-to-zero and denormals-are-zero), as a thread started for the fork would inherit
  /// them, so that threads change no result under any mode.
  struct floating_point_environment {
    int rounding = FE_TONEAREST;
#if defined(__x86_64__) || defined(__i386__)
    unsigned mxcsr = 0;
    static floating_point_environment current() noexcept { return {std::fegetround(), _mm_getcsr()}; }
    void apply() const noexcept {
      std::fesetround(rounding);  // x87 and SSE
      _mm_setcsr(mxcsr);          // SSE's flush-to-zero and denormals-are-zero too
    }
#else
    static floating_point_environment current() noexcept { return {std::fegetround()}; }
    void apply() const noexcept { std::fesetround(rounding); }
#endif
  };

  thread_pool() = default;

  static std::atomic<thread_pool*>& current() noexcept {
    static std::atomic<thread_pool*> pool{nullptr};
    return pool;
  }

  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  /// A worker's life: wait for a fork it has not seen, join it if it still wants workers, repeat.
  void worker(std::uint64_t seen) {
    ::mixprec::detail::single_threaded_flag() = true;  // the kernels a task calls stay on its worker
    for (;;) {
      for (std::size_t spin = 0; spin < spin_limit && generation_.load() == seen; ++spin) pause();
      void (*job)(void*) = nullptr;
      void* context = nullptr;
      floating_point_environment environment;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        seen = generation_.load();
        if (wanted_ == 0) continue;
        --wanted_;
        job = job_;
        context = context_;
        environment = environment_;
      }
      environment.apply();
      job(context);
      if (pending_.fetch_sub(1) == 1) {
        const std::lock_guard lock(mutex_);  // the caller checks pending_ under it before it sleeps
        done_.notify_one();
      }
    }
  }

  std::mutex fork_;   ///< held by the fork in progress
  std::mutex mutex_;  ///< guards the job, the worker counts and the condition variables' waits
  std::condition_variable wake_, done_;
  void (*job_)(void*) = nullptr;
  void* context_ = nullptr;
  floating_point_environment environment_;
  std::atomic<std::uint64_t> generation_{0};  ///< forks started (written under mutex_)
  std::atomic<std::size_t> pending_{0};       ///< workers of the current fork not yet finished
  std::size_t workers_ = 0;                   ///< workers started
  std::size_t wanted_ = 0;                    ///< workers the current fork still wants
};

}  // namespace kernels::detail

namespace internal {

/// Internal API (docs/kernels.md, "Internal API"). Runs `f(task)` for every task in [0, tasks) on `threads` threads
/// (the caller is one of them; the others from the kept `thread_pool`, or started for this call when the pool is busy
/// or the caller is itself a task of a fork); tasks are taken in order from a shared counter. The first exception
/// thrown by a task is rethrown on the caller after every thread has finished.
template <class F>
void parallel_for(std::size_t tasks, std::size_t threads, const F& f) {
  if (tasks == 0) return;
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::atomic_flag error_set = ATOMIC_FLAG_INIT;
  auto work = [&]() noexcept {
    const single_threaded_scope single;
    try {
      for (std::size_t task = next.fetch_add(1); task < tasks; task = next.fetch_add(1)) f(task);
    } catch (...) {
      if (!error_set.test_and_set()) error = std::current_exception();
      next.store(tasks);
    }
  };
  const std::size_t extra = std::min(threads, tasks) - 1;
  if (extra == 0) {
    work();
  } else if (::mixprec::detail::single_threaded_flag() || !kernels::detail::thread_pool::instance().run(extra, work)) {
    // Inside a task of a fork (or a single_threaded_scope) that still asks for threads, or while
    // another thread's fork holds the pool: threads of this call's own.
    std::vector<std::jthread> workers;
    workers.reserve(extra);
    for (std::size_t t = 0; t < extra; ++t) workers.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace internal

}  // namespace mixprec
