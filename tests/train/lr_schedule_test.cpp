// Tests of mixprec/train/lr_schedule.hpp against nanoGPT's get_lr (train.py) for the
// shakespeare_char recipe (learning_rate 1e-3, min_lr 1e-4, warmup 100, lr_decay_iters 2000), values
// computed by hand.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "mixprec/train/lr_schedule.hpp"

namespace lr_schedule_test {

using Catch::Matchers::WithinRel;

TEST_CASE("nanoGPT's schedule at the edges of its pieces", "[lr_schedule]") {
  const mixprec::train::cosine_schedule lr{
      .learning_rate = 1e-3, .min_lr = 1e-4, .warmup_iters = 100, .lr_decay_iters = 2000};
  CHECK_THAT(lr(0), WithinRel(1e-3 / 101, 1e-15));            // 1e-3 * 1 / 101 = 9.90099e-6
  CHECK_THAT(lr(99), WithinRel(1e-3 * 100 / 101, 1e-15));     // 9.90099e-4
  CHECK_THAT(lr(100), WithinRel(1e-3, 1e-15));                // ratio 0: cos 0 = 1, lr = learning_rate
  CHECK_THAT(lr(2000), WithinRel(1e-4, 1e-12));               // ratio 1: cos pi = -1, lr = min_lr
  CHECK(lr(2001) == 1e-4);                                    // past lr_decay_iters: min_lr
  CHECK_THAT(lr(1050), WithinRel(1e-4 + 0.5 * 9e-4, 1e-12));  // ratio 1/2: cos(pi/2) = 0 -> 5.5e-4
  // ratio 1/4 (it = 575): 1e-4 + 0.5 (1 + sqrt(2)/2) 9e-4 = 8.681980515e-4
  CHECK_THAT(lr(575), WithinRel(8.6819805153394638e-4, 1e-12));
  CHECK_THROWS_AS(lr(-1), std::invalid_argument);
}

}  // namespace lr_schedule_test
