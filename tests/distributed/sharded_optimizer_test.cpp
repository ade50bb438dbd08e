// ZeRO stage 1 on 2 ranks: distributed::shard_plan's rule against a partition worked out by hand,
// sharded_optimizer against the unsharded optimiser (the same parameter bits after every step, the same
// checkpoint bytes, about half the state per rank), resuming a single process's state on 2 ranks,
// gather_checkpoint, and the errors.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/core.hpp"
#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/gather_checkpoint.hpp"
#include "mixprec/distributed/shard_plan.hpp"
#include "mixprec/distributed/sharded_optimizer.hpp"
#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/train/adamw.hpp"
#include "mixprec/train/safetensors.hpp"
#include "mixprec/train/scaled_step.hpp"
#include "mixprec/train/sgd.hpp"
#include "mixprec/train/state_dict.hpp"

namespace sharded_optimizer_test {

namespace dist = mixprec::distributed;
namespace tr = mixprec::train;

namespace {

/// Tensors of given element counts under names t0, t1, ...: a walk for shard_plan (values unused).
struct sized_walk {
  std::vector<std::vector<float>> tensors;
  template <class F>
  void for_each_parameter(F&& f) const {
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      struct view {
        const std::vector<float>* v;
        const float* data() const { return v->data(); }
        std::size_t size() const { return v->size(); }
        std::array<std::size_t, 1> shape() const { return {v->size()}; }
      };
      std::string name = "t";  // not "t" + std::to_string(k): GCC 12's -Wrestrict false positive
      name += std::to_string(k);
      f(name, view{&tensors[k]});
    }
  }
};

/// A model of five tensors of different sizes and ranks, parameters of type T; its gradients are float.
template <class T>
struct toy {
  xt::xtensor<T, 2> a = xt::xtensor<T, 2>::from_shape({12, 9});
  xt::xtensor<T, 1> b = xt::xtensor<T, 1>::from_shape({9});
  xt::xtensor<T, 2> c = xt::xtensor<T, 2>::from_shape({9, 30});
  xt::xtensor<T, 1> d = xt::xtensor<T, 1>::from_shape({30});
  xt::xtensor<T, 2> e = xt::xtensor<T, 2>::from_shape({30, 4});
  template <class F>
  void for_each_parameter(F&& f) {
    f("a", a), f("b", b), f("c", c), f("d", d), f("e", e);
  }
  template <class F>
  void for_each_parameter(F&& f) const {
    f("a", a), f("b", b), f("c", c), f("d", d), f("e", e);
  }
};

/// Float gradients shaped as toy's parameters.
struct toy_grads {
  xt::xtensor<float, 2> a = xt::xtensor<float, 2>::from_shape({12, 9});
  xt::xtensor<float, 1> b = xt::xtensor<float, 1>::from_shape({9});
  xt::xtensor<float, 2> c = xt::xtensor<float, 2>::from_shape({9, 30});
  xt::xtensor<float, 1> d = xt::xtensor<float, 1>::from_shape({30});
  xt::xtensor<float, 2> e = xt::xtensor<float, 2>::from_shape({30, 4});
  template <class F>
  void for_each(F&& f) {
    f("a", a), f("b", b), f("c", c), f("d", d), f("e", e);
  }
  template <class F>
  void for_each(F&& f) const {
    f("a", a), f("b", b), f("c", c), f("d", d), f("e", e);
  }
  static auto tree_children(auto& self) noexcept { return std::tie(self.a, self.b, self.c, self.d, self.e); }
};

/// Gradients of toy's first tensor only: a tree that does not match the model.
struct short_grads {
  xt::xtensor<float, 2> a = xt::xtensor<float, 2>::from_shape({12, 9});
  template <class F>
  void for_each(F&& f) const {
    f("a", a);
  }
};

/// Fills every tensor of `m` (parameters or gradients) from `rng`: the same values on every rank.
template <class T>
void fill(toy<T>& m, std::mt19937& rng) {
  std::normal_distribution<float> n(0.0f, 0.5f);
  m.for_each_parameter([&](std::string_view, auto& t) {
    for (auto& x : t) x = static_cast<T>(n(rng));
  });
}
void fill(toy_grads& g, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> n(0.0f, 0.1f);
  g.for_each([&](std::string_view, auto& t) {
    for (auto& x : t) x = scale * n(rng);
  });
}

/// The bytes of every parameter, in walk order.
template <class T>
std::vector<std::uint8_t> bytes_of(const toy<T>& m) {
  std::vector<std::uint8_t> out;
  m.for_each_parameter([&](std::string_view, const auto& t) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(t.data());
    out.insert(out.end(), p, p + t.size() * sizeof(T));
  });
  return out;
}

}  // namespace

TEST_CASE("shard_plan: largest tensor first, each to the rank with the fewest elements", "[distributed]") {
  const dist::communicator comm;
  REQUIRE(comm.size() == 2);
  // Sizes 10, 40, 30, 20, 5, 5. By hand: 40 -> rank 0 (0, 0); 30 -> rank 1 (40, 0); 20 -> rank 1 (40, 30);
  // 10 -> rank 0 (40, 50); 5 (t4) -> rank 0 (50, 50: the lower rank); 5 (t5) -> rank 1 (55, 50).
  sized_walk walk;
  for (const std::size_t n : {10, 40, 30, 20, 5, 5}) walk.tensors.emplace_back(n);
  const dist::shard_plan plan(
      comm, [&](auto&& f) { walk.for_each_parameter(f); }, "model");
  const std::array<int, 6> expected{0, 0, 1, 1, 0, 1};
  for (std::size_t k = 0; k < expected.size(); ++k) {
    CHECK(plan.owner(k) == expected[k]);
    std::string name = "model.t";
    name += std::to_string(k);
    CHECK(plan.owner(name) == expected[k]);
  }
  CHECK(plan.elements_of(0) == 55);
  CHECK(plan.elements_of(1) == 55);
  CHECK(plan.owner("t0") == -1);  // names carry the prefix
  CHECK(plan.owns(comm.rank(), "model.t1") == (comm.rank() == 0));
}

TEMPLATE_TEST_CASE("sharded_optimizer gives the unsharded optimiser's bits, with half the state per rank",
                   "[distributed]", float, mixprec::bfloat16) {
  const dist::communicator comm;
  std::mt19937 init(3);
  toy<TestType> plain_model;
  fill(plain_model, init);
  toy<TestType> sharded_model = plain_model;
  const tr::adamw_options options{.beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1};
  tr::adamw plain(options);
  dist::sharded_optimizer sharded(comm, sharded_model, tr::adamw(options));
  mixprec::dynamic_loss_scale plain_ls({.initial_scale = 1024.0f, .period = 3});
  mixprec::dynamic_loss_scale sharded_ls = plain_ls;

  std::mt19937 rng(11);  // the same averaged gradients on every rank, as after gradient_reducer::average
  for (int step = 0; step < 6; ++step) {
    toy_grads g;
    fill(g, rng, plain_ls.loss_scale());
    if (step == 2) g.c(4, 7) = INFINITY;  // a skipped step, on both sides
    toy_grads g2 = g;
    const double lr = 1e-2 * (step + 1);
    const bool a = tr::scaled_step(plain_ls, plain, lr, plain_model, g, {.max_norm = 1.0});
    const bool b = tr::scaled_step(sharded_ls, sharded, lr, sharded_model, g2, {.max_norm = 1.0});
    CHECK(a == (step != 2));
    CHECK(b == a);
    CHECK(bytes_of(sharded_model) == bytes_of(plain_model));
  }
  CHECK(sharded.step() == plain.step());

  // The state: each rank holds its own tensors' part; together they are the unsharded state.
  std::size_t total = sharded.state_bytes();
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UNSIGNED_LONG, MPI_SUM, comm.native());
  CHECK(total == plain.state_bytes());
  const std::size_t per_element = std::is_same_v<TestType, float> ? 8 : 12;  // m, v (and the float32 master)
  CHECK(sharded.state_bytes() == sharded.plan().elements_of(comm.rank()) * per_element);
  CHECK(sharded.state_bytes() * 10 < plain.state_bytes() * 6);  // about half (0.56 at most for these sizes)

  // The checkpoint: rank 0 gathers exactly the bytes the unsharded optimiser saves.
  tr::checkpoint from_plain, from_sharded;
  tr::save_state(from_plain, plain, "optimizer");
  tr::save_state(from_sharded, sharded, "optimizer");
  if (comm.rank() == 0) {
    CHECK(from_sharded.to_bytes() == from_plain.to_bytes());
  } else {
    CHECK(from_sharded.size() == 0);
  }
}

TEST_CASE("a single process's state resumes on 2 ranks, stochastic rounding included", "[distributed]") {
  const dist::communicator comm;
  using T = mixprec::bfloat16;
  const tr::adamw_options options{
      .weight_decay = 0.05, .precision = {.master_weights = false, .rounding = tr::write_back::stochastic, .seed = 99}};
  std::mt19937 init(8);
  toy<T> model;
  fill(model, init);
  tr::adamw plain(options);
  std::mt19937 rng(21);
  mixprec::no_op_loss_scale none;
  for (int step = 0; step < 3; ++step) {
    toy_grads g;
    fill(g, rng);
    REQUIRE(tr::scaled_step(none, plain, 1e-2, model, g));
  }
  tr::checkpoint saved;
  tr::save_state(saved, plain, "optimizer");  // one process's file
  toy<T> resumed = model;
  dist::sharded_optimizer sharded(comm, resumed, tr::adamw(options));
  tr::load_state(saved, sharded, "optimizer");
  CHECK(sharded.step() == 3);
  CHECK(sharded.state_bytes() < plain.state_bytes());
  for (int step = 3; step < 6; ++step) {
    toy_grads g;
    fill(g, rng);
    toy_grads g2 = g;
    REQUIRE(tr::scaled_step(none, plain, 1e-2, model, g));
    REQUIRE(tr::scaled_step(none, sharded, 1e-2, resumed, g2));
    CHECK(bytes_of(resumed) == bytes_of(model));
  }
}

TEST_CASE("sharded_optimizer over sgd with a prefix, and its errors", "[distributed]") {
  const dist::communicator comm;
  std::mt19937 init(4);
  toy<float> model;
  fill(model, init);
  toy<float> reference = model;
  tr::sgd plain({.momentum = 0.9});
  dist::sharded_optimizer sharded(comm, model, tr::sgd({.momentum = 0.9}), "net");
  CHECK(sharded.plan().owner("net.c") >= 0);
  std::mt19937 rng(5);
  for (int step = 0; step < 3; ++step) {
    toy_grads g;
    fill(g, rng);
    plain.step(0.1, reference, g, "net");
    sharded.step(0.1, model, g, "net");
    CHECK(bytes_of(model) == bytes_of(reference));
  }
  toy_grads g;
  fill(g, rng);
  CHECK_THROWS_WITH(sharded.step(0.1, model, g, "other"),
                    "rank 0: mixprec::distributed::sharded_optimizer: step's prefix \"other\" is not the prefix "
                    "\"net\" the optimiser was made with");
  // Gradients that do not match the model: the local optimiser's error, thrown by every rank.
  CHECK_THROWS_AS(sharded.step(0.1, model, short_grads{}, "net"), std::invalid_argument);
  // A model other than the plan's.
  toy<double> other;
  CHECK_THROWS_WITH(dist::all_gather_parameters(comm, sharded.plan(), other),
                    "rank 0: mixprec::distributed: tensor 0 is \"a\", 108 elements of 8 bytes, not what the shard "
                    "plan was made for (a [12, 9] (4-byte elements))");
  CHECK_THROWS_WITH(sharded.step(0.1, other, g, "net"), Catch::Contains("not what the shard plan was made for"));
  sized_walk walk;
  walk.tensors.emplace_back(comm.rank() == 0 ? 4 : 5);
  CHECK_THROWS_WITH(dist::shard_plan(comm, [&](auto&& f) { walk.for_each_parameter(f); }),
                    Catch::Contains("the ranks' parameters differ: tensor 0 is t0 [5]"));
}

TEST_CASE("gather_checkpoint merges the ranks' parts into the root's and refuses two values under one name",
          "[distributed]") {
  const dist::communicator comm;
  tr::checkpoint ck;
  const float mine = 1.5f + static_cast<float>(comm.rank());
  std::string name = "rank";
  name += std::to_string(comm.rank());
  ck.put(name, std::span<const float>(&mine, 1), {1});
  ck.put_scalar("step", std::int64_t{7});
  ck.metadata["kind"] = "adamw";
  dist::gather_checkpoint(comm, ck, 1);
  if (comm.rank() == 1) {
    CHECK(ck.size() == 3);
    CHECK(ck.get<float, 1>("rank0")(0) == 1.5f);
    CHECK(ck.get<float, 1>("rank1")(0) == 2.5f);
    CHECK(ck.get_scalar<std::int64_t>("step") == 7);
  } else {
    CHECK(ck.size() == 2);  // left as it was
  }
  tr::checkpoint clash;
  clash.put_scalar("step", std::int64_t{comm.rank()});
  CHECK_THROWS_WITH(dist::gather_checkpoint(comm, clash),
                    "rank 0: mixprec::distributed::gather_checkpoint: tensor \"step\" differs on rank 1 and rank 0; "
                    "a name several ranks save must hold one value");
  CHECK_THROWS_WITH(dist::gather_checkpoint(comm, clash, 2), Catch::Contains("root 2 is not a rank"));
}

}  // namespace sharded_optimizer_test
