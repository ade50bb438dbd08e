// The float64 oracle (reference_llama.hpp) against published facts about stories260K
// (data/stories260K/SOURCE.md): karpathy/llama2.c test_all.py's expected 200-step greedy output, and
// the reference facts listed there (step-0 logits, first 40 greedy tokens, activation ranges).
#include "reference_llama.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "data.hpp"
#include "llama/llama2c_checkpoint.hpp"
#include "llama/llama2c_tokenizer.hpp"

namespace {

using llama_reference::reference_llama;

// karpathy/llama2.c test_all.py (commit 350e04fe): stdout of
// `./run stories260K.bin -z tok512.bin -t 0.0 -n 200`, without run.c's final "\n" (464 bytes).
const std::string published_text =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She said, \"I want to "
    "play with your ball, but I can't find it.\"\n"
    "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what to do.\"\n"
    "Lily didn't want to help her mom, so she";

llama2c::checkpoint load_model() { return llama2c::read_checkpoint(llama_test::stories260k_dir() / "stories260K.bin"); }

}  // namespace

TEST_CASE("the published stories260K text is the 464-byte string SOURCE.md describes", "[llama][reference]") {
  CHECK(published_text.size() == 464);
  CHECK(std::count(published_text.begin(), published_text.end(), '\n') == 3);
  CHECK(published_text.back() == 'e');
}

TEST_CASE("reference forward pass reproduces stories260K's step-0 logits", "[llama][reference]") {
  const auto ck = load_model();
  reference_llama model(ck);
  const std::vector<double> logits = model.forward(1, 0);  // BOS at position 0
  REQUIRE(logits.size() == 512);
  const double expected[] = {-6.22291, 8.40434, -6.22374, -6.22254, -6.22195};  // SOURCE.md reference facts
  for (int i = 0; i < 5; ++i) {
    INFO("logit " << i);
    CHECK(logits[static_cast<std::size_t>(i)] == Approx(expected[i]).margin(1e-4));
  }
  CHECK(llama_reference::argmax(logits) == 403);
}

TEST_CASE("reference greedy decoding reproduces stories260K's first 40 tokens", "[llama][reference]") {
  const auto ck = load_model();
  reference_llama model(ck);
  const std::vector<int> expected{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                  426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
                                  295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352};
  CHECK(llama_reference::greedy_decode(model, 40) == expected);
}

TEST_CASE("reference 200-step greedy decode equals llama2.c's published output byte for byte", "[llama][reference]") {
  const auto ck = load_model();
  const auto tok = llama2c::read_tokenizer(llama_test::stories260k_dir() / "tok512.bin", ck.config.vocab_size);
  reference_llama model(ck);
  const std::vector<int> tokens = llama_reference::greedy_decode(model, 200);
  CHECK(tokens.size() == 200);  // run.c -n 200: 200 forward steps, no BOS among the outputs
  const std::string text = tok.decode_text(tokens);
  CHECK(text.size() == published_text.size());
  CHECK(text == published_text);

  // SOURCE.md's activation ranges over the 200 steps (quoted to 3 significant digits).
  const auto& s = model.stats();
  CHECK(s.max_abs_residual == Approx(8.76).margin(0.005));
  CHECK(s.max_abs_hidden == Approx(9.35).margin(0.005));
  CHECK(s.max_abs_logit == Approx(21.97).margin(0.005));
}

TEST_CASE("stories260K's exported RoPE tables are cos and sin of pos * 10000^(-2i/head_size)", "[llama][reference]") {
  const auto ck = load_model();
  const std::size_t half = static_cast<std::size_t>(ck.config.head_size() / 2);
  REQUIRE(ck.freq_cis_real.shape == std::vector<std::size_t>{512, 4});
  // llama2.c model.py precompute_freqs_cis works in float32: at pos 511 the angle carries ~3e-5 of rounding.
  double worst = 0;
  for (std::size_t pos = 0; pos < static_cast<std::size_t>(ck.config.seq_len); ++pos) {
    for (std::size_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(2 * i) / (2.0 * half));
      worst = std::max(worst, std::abs(ck.freq_cis_real.values[pos * half + i] - std::cos(angle)));
      worst = std::max(worst, std::abs(ck.freq_cis_imag.values[pos * half + i] - std::sin(angle)));
    }
  }
  CHECK(worst < 1e-4);
}
