// Every nn layer's `gradients` is a mixprec tree (static member tree_children) with a zero() in place:
// all_finite, unscale_in_place, clip_grad_norm, tree_map (same struct back) and tree_zero on each
// layer's gradients, alone and tied with another. The values are checked in tests/train/scaled_step_test.
#include <catch2/catch.hpp>

#include <tuple>
#include <type_traits>

#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/batch_norm.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/group_norm.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/train/clip.hpp"

namespace gradient_trees_test {

using P = mixprec::mixed_bfloat16;

namespace {
template <class G>
void walk_all(G g) {
  static_assert(mixprec::tree_product_node<G>);
  CHECK(mixprec::all_finite(g));
  mixprec::dynamic_loss_scale{}.unscale_in_place(g);
  CHECK(mixprec::train::clip_grad_norm(1.0, g) == 0.0);
  g.zero();
  auto same = mixprec::tree_map([](float x) { return x; }, g);
  static_assert(std::is_same_v<decltype(same), G>);
  auto both = std::tie(g, same);
  mixprec::tree_zero(both);
  CHECK(mixprec::train::global_grad_norm(both) == 0.0);
}
}  // namespace

TEST_CASE("every layer's gradients is a tree", "[nn][tree]") {
  walk_all(mixprec::nn::attention<P>::gradients{});
  walk_all(mixprec::nn::feed_forward<P>::gradients{});
  walk_all(mixprec::nn::embedding<P>::gradients{});
  walk_all(mixprec::nn::rms_norm<P>::gradients{});
  walk_all(mixprec::nn::layer_norm<P>::gradients{});
  walk_all(mixprec::nn::group_norm<P>::gradients{});
  walk_all(mixprec::nn::batch_norm<P>::gradients{});
}

}  // namespace gradient_trees_test
