// A T5-style pre-norm encoder built from the library's layers (nn::rms_norm fused with a float32
// residual stream, nn::attention, nn::feed_forward), with probe sites for the float16 scale planner,
// weights that make its feed-forward out-projections exceed float16's largest value (65504), and
// loading with a `diagnostics::residual_scale_plan` applied (diagnostics/residual_scale_plan.hpp).
//
// Block l:  (h, r) = ln1_l(previous output, r)      [no_residual for l = 0: r starts as the input]
//           a      = attention_l(h)                  site "layers.<l>.attention" (.context, .out)
//           (h, r) = ln2_l(a, r)
//           f      = feed_forward_l(h)               site "layers.<l>.ffn" (.hidden, .out)
// then (y, r) = final_norm(f, r); y is the encoder's output (site "out").
#pragma once

#include <mixprec/mixprec.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace fp16_plan {

/// Shape of the encoder.
struct encoder_config {
  std::size_t d_model = 64;
  std::size_t n_heads = 4;
  std::size_t hidden = 256;
  std::size_t n_layers = 6;
  double epsilon = 1e-6;  ///< of every norm (T5's)
};

/// One block's weights, float32, kernels [in, out]; no biases (T5 has none).
struct block_weights {
  xt::xtensor<float, 1> ln1, ln2;
  xt::xtensor<float, 2> wq, wk, wv, wo, w1, w2;
};

/// The encoder's weights.
struct encoder_weights {
  encoder_config config;
  std::vector<block_weights> blocks;
  xt::xtensor<float, 1> final_norm;
};

/// Gaussian weights with fan-in scaling (lecun normal), norm scales 1, and the feed-forward
/// out-projection of block l multiplied by growth^l: later blocks write ever larger values to the
/// stream, as trained T5 encoders do, until their outputs leave float16's range.
[[nodiscard]] inline encoder_weights growing_weights(const encoder_config& c, double growth, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto matrix = [&](std::size_t in, std::size_t out, double gain) {
    std::normal_distribution<double> normal(0.0, gain / std::sqrt(static_cast<double>(in)));
    xt::xtensor<float, 2> w = xt::xtensor<float, 2>::from_shape({in, out});
    for (auto& v : w) v = static_cast<float>(normal(rng));
    return w;
  };
  const auto ones = [&] { return xt::xtensor<float, 1>(xt::ones<float>({c.d_model})); };
  encoder_weights w{c, {}, ones()};
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    const double gain = std::pow(growth, static_cast<double>(l));
    w.blocks.push_back({ones(), ones(), matrix(c.d_model, c.d_model, 1.0), matrix(c.d_model, c.d_model, 1.0),
                        matrix(c.d_model, c.d_model, 1.0), matrix(c.d_model, c.d_model, 1.0),
                        matrix(c.d_model, c.hidden, 1.0), matrix(c.hidden, c.d_model, gain)});
  }
  return w;
}

/// A [seq, d_model] input of independent standard normal values (a calibration or evaluation input).
[[nodiscard]] inline xt::xtensor<float, 2> gaussian_input(std::size_t seq, std::size_t d_model, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({seq, d_model});
  for (auto& v : x) v = normal(rng);
  return x;
}

/// The encoder under policy P (inputs float [seq, d_model]; every layer's output type H =
/// output_t<P, float>, the residual stream float32).
template <class P>
class encoder {
 public:
  using H = mixprec::nn::output_t<P, float>;
  static_assert(std::is_same_v<mixprec::nn::output_t<P, H>, H>,
                "fp16_plan::encoder needs a policy whose output type does not depend on the input type "
                "(an explicit o=...), so that every block hands the next one the same type.");

  /// Loads `w`, rounding the weights to P's param type. With a plan (one entry per block), applies it
  /// as diagnostics/residual_scale_plan.hpp says: wo and w2 of block l times S_l, ln1's residual scale
  /// S_l / S_(l-1) and epsilon eps S_(l-1)^2, ln2's epsilon eps S_l^2, the final norm's eps S_last^2.
  /// \throws std::invalid_argument if the plan has another number of blocks.
  explicit encoder(const encoder_weights& w, const mixprec::diagnostics::residual_scale_plan* plan = nullptr) {
    namespace nn = mixprec::nn;
    const encoder_config& c = w.config;
    if (plan != nullptr && plan->blocks.size() != c.n_layers) {
      throw std::invalid_argument("encoder: the plan has " + std::to_string(plan->blocks.size()) +
                                  " blocks but the encoder " + std::to_string(c.n_layers));
    }
    const nn::attention_config attention{.d_model = c.d_model, .n_heads = c.n_heads};
    const auto dense = [](const xt::xtensor<float, 2>& kernel, double scale) {
      const xt::xtensor<float, 2> scaled = kernel * static_cast<float>(scale);  // a power of two: exact
      return nn::dense<P>::from_weights(scaled, nn::weight_layout::in_out);
    };
    for (std::size_t l = 0; l < c.n_layers; ++l) {
      const block_weights& b = w.blocks[l];
      const mixprec::diagnostics::residual_block_plan none{};
      const auto& s = plan != nullptr ? plan->blocks[l] : none;
      nn::rms_norm_options ln1{.epsilon = s.opening_norm_epsilon(c.epsilon)};
      if (plan != nullptr) ln1.residual_scale = s.residual_scale();
      blocks_.push_back(
          {nn::rms_norm<P>::from_scale(b.ln1, ln1),
           nn::attention<P>(attention, dense(b.wq, 1.0), dense(b.wk, 1.0), dense(b.wv, 1.0), dense(b.wo, s.scale)),
           nn::rms_norm<P>::from_scale(b.ln2, {.epsilon = s.inner_norm_epsilon(c.epsilon)}),
           nn::feed_forward<P>(nn::ffn_activation::gelu, dense(b.w1, 1.0), dense(b.w2, s.scale))});
    }
    const double final_epsilon = plan != nullptr ? plan->final_norm_epsilon(c.epsilon) : c.epsilon;
    final_norm_.emplace(nn::rms_norm<P>::from_scale(w.final_norm, {.epsilon = final_epsilon}));
  }

  /// The encoder's output [seq, d_model] in H for x [seq, d_model]; hands `probe` the sites of the file
  /// comment.
  template <mixprec::diagnostics::probe Probe = mixprec::diagnostics::null_probe>
  [[nodiscard]] xt::xtensor<H, 2> operator()(const xt::xtensor<float, 2>& x, Probe&& probe = {}) const {
    namespace nn = mixprec::nn;
    auto first = blocks_.front().ln1(x, nn::no_residual);
    xt::xtensor<H, 2> h = std::move(first.x);
    auto r = std::move(first.residual);
    for (std::size_t l = 0; l < blocks_.size(); ++l) {
      const block& b = blocks_[l];
      const std::string name = "layers." + std::to_string(l);
      const xt::xtensor<H, 2> a = b.attention(h, nn::no_key_mask, probe, name + ".attention");
      auto mid = b.ln2(a, r);
      const xt::xtensor<H, 2> f = b.ffn(mid.x, probe, name + ".ffn");
      const nn::rms_norm<P>& next = l + 1 < blocks_.size() ? blocks_[l + 1].ln1 : *final_norm_;
      auto out = next(f, mid.residual);
      h = std::move(out.x);
      r = std::move(out.residual);
    }
    probe.observe("out", h.storage());
    return h;
  }

 private:
  struct block {
    mixprec::nn::rms_norm<P> ln1;
    mixprec::nn::attention<P> attention;
    mixprec::nn::rms_norm<P> ln2;
    mixprec::nn::feed_forward<P> ffn;
  };
  std::vector<block> blocks_;
  std::optional<mixprec::nn::rms_norm<P>> final_norm_;
};

}  // namespace fp16_plan
