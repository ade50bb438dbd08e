// t5-gradcheck: the t5 example's model (model.hpp) checked against central differences in float64, every
// parameter element: the backward pass chains each layer's own backward (the fused rms_norm's, attention's
// with its score-bias gradient, cross-attention's, the feed-forward's, the embedding's twice, the
// classifier's) and maps the summed bias gradients onto the two position tables; a wiring mistake there
// shows up here as a mismatch, named by parameter and element. The loss is the example's: the mean
// cross-entropy over the targets of a padded batch (padding targets ignored, the encoder's padding masked).
// Tolerances are PyTorch gradcheck's (eps 1e-6, atol 1e-5, rtol 1e-3). Exits 1 on any mismatch.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mixprec/nn/cross_entropy.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/policies/policy.hpp"
#include "model.hpp"
#include "reversal_data.hpp"

namespace {

using P = mixprec::double_precision;
using model_type = t5_example::t5_model<P>;

/// The mean cross-entropy of the batch, and its gradient (d loss / d logits) in `dlogits` when given.
double loss_of(const model_type& model, const t5_example::seq2seq_batch& b, xt::xtensor<double, 3>* dlogits,
               model_type::saved& s) {
  const auto logits = model.forward(b.encoder_ids, b.encoder_mask, b.decoder_ids, s);
  xt::xtensor<double, 3> scratch = xt::xtensor<double, 3>::from_shape(logits.shape());
  auto& d = dlogits != nullptr ? *dlogits : scratch;
  d = xt::xtensor<double, 3>::from_shape(logits.shape());
  return mixprec::nn::softmax_cross_entropy(std::span<const double>(logits.data(), logits.size()), model.config().vocab,
                                            std::span<const std::int32_t>(b.targets.data(), b.targets.size()),
                                            std::span<double>(d.data(), d.size()),
                                            1.0 / static_cast<double>(b.target_count));
}

}  // namespace

int main() {
  // A tiny model (every stack with two blocks, so the streams and the shared biases chain) on a tiny text.
  const t5_example::reversal_data data("To be, or not to be: that is the question.\nWhether 'tis nobler.\n", 2, 6,
                                       "<gradcheck text>");
  t5_example::t5_config config{.vocab = data.vocab_size(),
                               .d_model = 8,
                               .n_heads = 2,
                               .d_ff = 12,
                               .encoder_layers = 2,
                               .decoder_layers = 2,
                               .num_buckets = 8,
                               .max_distance = 16};
  std::mt19937_64 rng(7);
  model_type model = model_type::init(config, rng);
  // Norm scales away from 1, so that their gradients and those through them are exercised.
  std::normal_distribution<double> jitter(1.0, 0.2);
  model.for_each_parameter([&](std::string_view name, auto& p) {
    if (name.ends_with(".scale")) {
      for (auto& v : p) v = jitter(rng);
    }
  });
  // Chunks of different lengths: padding in the encoder (masked keys) and the targets (ignored).
  const t5_example::seq2seq_batch batch = data.make_batch({"be, or", "to", "the q"});

  model_type::saved s;
  xt::xtensor<double, 3> dlogits;
  (void)loss_of(model, batch, &dlogits, s);
  auto grads = model.zero_gradients();
  model.backward(s, dlogits, grads);

  constexpr double eps = 1e-6, atol = 1e-5, rtol = 1e-3;
  std::size_t checked = 0, failures = 0;
  double worst = 0;
  // Writes through the walk's references reach the next forward: float64 compute keeps no packed copy of
  // the weights (only float32-accumulating compute types do, nn/detail/packed_weights.hpp).
  mixprec::nn::for_each_parameter(model, grads, [&](std::string_view name, auto& param, const auto& grad) {
    for (std::size_t i = 0; i < param.size(); ++i) {
      const double original = param.data()[i];
      model_type::saved scratch;
      param.data()[i] = original + eps;
      const double up = loss_of(model, batch, nullptr, scratch);
      param.data()[i] = original - eps;
      const double down = loss_of(model, batch, nullptr, scratch);
      param.data()[i] = original;
      const double numeric = (up - down) / (2 * eps);
      const double analytic = grad.data()[i];
      const double error = std::abs(analytic - numeric);
      worst = std::max(worst, error / (atol + rtol * std::abs(numeric)));
      ++checked;
      if (error > atol + rtol * std::abs(numeric)) {
        if (++failures <= 10) {
          std::cout << "MISMATCH " << name << "[" << i << "]: backward " << analytic << ", central difference "
                    << numeric << '\n';
        }
      }
    }
  });
  std::cout << "t5 gradient check (float64, " << checked << " parameter elements): " << failures
            << " mismatches; worst error / tolerance " << worst << '\n';
  return failures == 0 ? 0 : 1;
}
