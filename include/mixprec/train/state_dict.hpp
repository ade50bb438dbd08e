/// \file
/// \brief State dicts: `save_state(ck, x, prefix)` and `load_state(ck, x, prefix, options)` put any
/// layer, composite or model, an optimiser, a loss scale or a random engine into a safetensors
/// `checkpoint` under a dotted prefix, and read it back. PyTorch's `state_dict()` /
/// `load_state_dict(strict=True)`, with one file holding a whole train state.
///
/// **What is saved, by kind of `x`:**
///  - a layer or model (anything with `for_each_parameter(f(name, tensor))`, and `for_each_buffer` if
///    it has one, like batch_norm's running statistics): each tensor as `prefix.<name>`, in its own
///    dtype and shape;
///  - an optimiser (`adamw`, `sgd`: anything with `save_state(checkpoint&)` / `load_state(const
///    checkpoint&)`): its own names (optimizer.hpp) under `prefix.`, metadata keys included;
///  - `dynamic_loss_scale`: `prefix.loss_scale`, `.counter`, `.initial_scale`, `.period`, `.factor`,
///    `.min_loss_scale`, `.max_loss_scale` (0-rank F32/I32): every field of its `state()`, so a resumed
///    run adjusts as the first would;
///    `static_loss_scale`: `prefix.scale`; `no_op_loss_scale`: nothing;
///  - a random engine (`std::mt19937`, any engine with `<<` and `>>`): its textual state (the standard
///    library's exact round trip) in the metadata entry `prefix.state`.
///
/// **Loading a layer or model is strict by default** (PyTorch's `strict=True`): a tensor of the model
/// absent from the file ("missing") and a tensor of the file under `prefix.` that the model does not
/// have ("unexpected") are errors. A stored shape that differs from the model's is always an error, and
/// so is a stored dtype that differs, unless `{.convert = true}` asks for the value to be rounded once
/// to the model's dtype (floating-point dtypes only). Every fault is found before anything is
/// written: on an error the model is as it was, and the message lists every tensor at fault.
///
///     mixprec::train::checkpoint ck;                      // one part at a time
///     mixprec::train::save_state(ck, model, "model");
///     mixprec::train::save_state(ck, opt, "optimizer");
///     ck.save("params_and_optimizer.safetensors");
///     auto back = mixprec::train::checkpoint::load("params_and_optimizer.safetensors");
///     mixprec::train::load_state(back, model, "model");  // throws on any missing/unexpected tensor
///
///     // or a whole train state in one call each way (PyTorch's torch.save of a dict of state dicts):
///     mixprec::train::save_states("state.safetensors", {{"model", model}, {"optimizer", opt},
///                                                       {"loss_scale", ls}, {"rng", rng}});
///     mixprec::train::load_states("state.safetensors", {{"model", model}, {"optimizer", opt},
///                                                       {"loss_scale", ls}, {"rng", rng}});
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/train/safetensors.hpp"

/// Helpers of the state dicts (names, dtype conversion on load).
namespace mixprec::detail {

/// `prefix.name`, or `name` when the prefix is empty.
[[nodiscard]] inline std::string dotted(std::string_view prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : std::string(prefix) + "." + std::string(name);
}

/// Calls `f(name, tensor)` on the parameters of `m`, then on its buffers if it has any.
template <class M, class F>
void for_each_state_tensor(M& m, F&& f) {
  m.for_each_parameter(f);
  if constexpr (requires { m.for_each_buffer(f); }) m.for_each_buffer(f);
}

/// The shape of a tensor as the checkpoint stores it.
template <class A>
[[nodiscard]] std::vector<std::uint64_t> stored_shape(const A& a) {
  return std::vector<std::uint64_t>(a.shape().begin(), a.shape().end());
}

/// The safetensors name and mixprec name of a dtype: "BF16 (bfloat16)".
[[nodiscard]] inline std::string dtype_label(dtype d) {
  const auto info = train::find_safetensors_dtype(d);
  return (info ? std::string(info->name) : std::string("?")) + " (" + std::string(mixprec::name(d)) + ")";
}

/// True for the floating-point dtypes `load_state` converts between.
[[nodiscard]] constexpr bool convertible(dtype d) noexcept {
  return is_floating(d) && train::find_safetensors_dtype(d).has_value();
}

/// Writes the stored tensor `t` into `out` (same element count): bytes copied when the dtypes agree,
/// else each element rounded once to T from its exact double value (every stored floating format is a
/// subset of float64). The stored dtype is dispatched once per tensor, not per element.
template <class T>
void copy_state_tensor(const train::stored_tensor& t, std::span<T> out) {
  if (t.type == dtype_of_v<T>) {
    if (!out.empty()) std::memcpy(out.data(), t.bytes.data(), out.size_bytes());
    return;
  }
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    const auto convert_from = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      constexpr dtype d = train::safetensors_dtypes[J].type;
      if constexpr (is_floating(d)) {
        using S = type_of_t<d>;
        if (t.type != d) return false;
        for (std::size_t i = 0; i < out.size(); ++i) {
          S value;
          std::memcpy(&value, t.bytes.data() + i * sizeof(S), sizeof(S));
          out[i] = static_cast<T>(static_cast<double>(value));
        }
        return true;
      } else {
        return false;
      }
    };
    (convert_from(std::integral_constant<std::size_t, I>{}) || ...);
  }
  (std::make_index_sequence<train::safetensors_dtypes.size()>{});
}

/// Calls `f(full_name, tensor)` on every parameter and buffer of `model`, named `prefix.<name>`: the walk
/// `save_state` and `load_state` share. A parameter type safetensors cannot store does not compile;
/// a name given twice throws std::invalid_argument (`caller` starts the message).
template <class M, class F>
void for_each_named_state(M& model, std::string_view prefix, const char* caller, F&& f) {
  std::set<std::string> seen;
  for_each_state_tensor(model, [&](const auto& name, auto& tensor) {
    using E = typename std::remove_cvref_t<decltype(tensor)>::value_type;
    static_assert(train::safetensors_element<E>,
                  "train::save_state / load_state: safetensors has no dtype for this parameter's element type "
                  "(complex, int4 and float6/float4 have none); store its parts or a wider type yourself.");
    std::string full = dotted(prefix, name);
    if (!seen.insert(full).second)
      throw std::invalid_argument(std::string(caller) + ": the model names \"" + full + "\" twice");
    f(full, tensor);
  });
}

/// ", "-joined quoted names.
[[nodiscard]] inline std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out;
}

}  // namespace mixprec::detail

namespace mixprec::train {

/// How `load_state` matches a layer or model with the file.
struct load_options {
  /// Missing and unexpected tensors are errors (PyTorch's `strict=True`). When false they are
  /// returned in `load_result` and the tensors present are loaded.
  bool strict = true;
  /// A stored floating-point dtype that differs from the model's is rounded once (to nearest even) to
  /// the model's dtype instead of being an error.
  bool convert = false;
};

/// What a non-strict `load_state` left out (PyTorch's `_IncompatibleKeys`): full dotted names.
struct load_result {
  std::vector<std::string> missing;     ///< tensors of the model absent from the file
  std::vector<std::string> unexpected;  ///< tensors of the file under the prefix the model lacks
};

/// A layer, composite or model: it walks its parameters as `for_each_parameter(f(name, tensor))`.
template <class M>
concept parameter_walk = requires(M& m) {
  m.for_each_parameter([](std::string_view, auto&) {});
};

/// An object that writes and reads its own state in a checkpoint (the optimisers).
template <class S>
concept own_state = requires(const S& cs, S& s, checkpoint& ck, const checkpoint& cck) {
  cs.save_state(ck);
  s.load_state(cck);
};

/// Puts every parameter (and buffer) of `model` into `ck` as `prefix.<name>`, in its dtype and shape.
/// \throws std::invalid_argument when the model's walk gives one name twice; safetensors_error when a
///         name is empty.
template <parameter_walk Model>
requires(!own_state<Model>) void save_state(checkpoint& ck, const Model& model, std::string_view prefix = {}) {
  detail::for_each_named_state(model, prefix, "train::save_state", [&](const std::string& full, const auto& tensor) {
    using E = typename std::remove_cvref_t<decltype(tensor)>::value_type;
    const auto shape = detail::stored_shape(tensor);
    ck.put(full, std::span<const E>(tensor.data(), tensor.size()), std::span<const std::uint64_t>(shape));
  });
}

/// Reads every parameter (and buffer) of `model` from `ck`'s `prefix.<name>` (see the file comment for
/// the strict rules and `options`). Writing through the model's non-const walk drops the layers' packed
/// copies of their weights, as an optimiser step does.
/// \returns the missing and unexpected tensors (both empty after a strict load).
/// \throws safetensors_error listing every missing or unexpected tensor (strict), every shape that
///         differs, and every dtype that differs (without `convert`, or when a dtype is not floating);
///         nothing is written then. std::invalid_argument when the walk gives one name twice.
template <parameter_walk Model>
requires(!own_state<Model>) load_result
    load_state(const checkpoint& ck, Model& model, std::string_view prefix = {}, const load_options& options = {}) {
  load_result result;
  std::vector<std::string> faults;
  std::set<std::string> seen;
  const auto check = [&](const std::string& full, const auto& tensor) {
    using E = typename std::remove_cvref_t<decltype(tensor)>::value_type;
    seen.insert(full);
    if (!ck.contains(full)) {
      result.missing.push_back(full);
      return;
    }
    const stored_tensor& t = ck.at(full);
    const auto shape = detail::stored_shape(tensor);
    if (t.shape != shape) {
      faults.push_back("\"" + full + "\" has shape " + detail::st_shape(t.shape) + " in the file and " +
                       detail::st_shape(shape) + " in the model");
      return;
    }
    constexpr dtype want = dtype_of_v<E>;
    const bool convertible = detail::convertible(t.type) && detail::convertible(want);
    if (t.type != want && !(options.convert && convertible)) {
      faults.push_back("\"" + full + "\" is " + detail::dtype_label(t.type) + " in the file and " +
                       detail::dtype_label(want) + " in the model" +
                       (convertible ? " (load with {.convert = true} to round it to the model's dtype)" : ""));
    }
  };
  detail::for_each_named_state(std::as_const(model), prefix, "train::load_state", check);
  const std::string head = prefix.empty() ? std::string() : std::string(prefix) + ".";
  for (const auto& [name, t] : ck.tensors()) {
    if (name.starts_with(head) && !seen.contains(name)) result.unexpected.push_back(name);
  }
  if (options.strict && !result.missing.empty())
    faults.push_back("missing from the file: " + detail::quoted_list(result.missing));
  if (options.strict && !result.unexpected.empty())
    faults.push_back("unexpected in the file" + (prefix.empty() ? std::string() : " under \"" + head + "\"") + ": " +
                     detail::quoted_list(result.unexpected));
  if (!faults.empty()) {
    std::string message = detail::st_prefix(ck.source()) + "load_state:";
    for (const auto& f : faults) message += " " + f + ";";
    message.pop_back();
    throw safetensors_error(message);
  }
  detail::for_each_named_state(model, prefix, "train::load_state", [&](const std::string& full, auto& tensor) {
    using E = typename std::remove_cvref_t<decltype(tensor)>::value_type;
    if (ck.contains(full)) detail::copy_state_tensor(ck.at(full), std::span<E>(tensor.data(), tensor.size()));
  });
  return result;
}

/// Puts an optimiser's state (its own names, optimizer.hpp) into `ck` under `prefix.`.
template <own_state S>
void save_state(checkpoint& ck, const S& state, std::string_view prefix = {}) {
  checkpoint part;
  state.save_state(part);
  ck.insert(prefix, part);
}

/// Replaces an optimiser's state with the one saved under `prefix.` (its `load_state` rules).
template <own_state S>
void load_state(const checkpoint& ck, S& state, std::string_view prefix = {}) {
  state.load_state(ck.scoped(prefix));
}

/// Puts every field of a dynamic loss scale into `ck` under `prefix.` (see the file comment).
inline void save_state(checkpoint& ck, const dynamic_loss_scale& ls, std::string_view prefix = {}) {
  const dynamic_loss_scale_state& s = ls.state();
  ck.put_scalar(detail::dotted(prefix, "loss_scale"), s.loss_scale);
  ck.put_scalar(detail::dotted(prefix, "counter"), static_cast<std::int32_t>(s.counter));
  ck.put_scalar(detail::dotted(prefix, "initial_scale"), s.options.initial_scale);
  ck.put_scalar(detail::dotted(prefix, "period"), static_cast<std::int32_t>(s.options.period));
  ck.put_scalar(detail::dotted(prefix, "factor"), s.options.factor);
  ck.put_scalar(detail::dotted(prefix, "min_loss_scale"), s.options.min_loss_scale);
  ck.put_scalar(detail::dotted(prefix, "max_loss_scale"), s.options.max_loss_scale);
}

/// Replaces `ls` with the dynamic loss scale saved under `prefix.`.
/// \throws safetensors_error when a field is missing or of another dtype; std::invalid_argument when
///         the saved fields are not a valid loss scale (`dynamic_loss_scale(state)`'s checks).
inline void load_state(const checkpoint& ck, dynamic_loss_scale& ls, std::string_view prefix = {}) {
  dynamic_loss_scale_options o;
  o.period = ck.get_scalar<std::int32_t>(detail::dotted(prefix, "period"));
  o.factor = ck.get_scalar<float>(detail::dotted(prefix, "factor"));
  o.min_loss_scale = ck.get_scalar<float>(detail::dotted(prefix, "min_loss_scale"));
  o.max_loss_scale = ck.get_scalar<float>(detail::dotted(prefix, "max_loss_scale"));
  o.initial_scale = ck.get_scalar<float>(detail::dotted(prefix, "initial_scale"));
  ls = dynamic_loss_scale(dynamic_loss_scale_state{ck.get_scalar<float>(detail::dotted(prefix, "loss_scale")),
                                                   ck.get_scalar<std::int32_t>(detail::dotted(prefix, "counter")), o});
}

/// Puts a static loss scale into `ck` as `prefix.scale`.
inline void save_state(checkpoint& ck, const static_loss_scale& ls, std::string_view prefix = {}) {
  ck.put_scalar(detail::dotted(prefix, "scale"), ls.loss_scale());
}

/// Replaces `ls` with the static loss scale saved as `prefix.scale`.
/// \throws safetensors_error when it is missing or not F32; std::invalid_argument when it is not a
///         positive finite number.
inline void load_state(const checkpoint& ck, static_loss_scale& ls, std::string_view prefix = {}) {
  ls = static_loss_scale(ck.get_scalar<float>(detail::dotted(prefix, "scale")));
}

/// `no_op_loss_scale` has no state: nothing is written.
inline void save_state(checkpoint& /*ck*/, const no_op_loss_scale& /*ls*/, std::string_view /*prefix*/ = {}) {}
/// `no_op_loss_scale` has no state: nothing is read.
inline void load_state(const checkpoint& /*ck*/, no_op_loss_scale& /*ls*/, std::string_view /*prefix*/ = {}) {}

/// A random engine with the standard library's textual state (`os << e`, `is >> e`: every engine of
/// <random> restores exactly the sequence it would have produced).
template <class E>
concept serialisable_engine = std::uniform_random_bit_generator<E> &&
    requires(E& e, std::ostream& os, std::istream& is) {
  os << e;
  is >> e;
};

/// Puts the state of a random engine into `ck`'s metadata entry `prefix.state`.
template <serialisable_engine E>
void save_state(checkpoint& ck, const E& engine, std::string_view prefix = {}) {
  std::ostringstream out;
  out << engine;
  ck.metadata[detail::dotted(prefix, "state")] = out.str();
}

/// Restores a random engine from the metadata entry `prefix.state`.
/// \throws safetensors_error when the entry is missing or does not parse as this engine's state.
template <serialisable_engine E>
void load_state(const checkpoint& ck, E& engine, std::string_view prefix = {}) {
  const std::string key = detail::dotted(prefix, "state");
  const auto it = ck.metadata.find(key);
  if (it == ck.metadata.end())
    throw safetensors_error(detail::st_prefix(ck.source()) + "no metadata entry \"" + key +
                            "\" (the random engine's state)");
  std::istringstream in(it->second);
  E restored;
  in >> restored;
  if (in.fail())
    throw safetensors_error(detail::st_prefix(ck.source()) + "metadata entry \"" + key +
                            "\" is not the state of this random engine");
  engine = restored;
}

/// One part of a train state: an object that `save_state` / `load_state` take (a model, an optimiser,
/// a loss scale, a random engine) and the prefix it is saved under. Holds a reference: the object must
/// outlive it. Built implicitly from `{"prefix", object}`, for `save_states` and `load_states`.
class state_ref {
 public:
  /// `object` saved and loaded under `prefix`.
  template <class T>
  requires requires(checkpoint& ck, const checkpoint& cck, T& t) {
    save_state(ck, std::as_const(t), std::string_view());
    load_state(cck, t, std::string_view());
  }
  state_ref(std::string_view prefix, T& object) noexcept  // NOLINT(google-explicit-constructor): {"name", x}
      : prefix_(prefix),
        object_(&object),
        save_([](checkpoint& ck, const void* o, std::string_view p) { save_state(ck, *static_cast<const T*>(o), p); }),
        load_([](const checkpoint& ck, void* o, std::string_view p) { (void)load_state(ck, *static_cast<T*>(o), p); }) {
  }

  /// The prefix.
  [[nodiscard]] std::string_view prefix() const noexcept { return prefix_; }
  /// `save_state(ck, object, prefix)`.
  void save(checkpoint& ck) const { save_(ck, object_, prefix_); }
  /// `load_state(ck, object, prefix)` (strict, for models).
  void load(const checkpoint& ck) const { load_(ck, object_, prefix_); }

 private:
  std::string_view prefix_;
  void* object_;
  void (*save_)(checkpoint&, const void*, std::string_view);
  void (*load_)(const checkpoint&, void*, std::string_view);
};

/// Saves every part under its prefix into one safetensors file at `path` (written through a temporary
/// file and a rename, as `checkpoint::save`): PyTorch's `torch.save({"model": ..., "optimizer": ...})`.
/// \throws std::invalid_argument when two parts have the same prefix; what the parts' `save_state` and
///         `checkpoint::save` throw.
inline void save_states(const std::filesystem::path& path, std::span<const state_ref> parts) {
  checkpoint ck;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (parts[j].prefix() == parts[i].prefix())
        throw std::invalid_argument("train::save_states: two parts are saved under \"" +
                                    std::string(parts[i].prefix()) + "\"");
    }
    parts[i].save(ck);
  }
  ck.save(path);
}
/// `save_states(path, {{"model", model}, {"optimizer", opt}, ...})`.
inline void save_states(const std::filesystem::path& path, std::initializer_list<state_ref> parts) {
  save_states(path, std::span<const state_ref>(parts.begin(), parts.size()));
}

/// Reads the file at `path` and loads every part from its prefix (strictly, for models).
/// \throws safetensors_error when the file cannot be read, and what the parts' `load_state` throw.
inline void load_states(const std::filesystem::path& path, std::span<const state_ref> parts) {
  const checkpoint ck = checkpoint::load(path);
  for (const state_ref& part : parts) part.load(ck);
}
/// `load_states(path, {{"model", model}, {"optimizer", opt}, ...})`.
inline void load_states(const std::filesystem::path& path, std::initializer_list<state_ref> parts) {
  load_states(path, std::span<const state_ref>(parts.begin(), parts.size()));
}

}  // namespace mixprec::train
