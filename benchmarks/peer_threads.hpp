/// \file
/// \brief Benchmarks' support: `threads_for`, the thread count of mixprec and of its peers (oneDNN and
/// Eigen through OpenMP) set together for one benchmark.
#pragma once

#include <cstddef>

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/kernels/threads.hpp"

#if MIXPREC_HAVE_OPENMP
#include <omp.h>
#endif

/// Sets the thread count of every library for one benchmark and restores mixprec's afterwards:
/// `mixprec::set_num_threads`, `omp_set_num_threads` (Debian's oneDNN runs on OpenMP) and Eigen's.
class threads_for {
 public:
  explicit threads_for(std::size_t threads) : previous_(mixprec::set_num_threads(threads)) {
#if MIXPREC_HAVE_OPENMP
    omp_set_num_threads(static_cast<int>(threads));
#endif
    Eigen::setNbThreads(static_cast<int>(threads));
  }
  threads_for(const threads_for&) = delete;
  threads_for& operator=(const threads_for&) = delete;
  ~threads_for() { mixprec::set_num_threads(previous_); }

 private:
  std::size_t previous_;
};
