// A consumer of the installed (or add_subdirectory'd) mixprec: includes both umbrellas, uses the
// core and both adapters (so Eigen and xtensor must reach it through mixprec::mixprec), and checks
// values against references worked out by hand.
#include <mixprec/core.hpp>
#include <mixprec/mixprec.hpp>

#include <cstdio>
#include <vector>

// Linking mixprec::distributed: its headers, MPI's include path and library reach the consumer.
#ifdef MIXPREC_CONSUMER_EXPECTS_DISTRIBUTED
#include <mixprec/distributed/communicator.hpp>
#include <mixprec/distributed/sharded_optimizer.hpp>

/// A model of one parameter, and its gradient.
struct one_tensor {
  xt::xtensor<float, 1> w = {1.0f};
  void for_each_parameter(auto&& f) { f("w", w); }
  void for_each_parameter(auto&& f) const { f("w", w); }
};
struct one_gradient {
  xt::xtensor<float, 1> w = {0.5f};
  void for_each(auto&& f) const { f("w", w); }
};
#endif

// Linking mixprec::compiled must bring MIXPREC_COMPILED with it (the exported target's definition).
#ifdef MIXPREC_CONSUMER_EXPECTS_COMPILED
static_assert(MIXPREC_EXTERN_KERNELS == 1, "mixprec::compiled did not make the kernels' instantiations extern");
#else
static_assert(MIXPREC_EXTERN_KERNELS == 0, "mixprec::mixprec must stay header-only");
#endif

int main([[maybe_unused]] int argc, [[maybe_unused]] char** argv) {
  // float(1/3) = 0x3EAAAAAB; rounding to the top 16 bits: the dropped half 0xAAAB is above 0x8000,
  // so the result rounds up to 0x3EAB (= 0.333984375).
  const mixprec::bfloat16 third(1.0f / 3.0f);
  bool ok = third.bits() == 0x3EAB && static_cast<float>(third) == 0.333984375f;
  ok = ok && mixprec::name(mixprec::dtype_of_v<mixprec::bfloat16>) == "bfloat16";

  // Through the adapters: 1.0f is exact in bfloat16, pattern 0x3F80 (the top half of float 1.0f).
  const Eigen::Matrix2f ones = Eigen::Matrix2f::Ones();
  const Eigen::Matrix<mixprec::bfloat16, 2, 2> e = mixprec::cast_floating<mixprec::bfloat16>(ones);
  const xt::xtensor<float, 1> x = {1.0f, 1.0f};
  const xt::xtensor<mixprec::bfloat16, 1> h = mixprec::cast_floating<mixprec::bfloat16>(x);
  ok = ok && e(1, 1).bits() == 0x3F80 && h(1).bits() == 0x3F80;

  // A product through the kernels (in the compiled mode, the library's matmul driver): operands
  // 1, 2 and 3, 4 are exact in bfloat16, so y = 1·3 + 2·4 = 11 exactly.
  const std::vector<float> a{1.0f, 2.0f}, b{3.0f, 4.0f};
  std::vector<float> y(1);
  mixprec::kernels::matmul<mixprec::bfloat16>(a, b, y, {.m = 1, .k = 2, .n = 1}, mixprec::kernels::b_layout::k_n);
  ok = ok && y[0] == 11.0f;

#ifdef MIXPREC_CONSUMER_EXPECTS_DISTRIBUTED
  // One process (MPI's singleton start): a communicator of one rank, and ZeRO-1 over it stepping every
  // parameter. SGD without momentum: w = 1 - 0.5 * 0.5 = 0.75, exact.
  const mixprec::distributed::environment mpi(argc, argv);
  const mixprec::distributed::communicator comm;
  ok = ok && comm.size() == 1 && comm.rank() == 0;
  one_tensor model;
  const one_gradient grad;
  mixprec::distributed::sharded_optimizer opt(comm, model, mixprec::train::sgd());
  opt.step(0.5, model, grad);
  ok = ok && model.w(0) == 0.75f && opt.plan().owner("w") == 0;
#endif

  std::printf("mixprec consumer %s: bfloat16(1/3) = 0x%04x\n", ok ? "OK" : "FAILED",
              static_cast<unsigned>(third.bits()));
  return ok ? 0 : 1;
}
