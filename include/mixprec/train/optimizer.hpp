/// \file
/// \brief What `adamw` and `sgd` share: per-parameter state keyed by dotted name and created on first
/// use, the explicit step counter, float32 master weights for 16-bit parameters, the write-back of an
/// updated value into the parameter (round to nearest even, stochastic rounding, Kahan compensation),
/// and saving/loading that state in a safetensors `checkpoint`.
///
/// **Driving an optimiser** (one call per tensor; a model's `for_each_parameter(f)` walk can drive it):
///
///     mixprec::train::adamw opt({.beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
///     opt.begin_step(get_lr(it));                        // t += 1, the learning rate of this step
///     opt.update("blocks.0.attn.qkv.kernel", w, dw, /*decay=*/true);
///     opt.update("blocks.0.ln_1.scale", g, dg, /*decay=*/false);
///
/// or, for a whole layer or model with its gradients (every parameter, nanoGPT's decay rule):
///
///     opt.step(get_lr(it), model, grads);                // begin_step + one update per parameter
///
/// A step skipped by loss scaling calls neither `begin_step` nor `update`: parameters, master weights,
/// moments and t stay as they were (PyTorch's GradScaler skips `optimizer.step()` the same way).
///
/// **Element types**: a parameter T is float, double, bfloat16 or float16; a gradient G is float,
/// double, bfloat16 or float16 (converted exactly to the math type). The optimiser's math and state
/// type S is double for double parameters and float otherwise (PyTorch keeps state in the parameter's
/// dtype; for 16-bit parameters mixprec keeps float32 state, as llm.c does).
///
/// **16-bit parameters** (`precision_options`, docs/training.md, "16-bit parameters"):
///  - `master_weights = true` (the default): a float32 copy of the parameter is made on first use; every
///    step updates the master, and the parameter becomes `round(master)`: round to nearest even, or
///    stochastic rounding when `rounding == write_back::stochastic` (llm.c rounds its bf16 copy that way);
///  - `master_weights = false`: the step starts from the parameter's own value and writes back with
///    `rounding`: `nearest` (updates below half an ulp are lost), `stochastic` (bfloat16 and float16; the random
///    bits hash (seed, step, tensor id, element index), see `rounding.hpp`), or `kahan` (a compensation
///    tensor of the parameter's type, optimi's `kahan_sum`; the whole update u = new - old, weight decay
///    included, goes through the compensation; optimi applies the decay to the parameter directly).
///
/// **Checkpoint names** (docs/training.md, "Checkpoints (safetensors)"): `master.<name>` (F32), `kahan.<name>` (the
/// parameter's dtype), the optimiser's moments (`adam.m.<name>`, `adam.v.<name>`, `sgd.momentum_buffer.<name>`; F32, or
/// F64 for double parameters), and `step` (0-rank I64). The `__metadata__` gets `<kind>.sr_seed` and the
/// options. `load_state` replaces all state; a loaded state is matched with its parameter at its next
/// `update`, which checks the element count and that the parameter type fits the saved tensors.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/train/rounding.hpp"
#include "mixprec/train/safetensors.hpp"

namespace mixprec::train {

/// nanoGPT's weight-decay rule (`model.py` `configure_optimizers`): decay a parameter iff its rank is
/// at least 2 (matmul kernels and embeddings; not norm scales or biases).
[[nodiscard]] constexpr bool decays_by_rank(std::size_t rank) noexcept { return rank >= 2; }

/// How an updated value is written into a 16-bit parameter (see the file comment).
enum class write_back {
  nearest,     ///< round to nearest even
  stochastic,  ///< stochastic rounding (bfloat16 and float16 parameters)
  kahan,       ///< Kahan-compensated parameter (only without master weights)
};

/// Options for 16-bit (bfloat16/float16) parameters; float and double parameters ignore them.
struct precision_options {
  bool master_weights = true;                 ///< keep a float32 master copy of each 16-bit parameter
  write_back rounding = write_back::nearest;  ///< write-back of the parameter (see the file comment)
  std::uint64_t seed = 0;                     ///< seed of stochastic rounding
};

/// Parameter element types the optimisers update.
template <class T>
concept optimizer_parameter =
    std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, bfloat16> || std::same_as<T, float16>;

/// Gradient element types the optimisers read.
template <class G>
concept optimizer_gradient = optimizer_parameter<std::remove_const_t<G>>;

/// The math and state type of the optimisers for parameter type T: double for double, else float.
template <class T>
using optimizer_math_t = std::conditional_t<std::same_as<T, double>, double, float>;

/// The state of one parameter. Moments live in `moments32` (or `moments64` for double parameters):
/// AdamW's m and v at indices 0 and 1, SGD's momentum buffer at index 0.
struct parameter_state {
  dtype param_type = dtype::float32;  ///< dtype of the parameter (after a load: known once bound)
  bool bound = true;                  ///< false after `load_state` until the next `update` of this name
  std::vector<std::uint64_t> shape;   ///< shape saved in checkpoints ({size} for spans)
  std::size_t size = 0;               ///< element count
  std::uint64_t tensor_id = 0;        ///< `tensor_id_of(name)`, for stochastic rounding
  bool moments_double = false;        ///< moments in `moments64` (double parameter)
  bool has_moments = false;           ///< the moments exist (SGD creates its buffer on the first update)
  std::array<std::vector<float>, 2> moments32;
  std::array<std::vector<double>, 2> moments64;
  std::vector<float> master;                ///< float32 master weights; empty when there are none
  std::vector<std::uint16_t> compensation;  ///< Kahan compensation, raw bits of `param_type`; or empty
};

/// The machinery shared by `adamw` and `sgd`; see the file comment. Not used on its own.
class optimizer_base {
 public:
  /// Starts an optimiser step: t += 1, and `lr` is the learning rate of the `update` calls that follow.
  void begin_step(double lr) {
    ++step_;
    lr_ = lr;
    in_step_ = true;
  }
  /// The number of steps begun (t; PyTorch's `state["step"]`, shared by all parameters here).
  [[nodiscard]] std::int64_t step() const noexcept { return step_; }
  /// The learning rate of the current step.
  [[nodiscard]] double lr() const noexcept { return lr_; }
  /// The 16-bit parameter options.
  [[nodiscard]] const precision_options& precision() const noexcept { return precision_; }
  /// The state of parameter `name`, or nullptr before its first update (or load).
  [[nodiscard]] const parameter_state* find_state(std::string_view name) const {
    auto it = states_.find(std::string(name));
    return it == states_.end() ? nullptr : &it->second;
  }
  /// All states by name.
  [[nodiscard]] const std::map<std::string, parameter_state>& states() const noexcept { return states_; }

  /// The bytes of optimiser state held: moments, float32 master weights and Kahan compensations of
  /// every parameter (what ZeRO-1 divides among the ranks; the step counter and options not counted).
  [[nodiscard]] std::size_t state_bytes() const noexcept {
    std::size_t bytes = 0;
    for (const auto& [name, st] : states_) {
      for (std::size_t k = 0; k < 2; ++k)
        bytes += st.moments32[k].size() * sizeof(float) + st.moments64[k].size() * sizeof(double);
      bytes += st.master.size() * sizeof(float) + st.compensation.size() * sizeof(std::uint16_t);
    }
    return bytes;
  }

  /// Forgets the state of every parameter whose name `keep` rejects (a ZeRO-1 rank that loaded a whole
  /// train state keeps its own parameters' state). A parameter forgotten and then updated again starts
  /// afresh (moments zero), so forget only parameters this optimiser will not step.
  void keep_states(const std::function<bool(std::string_view)>& keep) {
    std::erase_if(states_, [&](const auto& entry) { return !keep(entry.first); });
  }

 protected:
  optimizer_base(std::string kind, precision_options precision, std::array<std::string, 2> moment_prefixes,
                 std::size_t moment_count)
      : kind_(std::move(kind)),
        precision_(precision),
        moment_prefixes_(std::move(moment_prefixes)),
        moment_count_(moment_count) {
    if (precision_.master_weights && precision_.rounding == write_back::kahan)
      throw std::invalid_argument(
          internal::concat(kind_, ": Kahan compensation replaces master weights; set master_weights = false"));
  }

  [[noreturn]] void fail(std::string_view name, const std::string& what) const {
    throw std::invalid_argument(internal::concat(kind_, ": parameter \"", name, "\": ", what));
  }

  /// The state of `name` for a parameter of type T and `size` elements: created on first use (moments
  /// zero, master copied from `param`), matched with a loaded state, or checked against earlier calls.
  template <optimizer_parameter T>
  parameter_state& state_for(std::string_view name, std::span<const T> param, std::vector<std::uint64_t> shape) {
    if (!in_step_) throw std::logic_error(internal::concat(kind_, ": update(\"", name, "\") before begin_step()"));
    constexpr bool narrow = std::same_as<T, bfloat16> || std::same_as<T, float16>;
    constexpr bool is_double = std::same_as<T, double>;
    const bool master = narrow && precision_.master_weights;
    const bool kahan = narrow && !precision_.master_weights && precision_.rounding == write_back::kahan;
    auto [it, created] = states_.try_emplace(std::string(name));
    parameter_state& st = it->second;
    if (created) {
      st.param_type = dtype_of_v<T>;
      st.shape = std::move(shape);
      st.size = param.size();
      st.tensor_id = tensor_id_of(name);
      st.moments_double = is_double;
      for (std::size_t k = 0; k < moment_count_; ++k) {
        if (is_double)
          st.moments64[k].assign(param.size(), 0.0);
        else
          st.moments32[k].assign(param.size(), 0.0f);
      }
      st.has_moments = moment_count_ == 2;  // AdamW's zeros are its initial state; SGD clones the first g
      if (master) {
        st.master.resize(param.size());
        for (std::size_t i = 0; i < param.size(); ++i) st.master[i] = static_cast<float>(param[i]);
      }
      if (kahan) st.compensation.assign(param.size(), 0);
      return st;
    }
    if (st.size != param.size())
      fail(name, internal::concat("has ", param.size(), " elements, its optimiser state ", st.size));
    if (!st.bound) {
      if (st.moments_double != is_double && (st.has_moments || moment_count_ == 2))
        fail(name, internal::concat("the loaded moments are ", st.moments_double ? "F64" : "F32", ", the parameter is ",
                                    mixprec::name(dtype_of_v<T>)));
      if (master != !st.master.empty())
        fail(name,
             master
                 ? internal::concat("the parameter needs master weights, the checkpoint has no master.", name)
                 : std::string("the checkpoint has master weights, which this parameter and these options do not use"));
      if (kahan != !st.compensation.empty() || (kahan && st.param_type != dtype_of_v<T>))
        fail(name, "the checkpoint's Kahan compensation does not match the parameter type and options");
      if (!st.has_moments) {  // SGD before its first momentum update: zeros of the right precision
        for (std::size_t k = 0; k < moment_count_; ++k) {
          st.moments32[k].clear();
          st.moments64[k].clear();
          if (is_double)
            st.moments64[k].assign(st.size, 0.0);
          else
            st.moments32[k].assign(st.size, 0.0f);
        }
      }
      st.param_type = dtype_of_v<T>;
      st.moments_double = is_double;
      st.bound = true;
      st.shape = std::move(shape);
      return st;
    }
    if (st.param_type != dtype_of_v<T>)
      fail(name, internal::concat("was ", mixprec::name(st.param_type), ", now ", mixprec::name(dtype_of_v<T>)));
    return st;
  }

  /// Moment `k` of `st` as S (float or double).
  template <class S>
  static std::vector<S>& moment(parameter_state& st, std::size_t k) {
    if constexpr (std::same_as<S, double>)
      return st.moments64[k];
    else
      return st.moments32[k];
  }

  /// For every element i: theta = the current value (master or parameter, as S), theta' = next(i, theta),
  /// then writes theta' back into master and parameter as the options say (see the file comment).
  template <optimizer_parameter T, class F>
  void write(parameter_state& st, std::span<T> param, F&& next) {
    using S = optimizer_math_t<T>;
    if constexpr (std::same_as<T, float> || std::same_as<T, double>) {
      for (std::size_t i = 0; i < param.size(); ++i) param[i] = next(i, param[i]);
    } else {
      const auto round = [&](float x, std::size_t i) { return round_back<T>(st, x, i); };
      if (!st.master.empty()) {
        for (std::size_t i = 0; i < param.size(); ++i) {
          st.master[i] = next(i, S(st.master[i]));
          param[i] = round(st.master[i], i);
        }
      } else if (!st.compensation.empty()) {
        for (std::size_t i = 0; i < param.size(); ++i) {
          const float theta = static_cast<float>(param[i]);
          const float u = next(i, theta) - theta;
          T c = T::from_bits(st.compensation[i]);
          kahan_add(param[i], c, u);
          st.compensation[i] = c.bits();
        }
      } else {
        for (std::size_t i = 0; i < param.size(); ++i) param[i] = round(next(i, static_cast<float>(param[i])), i);
      }
    }
  }

  /// `write` for an update that runs over a whole tensor at once (a vectorised kernel): where theta is
  /// held as S = optimizer_math_t<T> in memory (the parameter itself for float and double, the float32
  /// master weights of a 16-bit parameter), `update(theta)` updates it in place, the parameter is written
  /// back from the masters as `write` does, and true is returned. Otherwise (a 16-bit parameter without
  /// master weights) nothing is done and false is returned: use `write`.
  template <optimizer_parameter T, class F>
  bool write_whole(parameter_state& st, std::span<T> param, F&& update) {
    if constexpr (std::same_as<T, float> || std::same_as<T, double>) {
      update(param);
      return true;
    } else {
      if (st.master.empty()) return false;
      update(std::span<float>(st.master));
      for (std::size_t i = 0; i < param.size(); ++i) param[i] = round_back<T>(st, st.master[i], i);
      return true;
    }
  }

  /// x written back to a 16-bit parameter element i: rounded to nearest, or stochastically as the
  /// options say (the same bits as `write`).
  template <optimizer_parameter T>
  T round_back(const parameter_state& st, float x, std::size_t i) const {
    if (precision_.rounding == write_back::stochastic) {
      const std::uint16_t bits =
          stochastic_rounding_bits(precision_.seed, static_cast<std::uint64_t>(step_), st.tensor_id, i);
      if constexpr (std::same_as<T, bfloat16>) {
        return stochastic_round_bf16(x, bits);
      } else {
        return stochastic_round_f16(x, bits);
      }
    }
    return T(x);
  }

  /// Writes `step`, master weights, compensations, moments and metadata into `ck`. Defined in
  /// train/detail/optimizer_state.hpp (compiled once into `mixprec::compiled` in the compiled mode).
  void save_common(checkpoint& ck, const std::map<std::string, std::string>& options) const;

  /// Replaces all state with the one saved in `ck` (see the file comment). Throws safetensors_error
  /// when `step` is missing or the tensors of one parameter disagree (count, dtype). Defined in
  /// train/detail/optimizer_state.hpp.
  void load_common(const checkpoint& ck);

  std::string kind_;
  precision_options precision_;
  std::array<std::string, 2> moment_prefixes_;
  std::size_t moment_count_;
  std::map<std::string, parameter_state> states_;
  std::int64_t step_ = 0;
  double lr_ = 0.0;
  bool in_step_ = false;
};

/// The public `update` overloads every optimiser offers, written once (CRTP): `Derived` defines a
/// private `update_impl(name, std::span<T> param, std::span<const G> grad, bool decay, shape)` and
/// befriends this class.
template <class Derived>
class optimizer : public optimizer_base {
 public:
  /// One update of parameter `name` (dotted, stable across steps) from its gradient; `decay` switches
  /// weight decay for this parameter. The state is created on the first call.
  /// \throws std::invalid_argument if the sizes differ or the parameter changed type or size since
  ///         its state was made; std::logic_error before `begin_step`.
  template <optimizer_parameter T, optimizer_gradient G>
  void update(std::string_view name, std::span<T> param, std::span<G> grad, bool decay) {
    static_cast<Derived&>(*this).update_impl(name, param,
                                             std::span<const std::remove_const_t<G>>(grad.data(), grad.size()), decay,
                                             {static_cast<std::uint64_t>(param.size())});
  }

  /// One whole step over a layer or model (PyTorch's `optimizer.step()`): `begin_step(lr)`, then
  /// `update(name, param, grad, decays_by_rank(param.dimension()))` for every parameter of `model` with
  /// its gradient, walked by `nn::for_each_parameter(model, grads, ...)` (so `model` needs
  /// `for_each_parameter(f(name, tensor))` and `grads` `for_each(f(name, tensor))`, as every nn layer and
  /// its `gradients` have). Names are `prefix + "." + name`, or `name` when `prefix` is empty.
  /// \throws std::invalid_argument when the two walks disagree (checked before `begin_step`, so nothing
  ///         changes then), and what `update` throws.
  /// With `only`, the step updates only the parameters whose full name `only` accepts (the shard of a
  /// ZeRO-1 rank, distributed/sharded_optimizer.hpp); the others, and their state, are left untouched.
  using optimizer_base::step;  // step(): the number of steps begun
  template <class Model, class Grads>
  void step(double lr, Model& model, const Grads& grads, std::string_view prefix = {},
            const std::function<bool(std::string_view)>& only = {}) {
    nn::for_each_parameter(model, grads, [](std::string_view, auto&, const auto&) {});  // names and counts
    begin_step(lr);
    nn::for_each_parameter(model, grads, [&](std::string_view name, auto& param, const auto& grad) {
      const std::string full = prefix.empty() ? std::string(name) : internal::concat(prefix, ".", name);
      if (only && !only(full)) return;
      this->update(full, param, grad, decays_by_rank(param.dimension()));
    });
  }

  /// The same for xtensor arrays (the shapes must be equal; the state is saved with this shape).
  template <optimizer_parameter T, optimizer_gradient G, std::size_t N>
  void update(std::string_view name, xt::xtensor<T, N>& param, const xt::xtensor<G, N>& grad, bool decay) {
    if (param.shape() != grad.shape()) fail(name, "the gradient's shape differs from the parameter's");
    static_cast<Derived&>(*this).update_impl(name, std::span<T>(param.data(), param.size()),
                                             std::span<const G>(grad.data(), grad.size()), decay,
                                             std::vector<std::uint64_t>(param.shape().begin(), param.shape().end()));
  }

 protected:
  using optimizer_base::optimizer_base;

  /// An option's value as the checkpoint metadata stores it: shortest round-trip form ("%.17g").
  static std::string format_option(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return buf;
  }
};

}  // namespace mixprec::train

#if !MIXPREC_EXTERN_CHECKPOINTS
#include "mixprec/train/detail/optimizer_state.hpp"
#endif
