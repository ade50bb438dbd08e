// Tests of mixprec::internal::parallel_for and its kept thread_pool (kernels/threads.hpp): every task
// runs exactly once, on at most the threads asked for; forks from two user threads at once, a fork
// inside a task, and an exception in a task all complete; the kernels called inside a task stay on
// its thread; the workers are kept from fork to fork and run under the forking thread's
// floating-point modes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cfenv>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "mixprec/kernels/threads.hpp"

namespace threads_test {

using mixprec::internal::parallel_for;

namespace {

/// Runs a fork of `tasks` tasks on `threads` threads; checks each task ran once and returns the number
/// of distinct threads that ran them.
std::size_t fork_and_count(std::size_t tasks, std::size_t threads) {
  std::vector<std::atomic<int>> runs(tasks);
  std::atomic<std::size_t> widened{0};  // Catch's assertions are for the main thread: count, check after
  std::mutex mutex;
  std::set<std::thread::id> ids;
  parallel_for(tasks, threads, [&](std::size_t task) {
    runs[task].fetch_add(1);
    if (mixprec::num_threads() != 1) widened.fetch_add(1);  // a task's own kernels stay on its thread
    const std::lock_guard lock(mutex);
    ids.insert(std::this_thread::get_id());
  });
  CHECK(widened.load() == 0);
  std::size_t once = 0;
  for (const auto& r : runs) once += r.load() == 1 ? 1U : 0U;
  CHECK(once == tasks);
  return ids.size();
}

/// Runs a fork of two tasks on two threads in which each task waits (up to 10 s) for the other to
/// start, so that both threads take one; `f(is_caller)` runs in each task. Returns false if the two
/// tasks never overlapped.
template <class F>
bool fork_of_two(const F& f) {
  const auto caller = std::this_thread::get_id();
  std::atomic<int> started{0};
  std::atomic<bool> overlapped{true};
  parallel_for(2, 2, [&](std::size_t) {
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        overlapped.store(false);
        break;
      }
      std::this_thread::yield();
    }
    f(std::this_thread::get_id() == caller);
  });
  return overlapped.load();
}

}  // namespace

TEST_CASE("parallel_for runs every task once on at most the threads asked for, fork after fork", "[kernels][threads]") {
  for (int round = 0; round < 200; ++round) {
    const auto tasks = static_cast<std::size_t>(1 + round % 7);
    const auto threads = static_cast<std::size_t>(1 + round % 3);
    CHECK(fork_and_count(tasks, threads) <= threads);
  }
  CHECK(fork_and_count(0, 2) == 0);
}

TEST_CASE("forks from two user threads at once and forks inside a task complete", "[kernels][threads]") {
  // One user thread holds the pool while the other forks (threads of its own), repeatedly; tasks of
  // the first fork again with two threads (nested: threads of their own, never the pool they run on).
  std::atomic<std::size_t> total{0};
  auto user = [&] {
    for (int round = 0; round < 50; ++round) {
      parallel_for(4, 2, [&](std::size_t) { parallel_for(3, 2, [&](std::size_t) { total.fetch_add(1); }); });
    }
  };
  std::thread other(user);
  user();
  other.join();
  CHECK(total.load() == 2U * 50U * 4U * 3U);
}

TEST_CASE("an exception in a task reaches the caller after the fork, and the pool keeps working",
          "[kernels][threads]") {
  std::atomic<std::size_t> ran{0};
  CHECK_THROWS_AS(parallel_for(8, 2,
                               [&](std::size_t task) {
                                 ran.fetch_add(1);
                                 if (task == 1) throw std::runtime_error("task 1 failed");
                               }),
                  std::runtime_error);
  CHECK(ran.load() >= 1);
  CHECK(fork_and_count(6, 2) <= 2);
}

TEST_CASE("the pool's workers are kept from fork to fork", "[kernels][threads]") {
  // A thread_local on the worker counts the forks it served: a thread started per fork would always
  // see 0 before its first task. Which kept worker takes a fork's task is up to the pool (under load,
  // any idle one), so the forks outnumber any pool this machine makes: by the pigeonhole principle some
  // worker then serves twice, and sees 1 or more, if and only if workers are kept.
  static thread_local int served = 0;
  std::atomic<int> most_served_before{-1};
  auto task = [&](bool is_caller) {
    if (!is_caller) {
      int seen = most_served_before.load();
      while (served > seen && !most_served_before.compare_exchange_weak(seen, served)) {
      }
    }
    ++served;
  };
  const auto forks = 2 * std::max<unsigned>(std::thread::hardware_concurrency(), 64U);
  for (unsigned f = 0; f < forks; ++f) REQUIRE(fork_of_two(task));
  CHECK(most_served_before.load() >= 1);
}

TEST_CASE("a fork's tasks run under the forking thread's floating-point modes", "[kernels][threads]") {
  // Threads change no result: a worker kept from an earlier fork must take the rounding mode (and on
  // x86 MXCSR's FTZ/DAZ) of the thread that forks now, as a thread started for the fork would.
  REQUIRE(fork_of_two([](bool) {}));  // the workers exist, started under the default mode
  const int saved = std::fegetround();
  for (const int mode : {FE_TOWARDZERO, FE_UPWARD, FE_TONEAREST}) {
    REQUIRE(std::fesetround(mode) == 0);
    std::atomic<int> wrong{0};
    const bool overlapped = fork_of_two([&](bool) {
      if (std::fegetround() != mode) wrong.fetch_add(1);
    });
    std::fesetround(saved);
    REQUIRE(overlapped);
    CAPTURE(mode);
    CHECK(wrong.load() == 0);
  }
}

}  // namespace threads_test
