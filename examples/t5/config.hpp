/// \file
/// \brief `t5_config`, the shape of the t5 example's model (model.hpp), in a header of its own so that
/// code that only passes it around includes no layer.
#pragma once

#include <cstddef>

namespace t5_example {

/// The shape of the model. T5 v1.1's names: d_model, num_heads (d_kv = d_model / num_heads), d_ff,
/// num_layers, num_decoder_layers, relative_attention_num_buckets, relative_attention_max_distance,
/// layer_norm_epsilon.
struct t5_config {
  std::size_t vocab = 0;           ///< ids (the special tokens and the bytes of the text)
  std::size_t d_model = 128;       ///< residual width
  std::size_t n_heads = 4;         ///< attention heads (head dimension d_model / n_heads)
  std::size_t d_ff = 256;          ///< hidden width of the gated feed-forward (w1, w3: [d_model, d_ff])
  std::size_t encoder_layers = 2;  ///< encoder blocks
  std::size_t decoder_layers = 2;  ///< decoder blocks
  std::size_t num_buckets = 32;    ///< relative position buckets (T5: 32)
  std::size_t max_distance = 128;  ///< distances from this on share the last bucket (T5: 128)
  double epsilon = 1e-6;           ///< every rms_norm's epsilon (T5's)
};

}  // namespace t5_example
