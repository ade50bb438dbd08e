/// \file
/// \brief Next-token selection as llama2.c's run.c does it: greedy argmax, or temperature + softmax +
/// multinomial / top-p (nucleus) sampling driven by run.c's xorshift* generator, so that a seed picks the
/// same tokens as `./run ... -t T -p P -s seed` for the same logits.
///
/// Source of every rule: karpathy/llama2.c run.c (HEAD 350e04fe): `random_u32`, `random_f32`,
/// `sample_argmax`, `softmax`, `sample_mult`, `sample_topp`, `sample`. The arithmetic is float32 in the same
/// order as run.c, so results agree bit for bit on IEEE hosts evaluating float in float (FLT_EVAL_METHOD 0).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace llama2c {

/// run.c's random number generator: Marsaglia/Vigna xorshift64* with shifts (12, 25, 27) and multiplier
/// 0x2545F4914F6CDD1D, returning the high 32 bits of the product (run.c `random_u32`).
///
/// A zero state stays zero forever (every draw is 0): the constructor refuses seed 0 (run.c replaces it with
/// time(NULL)).
class xorshift_rng {
 public:
  /// Seeds the state with `seed` (run.c `build_sampler`: rng_state = rng_seed).
  /// \throws std::invalid_argument when `seed == 0`.
  explicit xorshift_rng(std::uint64_t seed) : state_(seed) {
    if (seed == 0) {
      throw std::invalid_argument(
          "llama2c::xorshift_rng: seed 0 makes xorshift return 0 forever (run.c replaces it with time(NULL)); "
          "pass a non-zero seed");
    }
  }

  /// Advances the state and returns 32 random bits (run.c `random_u32`).
  std::uint32_t next_u32() noexcept {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<std::uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  }

  /// A float in [0, 1) with 24 random bits: (next_u32() >> 8) / 2^24 (run.c `random_f32`).
  float next_f32() noexcept { return static_cast<float>(next_u32() >> 8) / 16777216.0f; }

  /// The current 64-bit state.
  [[nodiscard]] std::uint64_t state() const noexcept { return state_; }

 private:
  std::uint64_t state_;
};

/// The index of the largest value, the lowest index on ties (run.c `sample_argmax`: strict `>` scan).
/// \throws std::invalid_argument when `values` is empty; std::domain_error when a value is NaN (run.c would
///   silently ignore it, or return 0 when values[0] is NaN).
[[nodiscard]] inline int sample_argmax(std::span<const float> values) {
  if (values.empty()) throw std::invalid_argument("llama2c::sample_argmax: no values");
  int best = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      throw std::domain_error("llama2c::sample_argmax: value " + std::to_string(i) + " is NaN (an overflow upstream?)");
    }
    if (values[i] > values[static_cast<std::size_t>(best)]) best = static_cast<int>(i);
  }
  return best;
}

/// In-place float32 softmax, max-subtracted (run.c `softmax`): x[i] = expf(x[i] - max) / sum.
/// \throws std::invalid_argument when `x` is empty.
inline void softmax(std::span<float> x) {
  if (x.empty()) throw std::invalid_argument("llama2c::softmax: no values");
  float max_val = x[0];
  for (std::size_t i = 1; i < x.size(); ++i) {
    if (x[i] > max_val) max_val = x[i];
  }
  float sum = 0.0f;
  for (float& v : x) {
    v = std::exp(v - max_val);
    sum += v;
  }
  for (float& v : x) v /= sum;
}

/// Multinomial draw (run.c `sample_mult`): the first index whose running float32 sum of `probabilities`
/// exceeds `coin` (strictly), or the last index when rounding leaves the total at or below `coin`.
/// \throws std::invalid_argument when `probabilities` is empty.
[[nodiscard]] inline int sample_mult(std::span<const float> probabilities, float coin) {
  if (probabilities.empty()) throw std::invalid_argument("llama2c::sample_mult: no probabilities");
  float cdf = 0.0f;
  for (std::size_t i = 0; i < probabilities.size(); ++i) {
    cdf += probabilities[i];
    if (coin < cdf) return static_cast<int>(i);
  }
  return static_cast<int>(probabilities.size()) - 1;
}

/// A candidate of `sample_topp`: its probability and token index (run.c's `ProbIndex`).
struct prob_index {
  float prob;  ///< probability
  int index;   ///< token
};

/// Top-p ("nucleus") draw (run.c `sample_topp`): keep the candidates with probability >= (1 - topp) / (n - 1),
/// sort them by decreasing probability, truncate after the first one where the running sum exceeds `topp`,
/// then draw `coin * (kept mass)` from the kept list as `sample_mult` does.
///
/// Differences from run.c, all outside its defined behaviour: equal probabilities keep index order (run.c's
/// qsort leaves their order unspecified); n == 1 returns 0 and an empty candidate list (possible when topp is
/// tiny) falls back to all candidates, where run.c would read probindex[-1].
/// The candidate list is kept in `kept` (cleared first; a sampler reuses it, so that sampling allocates
/// nothing once it has grown to the vocabulary).
/// \throws std::invalid_argument when `probabilities` is empty or holds a NaN, or `topp` is not in (0, 1).
[[nodiscard]] inline int sample_topp(std::span<const float> probabilities, float topp, float coin,
                                     std::vector<prob_index>& kept) {
  if (probabilities.empty()) throw std::invalid_argument("llama2c::sample_topp: no probabilities");
  if (!(topp > 0.0f && topp < 1.0f)) {
    throw std::invalid_argument("llama2c::sample_topp: topp must be in (0, 1), got " + std::to_string(topp));
  }
  for (const float p : probabilities) {
    if (std::isnan(p)) throw std::invalid_argument("llama2c::sample_topp: a probability is NaN");
  }
  const std::size_t n = probabilities.size();
  if (n == 1) return 0;
  kept.clear();
  const float cutoff = (1.0f - topp) / static_cast<float>(n - 1);
  for (std::size_t i = 0; i < n; ++i) {
    if (probabilities[i] >= cutoff) kept.push_back({probabilities[i], static_cast<int>(i)});
  }
  if (kept.empty()) {
    for (std::size_t i = 0; i < n; ++i) kept.push_back({probabilities[i], static_cast<int>(i)});
  }
  // Decreasing probability, equal ones in index order: the order a stable sort of the index-ordered list
  // gives, without the temporary buffer std::stable_sort allocates.
  std::sort(kept.begin(), kept.end(), [](const prob_index& a, const prob_index& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.index < b.index);
  });
  float cumulative = 0.0f;
  std::size_t last = kept.size() - 1;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    cumulative += kept[i].prob;
    if (cumulative > topp) {
      last = i;
      break;
    }
  }
  const float r = coin * cumulative;
  float cdf = 0.0f;
  for (std::size_t i = 0; i <= last; ++i) {
    cdf += kept[i].prob;
    if (r < cdf) return kept[i].index;
  }
  return kept[last].index;
}

/// The top-p draw described above, with a candidate list of its own.
/// \throws std::invalid_argument when `probabilities` is empty or holds a NaN, or `topp` is not in (0, 1).
[[nodiscard]] inline int sample_topp(std::span<const float> probabilities, float topp, float coin) {
  std::vector<prob_index> kept;
  return sample_topp(probabilities, topp, coin, kept);
}

/// run.c's `Sampler`: greedy when temperature is 0; otherwise logits / temperature, softmax, one coin from
/// the xorshift generator per call, then `sample_mult` (topp 0 or 1) or `sample_topp`.
///
/// **Example** (the same tokens as `./run model.bin -t 1.0 -p 0.9 -s 42` for the same logits):
///
///     llama2c::sampler s(1.0f, 0.9f, 42);
///     int next = s.sample(logits);
class sampler {
 public:
  /// \throws std::invalid_argument when temperature is negative or not finite, topp is not in [0, 1], or
  ///   seed is 0 (see xorshift_rng). run.c instead clamps a negative temperature to 0 and replaces an
  ///   out-of-range topp by 0.9.
  sampler(float temperature, float topp, std::uint64_t seed) : temperature_(temperature), topp_(topp), rng_(seed) {
    if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
      throw std::invalid_argument("llama2c::sampler: temperature must be finite and >= 0 (0 = greedy), got " +
                                  std::to_string(temperature));
    }
    if (!(topp >= 0.0f && topp <= 1.0f)) {
      throw std::invalid_argument("llama2c::sampler: topp must be in [0, 1] (0 or 1 = no nucleus cut), got " +
                                  std::to_string(topp));
    }
  }

  /// Picks the next token from `logits` (one per vocabulary entry; not modified).
  /// \throws std::invalid_argument when `logits` is empty; std::domain_error when a logit is NaN, or when
  ///   sampling and a logit / temperature is +inf or every one is -inf (softmax would produce NaN; a -inf
  ///   logit alone is fine: probability 0).
  [[nodiscard]] int sample(std::span<const float> logits) {
    if (temperature_ == 0.0f) return sample_argmax(logits);
    if (logits.empty()) throw std::invalid_argument("llama2c::sampler::sample: no logits");
    probs_.assign(logits.begin(), logits.end());
    bool any_finite = false;
    for (std::size_t i = 0; i < probs_.size(); ++i) {
      probs_[i] /= temperature_;
      if (std::isnan(probs_[i]) || probs_[i] == std::numeric_limits<float>::infinity()) {
        throw std::domain_error("llama2c::sampler::sample: logit " + std::to_string(i) + " / temperature is " +
                                std::to_string(probs_[i]) + " (an overflow upstream?)");
      }
      any_finite = any_finite || std::isfinite(probs_[i]);
    }
    if (!any_finite) throw std::domain_error("llama2c::sampler::sample: every logit is -inf");
    softmax(probs_);
    const float coin = rng_.next_f32();
    if (topp_ <= 0.0f || topp_ >= 1.0f) return sample_mult(probs_, coin);
    kept_.reserve(probs_.size());  // once: every later call fits
    return sample_topp(probs_, topp_, coin, kept_);
  }

  /// The temperature (0 = greedy).
  [[nodiscard]] float temperature() const noexcept { return temperature_; }
  /// The nucleus mass (0 or 1 = plain multinomial sampling).
  [[nodiscard]] float topp() const noexcept { return topp_; }
  /// The generator (its state advances by one draw per sampled token).
  [[nodiscard]] const xorshift_rng& rng() const noexcept { return rng_; }

 private:
  float temperature_;
  float topp_;
  xorshift_rng rng_;
  std::vector<float> probs_;      // reused across calls
  std::vector<prob_index> kept_;  // reused across calls
};

}  // namespace llama2c
