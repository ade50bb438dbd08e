/// \file
/// \brief The t5 example's model between runs and policies: its parameters and shape in a safetensors
/// checkpoint (the shape and the data's vocabulary in the metadata, so a parity run needs no flags
/// repeated), a copy under another policy, and the float16 residual-scale plans calibrated on a float32
/// model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/diagnostics/residual_scale_plan.hpp"
#include "mixprec/train/safetensors.hpp"
#include "mixprec/train/state_dict.hpp"
#include "model.hpp"
#include "reversal_data.hpp"

namespace t5_example {

/// The metadata keys of a t5 checkpoint: the shape (one key per field of t5_config) and the data.
inline std::map<std::string, std::string> checkpoint_metadata(const t5_config& c, const reversal_data& data) {
  return {{"t5.vocab", std::to_string(c.vocab)},
          {"t5.d_model", std::to_string(c.d_model)},
          {"t5.n_heads", std::to_string(c.n_heads)},
          {"t5.d_ff", std::to_string(c.d_ff)},
          {"t5.encoder_layers", std::to_string(c.encoder_layers)},
          {"t5.decoder_layers", std::to_string(c.decoder_layers)},
          {"t5.num_buckets", std::to_string(c.num_buckets)},
          {"t5.max_distance", std::to_string(c.max_distance)},
          {"t5.epsilon", std::to_string(c.epsilon)},
          {"t5.min_chars", std::to_string(data.min_chars())},
          {"t5.max_chars", std::to_string(data.max_chars())},
          {"t5.bytes", data.bytes()}};
}

/// Writes `model`'s parameters (dotted names, float32) and its shape to `path`.
/// \throws mixprec::train::safetensors_error when the file cannot be written.
template <class P>
void save_model(const t5_model<P>& model, const reversal_data& data, const std::filesystem::path& path) {
  mixprec::train::checkpoint ck;
  mixprec::train::save_state(ck, model);
  for (auto& [key, value] : checkpoint_metadata(model.config(), data)) ck.metadata[key] = value;
  ck.save(path);
}

/// The shape stored in `ck`.
/// \throws std::invalid_argument when a key is missing or malformed, or the checkpoint was made from a
///         text with another vocabulary or other chunk lengths than `data`.
inline t5_config stored_config(const mixprec::train::checkpoint& ck, const reversal_data& data) {
  const auto text = [&](const std::string& key) -> const std::string& {
    const auto found = ck.metadata.find(key);
    if (found == ck.metadata.end()) {
      throw std::invalid_argument("'" + ck.source() + "' has no metadata \"" + key +
                                  "\": it is not a checkpoint of the t5 example (write one with --policy f32 --save)");
    }
    return found->second;
  };
  const auto size = [&](const std::string& key) -> std::size_t {
    try {
      return static_cast<std::size_t>(std::stoull(text(key)));
    } catch (const std::logic_error&) {
      throw std::invalid_argument("'" + ck.source() + "': metadata \"" + key + "\" = \"" + text(key) +
                                  "\" is not a count");
    }
  };
  if (text("t5.bytes") != data.bytes() || size("t5.min_chars") != data.min_chars() ||
      size("t5.max_chars") != data.max_chars()) {
    throw std::invalid_argument("'" + ck.source() +
                                "' was trained on another text or other chunk lengths (--data, --min-chars, "
                                "--max-chars): its vocabulary or lengths differ from '" +
                                data.source() + "'s");
  }
  t5_config c;
  c.vocab = size("t5.vocab");
  c.d_model = size("t5.d_model");
  c.n_heads = size("t5.n_heads");
  c.d_ff = size("t5.d_ff");
  c.encoder_layers = size("t5.encoder_layers");
  c.decoder_layers = size("t5.decoder_layers");
  c.num_buckets = size("t5.num_buckets");
  c.max_distance = size("t5.max_distance");
  c.epsilon = std::stod(text("t5.epsilon"));
  return c;
}

/// The model stored in `ck` under policy `P` (strict: every tensor present, with its shape and dtype).
/// \throws as `stored_config` and `mixprec::train::load_state`.
template <class P>
t5_model<P> load_model(const mixprec::train::checkpoint& ck, const reversal_data& data) {
  t5_model<P> model(stored_config(ck, data));
  mixprec::train::load_state(ck, model);
  return model;
}

/// `model` under policy `To` (the same float32 parameters; both policies keep float32 parameters).
template <class To, class From>
t5_model<To> with_policy(const t5_model<From>& model) {
  mixprec::train::checkpoint ck;
  mixprec::train::save_state(ck, model);
  t5_model<To> out(model.config());
  mixprec::train::load_state(ck, out);
  return out;
}

/// The residual-scale plans of a model's encoder and decoder.
struct t5_plans {
  mixprec::diagnostics::residual_scale_plan encoder, decoder;
};

/// Records a forward pass of the float32 `model` over `batches` (every probe site) and plans each stack's
/// power-of-two scales from it (diagnostics/residual_scale_plan.hpp). The calibration must stay finite.
/// \throws std::invalid_argument as `plan_residual_scales` (a non-finite calibration).
template <class P>
t5_plans calibrate_plans(const t5_model<P>& model, const std::vector<seq2seq_batch>& batches,
                         const mixprec::diagnostics::residual_scale_options& options,
                         mixprec::diagnostics::recording_probe* recording = nullptr) {
  mixprec::diagnostics::recording_probe local;
  auto& rec = recording != nullptr ? *recording : local;
  for (const auto& b : batches) {
    typename t5_model<P>::saved s;
    (void)model.forward(b.encoder_ids, b.encoder_mask, b.decoder_ids, s, rec);
  }
  const auto [encoder_sites, decoder_sites] = model.plan_sites();
  return {mixprec::diagnostics::plan_residual_scales(rec, encoder_sites, options),
          mixprec::diagnostics::plan_residual_scales(rec, decoder_sites, options)};
}

}  // namespace t5_example
