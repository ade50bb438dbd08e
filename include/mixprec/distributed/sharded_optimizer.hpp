/// \file
/// \brief `distributed::sharded_optimizer`: ZeRO stage 1 over an `adamw` or `sgd`. Each rank keeps the
/// optimiser state (moments, float32 master weights, Kahan compensations) of the parameter tensors its
/// `shard_plan` gives it, steps only those, and the ranks then exchange the new parameter values
/// (`all_gather_parameters`): optimiser-state memory per rank falls by about the rank count. The
/// gradients are still averaged over the ranks first (`gradient_reducer`), so every rank can clip by the
/// global norm and test finiteness as one process does: a sharded run gives the unsharded run's bits.
///
///     mixprec::distributed::sharded_optimizer opt(comm, model, mixprec::train::adamw({.weight_decay = 0.1}));
///     // each step: forward, backward, reducer.average(grads), then as with a plain optimiser:
///     mixprec::train::scaled_step(ls, opt, lr, model, grads, {.max_norm = 1.0});
///     mixprec::train::save_state(ck, opt, "optimizer");   // collective: rank 0's ck gets the whole state
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/gather_checkpoint.hpp"
#include "mixprec/distributed/parameters.hpp"
#include "mixprec/distributed/shard_plan.hpp"
#include "mixprec/train/safetensors.hpp"

namespace mixprec::distributed {

/// ZeRO stage 1 (optimiser-state partitioning, P_os) around a local optimiser (`train::adamw`,
/// `train::sgd`): see the file comment. Collective: every rank makes it for the same model and calls
/// `step`, `save_state` and `load_state` at the same points. The communicator must outlive it.
template <class Optimizer>
class sharded_optimizer {
 public:
  /// Plans `model`'s parameter tensors over the ranks (`shard_plan`, names under `prefix`, the prefix
  /// `step` will be given). Collective. \throws std::invalid_argument on every rank when the ranks'
  /// models differ; mpi_error.
  template <class Model>
  sharded_optimizer(const communicator& comm, const Model& model, Optimizer local = Optimizer{},
                    std::string prefix = {})
      : comm_(&comm),
        local_(std::move(local)),
        prefix_(std::move(prefix)),
        plan_(comm, detail::parameter_walk(model), prefix_) {}

  /// One optimiser step over every rank (PyTorch's `optimizer.step()` on a ZeroRedundancyOptimizer):
  /// this rank steps the parameters of `model` it owns with their gradients in `grads` (the ranks'
  /// average, the same on every rank) by `Optimizer::step(lr, model, grads, prefix, owned)`, then every
  /// rank receives the others' new values (`all_gather_parameters`). `only` further restricts the
  /// parameters stepped on every rank. Collective.
  /// \throws std::invalid_argument on every rank, before any change, when `model` is not the plan's or
  ///         `prefix` is not the one the plan was made with; on every rank, after the gather, when the
  ///         local optimiser's `step` threw on any rank (its message, after the rank: the parameters are
  ///         the same on every rank, stepped where their owner's step got to); mpi_error.
  template <class Model, class Grads>
  void step(double lr, Model& model, const Grads& grads, std::string_view prefix = {},
            const std::function<bool(std::string_view)>& only = {}) {
    // Checked before anything changes: the prefix, and the model against the plan (a name the plan
    // does not know would be stepped by no rank).
    std::vector<detail::tensor_bytes> tensors;
    std::string error = detail::plan_walk(*comm_, plan_, model, tensors);
    if (error.empty() && prefix != prefix_) {
      error = internal::concat("mixprec::distributed::sharded_optimizer: step's prefix \"", prefix,
                               "\" is not the prefix \"", prefix_, "\" the optimiser was made with");
    }
    throw_if_any_rank(*comm_, error);
    const int rank = comm_->rank();
    try {
      local_.step(lr, model, grads, prefix,
                  [&](std::string_view name) { return plan_.owns(rank, name) && (!only || only(name)); });
    } catch (const std::exception& e) {
      error = e.what();
    }
    // Even after a failure on some rank, every rank takes the tensors as their owners left them: the
    // ranks keep the same parameters.
    all_gather_parameters(*comm_, plan_, model);
    throw_if_any_rank(*comm_, error);
  }

  /// Writes the whole optimiser state into rank `root`'s `ck`, with the names and values a single
  /// process's optimiser writes (so the file resumes on any rank count); the other ranks' `ck` are left
  /// as they were. Collective (`gather_checkpoint`). \throws what `gather_checkpoint` throws.
  void save_state(train::checkpoint& ck, int root = 0) const {
    train::checkpoint mine;
    local_.save_state(mine);
    gather_checkpoint(*comm_, mine, root);
    if (comm_->rank() == root) ck.insert({}, mine);
  }

  /// Loads a whole optimiser state (one process's, or a sharded run's gathered state, for any rank
  /// count): every rank is given the same `ck` and keeps its own parameters' state. \throws what the
  /// local optimiser's `load_state` throws.
  void load_state(const train::checkpoint& ck) {
    local_.load_state(ck);
    const int rank = comm_->rank();
    local_.keep_states([&](std::string_view name) { return plan_.owns(rank, name); });
  }

  /// The bytes of optimiser state on this rank (`optimizer_base::state_bytes`).
  [[nodiscard]] std::size_t state_bytes() const noexcept { return local_.state_bytes(); }
  /// The number of steps begun (the same on every rank).
  [[nodiscard]] auto step() const noexcept { return local_.step(); }
  /// Which rank steps which tensor.
  [[nodiscard]] const shard_plan& plan() const noexcept { return plan_; }
  /// This rank's optimiser (its options, and the state of its own parameters).
  [[nodiscard]] const Optimizer& local() const noexcept { return local_; }

 private:
  const communicator* comm_;
  Optimizer local_;
  std::string prefix_;
  shard_plan plan_;
};

}  // namespace mixprec::distributed
