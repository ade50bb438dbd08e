/// \file
/// \brief MPI for data-parallel training: `distributed::environment` (MPI_Init_thread and
/// MPI_Finalize, once per process) and `distributed::communicator` (a duplicate of a communicator
/// whose MPI errors come back as `distributed::mpi_error` exceptions, not aborts: rank, size,
/// barrier) and `distributed::all_ranks`, a flag agreed by every rank. The only folder of mixprec that needs MPI (the
/// `mixprec::distributed` CMake target, made when CMake finds MPI); nothing below it includes it.
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "mixprec/arch/message.hpp"

namespace mixprec::distributed {

/// An MPI call that returned an error: its name, MPI's error string and the error code.
class mpi_error : public std::runtime_error {
 public:
  mpi_error(std::string_view call, int code) : std::runtime_error(describe(call, code)), code_(code) {}
  /// The MPI error code the call returned.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  static std::string describe(std::string_view call, int code) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
    return internal::concat(
        "mixprec::distributed: ", call, " failed: ",
        length > 0 ? std::string_view(text, static_cast<std::size_t>(length)) : std::string_view("unknown MPI error"),
        " (code ", code, ")");
  }
  int code_;
};

/// Throws `mpi_error` naming `call` unless `code` is MPI_SUCCESS.
inline void check(int code, std::string_view call) {
  if (code != MPI_SUCCESS) throw mpi_error(call, code);
}

/// MPI for this process, from construction to destruction: `MPI_Init_thread` asking for
/// `MPI_THREAD_FUNNELED` (only the thread that made the environment calls MPI; the kernels' worker
/// threads never do), and `MPI_Finalize`. Make one in `main`, before any communicator, when MPI is
/// not already initialised by the program; a second one while the first lives throws.
/// \throws std::logic_error if MPI is already initialised or finalised; mpi_error if MPI_Init_thread
///         fails or grants less than `MPI_THREAD_FUNNELED`.
class environment {
 public:
  /// Initialises MPI with the program's arguments (MPI may read and remove its own).
  environment(int& argc, char**& argv) { init(&argc, &argv); }
  /// Initialises MPI without arguments.
  environment() { init(nullptr, nullptr); }
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  ~environment() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized == 0) MPI_Finalize();
  }

  /// The thread support MPI granted (MPI_THREAD_FUNNELED or more).
  [[nodiscard]] int thread_support() const noexcept { return provided_; }

 private:
  void init(int* argc, char*** argv) {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized != 0 || finalized != 0) {
      throw std::logic_error(
          "mixprec::distributed::environment: MPI is already initialised (or finalised) in this process; make "
          "one environment in main, before any communicator");
    }
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided_), "MPI_Init_thread");
    if (provided_ < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      throw std::runtime_error(internal::concat(
          "mixprec::distributed::environment: MPI grants thread support level ", provided_,
          " but MPI_THREAD_FUNNELED is needed (the kernels run worker threads beside the calling thread)"));
    }
  }
  int provided_ = 0;
};

/// A group of ranks (processes) that train together: a duplicate of `MPI_COMM_WORLD` (or of a given
/// communicator), so mixprec's messages never meet the program's own, with `MPI_ERRORS_RETURN` set so
/// that every failed call throws `mpi_error` instead of aborting the job. Move-only; frees its
/// duplicate on destruction. Every collective of `distributed/` is called by every rank of the
/// communicator, in the same order (MPI's rule).
/// \throws std::logic_error when MPI is not initialised (make a `distributed::environment` first);
///         mpi_error when MPI_Comm_dup fails.
class communicator {
 public:
  /// A duplicate of MPI_COMM_WORLD.
  communicator() : communicator(MPI_COMM_WORLD) {}
  /// A duplicate of `base`.
  explicit communicator(MPI_Comm base) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized == 0) {
      throw std::logic_error(
          "mixprec::distributed::communicator: MPI is not initialised; make a mixprec::distributed::environment "
          "in main first");
    }
    check(MPI_Comm_dup(base, &comm_), "MPI_Comm_dup");
    try {
      check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
      check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    } catch (...) {
      release();
      throw;
    }
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&& other) noexcept
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)), rank_(other.rank_), size_(other.size_) {}
  communicator& operator=(communicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      rank_ = other.rank_;
      size_ = other.size_;
    }
    return *this;
  }
  ~communicator() { release(); }

  /// This process's rank, 0 <= rank < size.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The number of ranks.
  [[nodiscard]] int size() const noexcept { return size_; }
  /// The MPI communicator (a duplicate owned by this object).
  [[nodiscard]] MPI_Comm native() const noexcept { return comm_; }
  /// Waits until every rank has called it. \throws mpi_error.
  void barrier() const { check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  void release() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_NULL && finalized == 0) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

/// True on every rank when `mine` is true on every rank (a logical AND over the ranks): how every rank
/// agrees to skip a step whose gradients are not finite on some rank. Collective. \throws mpi_error.
[[nodiscard]] inline bool all_ranks(const communicator& comm, bool mine) {
  int value = mine ? 1 : 0;
  check(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MIN, comm.native()), "MPI_Allreduce");
  return value == 1;
}

}  // namespace mixprec::distributed
