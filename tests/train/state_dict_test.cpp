// Tests of mixprec/train/state_dict.hpp: layers, composites and their buffers round-trip bit for bit;
// strict loading refuses missing, unexpected, wrong-shape and wrong-dtype tensors with messages that
// name them and leaves the model untouched; non-strict loading reports; dtype conversion rounds once
// (checked against values worked out from the formats); optimiser, loss scales and random engines
// under prefixes in one file, and a train state that resumes a loss-scaled run bit for bit.
#include <catch2/catch.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/nn/batch_norm.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/sequential.hpp"
#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/train/adamw.hpp"
#include "mixprec/train/scaled_step.hpp"
#include "mixprec/train/state_dict.hpp"
#include "support/error_message.hpp"

namespace state_dict_test {

namespace nn = mixprec::nn;
namespace train = mixprec::train;
using test_support::says;

namespace {

using P = mixprec::mixed_float16;

auto make_model(unsigned seed) {
  std::mt19937 rng(seed);
  return nn::sequential{nn::dense<P>(3, 4, rng), nn::layer_norm<P>(4), nn::dense<P>(4, 2, rng)};
}
using model_type = decltype(make_model(0));

/// Every parameter's bits, in walk order.
template <class M>
std::vector<std::uint32_t> bits(const M& m) {
  std::vector<std::uint32_t> out;
  m.for_each_parameter([&](std::string_view, const auto& t) {
    for (std::size_t i = 0; i < t.size(); ++i) out.push_back(std::bit_cast<std::uint32_t>(float(t.data()[i])));
  });
  return out;
}

/// A model whose parameters differ from `make_model`'s (the layer_norm scale too).
model_type other_model() {
  auto m = make_model(99);
  m.for_each_parameter([](std::string_view, auto& t) {
    for (auto& v : t) v = v * 0.5f + 0.125f;
  });
  return m;
}

}  // namespace

TEST_CASE("state dict: a composite round-trips bit for bit under dotted names", "[state_dict]") {
  const auto model = make_model(1);
  train::checkpoint ck;
  train::save_state(ck, model, "model");
  CHECK(ck.names() == std::vector<std::string>{"model.0.bias", "model.0.kernel", "model.1.bias", "model.1.scale",
                                               "model.2.bias", "model.2.kernel"});
  CHECK(ck.at("model.0.kernel").shape == std::vector<std::uint64_t>{3, 4});
  CHECK(ck.at("model.1.scale").type == mixprec::dtype::float32);

  auto back = other_model();
  REQUIRE(bits(back) != bits(model));
  const auto report = train::load_state(train::checkpoint::from_bytes(ck.to_bytes()), back, "model");
  CHECK(report.missing.empty());
  CHECK(report.unexpected.empty());
  CHECK(bits(back) == bits(model));
}

TEST_CASE("state dict: buffers are saved beside parameters", "[state_dict]") {
  nn::batch_norm<P> bn(3);
  bn.for_each_buffer([](std::string_view, auto& t) {
    for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = 0.25f * static_cast<float>(i + 1);
  });
  train::checkpoint ck;
  train::save_state(ck, bn);
  CHECK(ck.contains("mean"));
  CHECK(ck.contains("var"));
  CHECK(ck.contains("scale"));
  nn::batch_norm<P> back(3);
  train::load_state(ck, back);
  std::vector<float> mean;
  back.for_each_buffer([&](std::string_view name, const auto& t) {
    if (name == "mean") mean.assign(t.begin(), t.end());
  });
  CHECK(mean == std::vector<float>{0.25f, 0.5f, 0.75f});
}

TEST_CASE("state dict: strict loading names every tensor at fault and writes nothing", "[state_dict][errors]") {
  const auto model = make_model(1);
  train::checkpoint ck;
  train::save_state(ck, model);
  auto target = other_model();
  const auto before = bits(target);

  SECTION("missing") {
    ck.erase("1.scale");
    ck.erase("2.bias");
    CHECK_THROWS_MATCHES(
        train::load_state(ck, target), train::safetensors_error,
        says({"safetensors: <memory>: load_state:", "missing from the file: \"1.scale\", \"2.bias\""}));
  }
  SECTION("unexpected") {
    ck.put_scalar("3.kernel", 1.0f);
    CHECK_THROWS_MATCHES(train::load_state(ck, target), train::safetensors_error,
                         says({"unexpected in the file: \"3.kernel\""}));
  }
  SECTION("unexpected under a prefix") {
    train::checkpoint prefixed;
    train::save_state(prefixed, model, "net");
    prefixed.put_scalar("net.extra", 1.0f);
    prefixed.put_scalar("elsewhere", 1.0f);  // outside the prefix: not the model's business
    CHECK_THROWS_MATCHES(train::load_state(prefixed, target, "net"), train::safetensors_error,
                         says({"unexpected in the file under \"net.\": \"net.extra\""}));
  }
  SECTION("wrong shape") {
    ck.put("0.bias", std::vector<float>{1, 2, 3}, {3});
    CHECK_THROWS_MATCHES(train::load_state(ck, target), train::safetensors_error,
                         says({"\"0.bias\" has shape [3] in the file and [4] in the model"}));
  }
  SECTION("wrong dtype") {
    ck.put("2.bias", std::vector<double>{1, 2}, {2});
    CHECK_THROWS_MATCHES(
        train::load_state(ck, target), train::safetensors_error,
        says({"\"2.bias\" is F64 (float64) in the file and F32 (float32) in the model", "{.convert = true}"}));
  }
  SECTION("a dtype that does not convert") {
    ck.put("2.bias", std::vector<std::int32_t>{1, 2}, {2});
    CHECK_THROWS_MATCHES(train::load_state(ck, target, {}, {.convert = true}), train::safetensors_error,
                         says({"\"2.bias\" is I32 (int32) in the file and F32 (float32) in the model"}));
  }
  SECTION("several faults at once") {
    ck.erase("0.kernel");
    ck.put("2.bias", std::vector<double>{1, 2}, {2});
    CHECK_THROWS_MATCHES(train::load_state(ck, target), train::safetensors_error,
                         says({"\"2.bias\" is F64", "missing from the file: \"0.kernel\""}));
  }
  CHECK(bits(target) == before);
}

TEST_CASE("state dict: a non-strict load reports and loads what is there", "[state_dict]") {
  const auto model = make_model(1);
  train::checkpoint ck;
  train::save_state(ck, model);
  ck.erase("1.scale");
  ck.put_scalar("extra", 2.0f);
  auto target = other_model();
  const float scale_before = (*target.layer<1>().scale())(0);
  const auto report = train::load_state(ck, target, {}, {.strict = false});
  CHECK(report.missing == std::vector<std::string>{"1.scale"});
  CHECK(report.unexpected == std::vector<std::string>{"extra"});
  CHECK((*target.layer<1>().scale())(0) == scale_before);
  CHECK(bool(target.layer<0>().kernel() == model.layer<0>().kernel()));
}

TEST_CASE("state dict: a converting load rounds once to the model's dtype", "[state_dict]") {
  using Pb = mixprec::policy<mixprec::bfloat16>;
  nn::dense<Pb> layer(1, 2, nn::use_bias::no);
  train::checkpoint ck;
  // 1 + 2^-8 + 2^-40 is above the tie between bfloat16's 1 and 1 + 2^-7: rounded once it is 1 + 2^-7;
  // through float (24 bits) it would be the tie 1 + 2^-8, rounded to even: 1. 3 * 2^-130 is a float64 value in
  // bfloat16's subnormal range (bfloat16 subnormals step by 2^-133): exactly 24 * 2^-133.
  const double above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  ck.put("kernel", std::vector<double>{above_tie, 3.0 * std::ldexp(1.0, -130)}, {1, 2});
  CHECK_THROWS_AS(train::load_state(ck, layer), train::safetensors_error);
  train::load_state(ck, layer, {}, {.convert = true});
  CHECK(std::bit_cast<std::uint16_t>(layer.kernel()(0, 0)) == 0x3F81);  // 1 + 2^-7
  CHECK(static_cast<double>(layer.kernel()(0, 1)) == 3.0 * std::ldexp(1.0, -130));
  CHECK(std::bit_cast<std::uint16_t>(layer.kernel()(0, 1)) == 24);
}

TEST_CASE("state dict: loss scales and random engines round-trip under prefixes", "[state_dict]") {
  train::checkpoint ck;
  mixprec::dynamic_loss_scale ls(
      {.initial_scale = 1024.0f, .period = 7, .factor = 4.0f, .min_loss_scale = 2.0f, .max_loss_scale = 65536.0f});
  for (int i = 0; i < 3; ++i) ls.adjust(true);
  train::save_state(ck, ls, "loss_scale");
  train::save_state(ck, mixprec::static_loss_scale(8.0f), "static");
  train::save_state(ck, mixprec::no_op_loss_scale{}, "none");
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10; ++i) (void)rng();
  train::save_state(ck, rng, "rng");
  const auto file = train::checkpoint::from_bytes(ck.to_bytes());

  mixprec::dynamic_loss_scale ls_back;
  train::load_state(file, ls_back, "loss_scale");
  CHECK(ls_back.state() == ls.state());
  mixprec::static_loss_scale s_back(1.0f);
  train::load_state(file, s_back, "static");
  CHECK(s_back.loss_scale() == 8.0f);
  std::mt19937_64 rng_back;
  train::load_state(file, rng_back, "rng");
  CHECK(rng_back() == rng());

  CHECK_THROWS_MATCHES(train::load_state(file, rng_back, "random"), train::safetensors_error,
                       says({"no metadata entry \"random.state\""}));
  CHECK_THROWS_MATCHES(train::load_state(file, ls_back, "scale"), train::safetensors_error, says({"\"scale.period\""}));
  std::mt19937 narrow;
  train::checkpoint bad;
  bad.metadata["rng.state"] = "not a state";
  CHECK_THROWS_MATCHES(train::load_state(bad, narrow, "rng"), train::safetensors_error,
                       says({"metadata entry \"rng.state\" is not the state of this random engine"}));
}

TEST_CASE("state dict: a train state in one file resumes a loss-scaled run bit for bit", "[state_dict]") {
  const auto data = [](int step) {
    xt::xtensor<float, 2> x({2, 3});
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = std::sin(0.7f * static_cast<float>(step * 7 + int(i)));
    return x;
  };
  struct run {
    model_type model = make_model(3);
    train::adamw opt{{.weight_decay = 0.1}};
    mixprec::dynamic_loss_scale ls{{.initial_scale = 65536.0f, .period = 2}};
    std::mt19937 rng{11};
    void step(const xt::xtensor<float, 2>& x) {
      model_type::saved<float> ctx;
      auto y = model.forward(x, ctx);
      std::uniform_real_distribution<float> noise(-0.01f, 0.01f);
      for (auto& v : y) v = ls.scale(v + noise(rng));  // d(scaled Σ y²/2)/dy with noise from the rng
      auto grads = model.zero_gradients();
      (void)model.backward(ctx, y, grads);
      train::scaled_step(ls, opt, 1e-2, model, grads, {.max_norm = 1.0});
    }
    void save(const std::filesystem::path& path) const {
      train::checkpoint ck;
      train::save_state(ck, model, "model");
      train::save_state(ck, opt, "optimizer");
      train::save_state(ck, ls, "loss_scale");
      train::save_state(ck, rng, "rng");
      ck.save(path);
    }
    void load(const std::filesystem::path& path) {
      const auto ck = train::checkpoint::load(path);
      train::load_state(ck, model, "model");
      train::load_state(ck, opt, "optimizer");
      train::load_state(ck, ls, "loss_scale");
      train::load_state(ck, rng, "rng");
    }
  };
  const auto path = std::filesystem::temp_directory_path() / "mixprec_state_dict_test.safetensors";
  run first;
  for (int s = 0; s < 3; ++s) first.step(data(s));
  first.save(path);
  for (int s = 3; s < 6; ++s) first.step(data(s));

  run resumed;
  resumed.model = make_model(4);  // other weights, overwritten by the load
  resumed.load(path);
  std::filesystem::remove(path);
  for (int s = 3; s < 6; ++s) resumed.step(data(s));
  CHECK(bits(resumed.model) == bits(first.model));
  CHECK(resumed.ls.state() == first.ls.state());
  CHECK(resumed.opt.step() == first.opt.step());
}

TEST_CASE("checkpoint: put takes a braced shape, scoped and insert move a prefix", "[state_dict][safetensors]") {
  train::checkpoint ck;
  const std::vector<float> v(16, 1.5f);
  ck.put("bias", std::span<const float>(v), {16});
  ck.put("grid", v, {4, 4});
  ck.metadata["note"] = "x";
  train::checkpoint outer;
  outer.insert("opt", ck);
  CHECK(outer.names() == std::vector<std::string>{"opt.bias", "opt.grid"});
  CHECK(outer.metadata.at("opt.note") == "x");
  const auto inner = outer.scoped("opt");
  CHECK(inner.names() == std::vector<std::string>{"bias", "grid"});
  CHECK(inner.at("grid").shape == std::vector<std::uint64_t>{4, 4});
  CHECK(inner.metadata.at("note") == "x");
  CHECK_THROWS_MATCHES((void)inner.at("missing"), train::safetensors_error, says({"(under \"opt.\")"}));
}

}  // namespace state_dict_test
