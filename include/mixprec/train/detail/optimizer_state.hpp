/// \file
/// \brief The optimisers' state saving and loading (`optimizer_base::save_common`, `load_common`,
/// declared in train/optimizer.hpp). Included by train/optimizer.hpp in header-only translation units
/// (inline definitions), and compiled once into `mixprec::compiled` by src/checkpoints.cpp, which
/// defines MIXPREC_CHECKPOINT_DEFINITIONS: a compiled-mode translation unit does not parse them. Do
/// not include it yourself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/train/optimizer.hpp"

/// `inline` in header-only translation units; nothing in the library's one definition.
#ifdef MIXPREC_CHECKPOINT_DEFINITIONS
#define MIXPREC_OPTIMIZER_STATE_INLINE
#else
#define MIXPREC_OPTIMIZER_STATE_INLINE inline
#endif

namespace mixprec::train {

MIXPREC_OPTIMIZER_STATE_INLINE void optimizer_base::save_common(
    checkpoint& ck, const std::map<std::string, std::string>& options) const {
  ck.put_scalar("step", step_);
  ck.metadata[kind_ + ".sr_seed"] = std::to_string(precision_.seed);
  for (const auto& [k, v] : options) ck.metadata[kind_ + "." + k] = v;
  for (const auto& [name, st] : states_) {
    if (st.has_moments) {
      for (std::size_t k = 0; k < moment_count_; ++k) {
        if (st.moments_double)
          ck.put(moment_prefixes_[k] + name, std::span<const double>(st.moments64[k]), st.shape);
        else
          ck.put(moment_prefixes_[k] + name, std::span<const float>(st.moments32[k]), st.shape);
      }
    }
    if (!st.master.empty()) ck.put("master." + name, std::span<const float>(st.master), st.shape);
    if (!st.compensation.empty()) {
      std::vector<std::uint8_t> bytes(st.compensation.size() * 2);
      std::memcpy(bytes.data(), st.compensation.data(), bytes.size());
      ck.put_bytes("kahan." + name, st.param_type, st.shape, std::move(bytes));
    }
  }
}

MIXPREC_OPTIMIZER_STATE_INLINE void optimizer_base::load_common(const checkpoint& ck) {
  std::map<std::string, parameter_state> loaded;
  const auto source = [&](const std::string& tensor) {
    return detail::st_prefix(ck.source()) + detail::st_quote(tensor);
  };
  const auto claim = [&](const std::string& tensor, const std::string& name, dtype want_a, dtype want_b) {
    const stored_tensor& t = ck.at(tensor);
    if (t.type != want_a && t.type != want_b)
      throw safetensors_error(source(tensor) + ": dtype " + std::string(mixprec::name(t.type)) + " unexpected for " +
                              kind_ + " state");
    auto [it, created] = loaded.try_emplace(name);
    parameter_state& st = it->second;
    if (created) {
      st.bound = false;
      st.shape = t.shape;
      st.size = static_cast<std::size_t>(t.element_count());
      st.tensor_id = tensor_id_of(name);
    } else if (st.size != t.element_count()) {
      throw safetensors_error(source(tensor) + ": " + std::to_string(t.element_count()) +
                              " elements, other state of \"" + name + "\" has " + std::to_string(st.size));
    }
    return std::pair<const stored_tensor*, parameter_state*>(&t, &st);
  };
  const auto starts = [](const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; };
  for (const auto& [tensor, t] : ck.tensors()) {
    for (std::size_t k = 0; k < moment_count_; ++k) {
      if (!starts(tensor, moment_prefixes_[k])) continue;
      const std::string name = tensor.substr(moment_prefixes_[k].size());
      auto [st_t, st] = claim(tensor, name, dtype::float32, dtype::float64);
      if (st->has_moments && st->moments_double != (st_t->type == dtype::float64))
        throw safetensors_error(source(tensor) + ": the moments of \"" + name + "\" mix F32 and F64");
      st->has_moments = true;
      st->moments_double = st_t->type == dtype::float64;
      if (st->moments_double) {
        st->moments64[k].resize(st->size);
        ck.get_into<double>(tensor, st->moments64[k]);
      } else {
        st->moments32[k].resize(st->size);
        ck.get_into<float>(tensor, st->moments32[k]);
      }
    }
    if (starts(tensor, "master.")) {
      auto [st_t, st] = claim(tensor, tensor.substr(7), dtype::float32, dtype::float32);
      st->master.resize(st->size);
      ck.get_into<float>(tensor, st->master);
    }
    if (starts(tensor, "kahan.")) {
      auto [st_t, st] = claim(tensor, tensor.substr(6), dtype::bfloat16, dtype::float16);
      st->param_type = st_t->type;
      st->compensation.resize(st->size);
      if (!st_t->bytes.empty()) std::memcpy(st->compensation.data(), st_t->bytes.data(), st_t->bytes.size());
    }
  }
  for (auto& [name, st] : loaded) {
    if (moment_count_ == 2 && !st.has_moments && (!st.master.empty() || !st.compensation.empty())) {
      std::string what = detail::st_prefix(ck.source());
      what += "\"" + name + "\" has master/kahan state but no ";
      what += moment_prefixes_[0];
      what += name;
      throw safetensors_error(what);
    }
    if (st.has_moments) {
      for (std::size_t k = 0; k < moment_count_; ++k) {
        if (!ck.contains(moment_prefixes_[k] + name)) {
          std::string what = detail::st_prefix(ck.source());
          what += "no " + detail::st_quote(moment_prefixes_[k] + name);
          what += " beside ";
          what += moment_prefixes_[0];
          what += name;
          throw safetensors_error(what);
        }
      }
    } else {
      for (std::size_t k = 0; k < moment_count_; ++k) st.moments32[k].assign(st.size, 0.0f);
    }
  }
  const auto step = ck.get_scalar<std::int64_t>("step");
  if (const auto it = ck.metadata.find(kind_ + ".sr_seed"); it != ck.metadata.end())
    precision_.seed = std::stoull(it->second);
  states_ = std::move(loaded);
  step_ = step;
  in_step_ = false;
}

}  // namespace mixprec::train

#undef MIXPREC_OPTIMIZER_STATE_INLINE
