// Compile-time benchmark: the run-time policy block, one dense forward for each of three policies
// chosen by a policy string at run time (mixprec::visit).
#include <mixprec/nn/dense.hpp>
#include <mixprec/policies/runtime_policy.hpp>

#include <random>

int main(int argc, char** argv) {
  const auto policy = mixprec::parse_policy(argc > 1 ? argv[1] : "p=f32,c=bf16,o=f32");
  const double sum =
      mixprec::visit<mixprec::full_precision, mixprec::mixed_bfloat16, mixprec::mixed_float16>(policy, [&]<class P>(P) {
        std::mt19937 rng(1);
        mixprec::nn::dense<P> layer(64, 32, rng);
        xt::xtensor<float, 2> x = xt::ones<float>({8, 64});
        const auto y = layer(x);
        return static_cast<double>(xt::sum(y)());
      });
  return sum == sum ? 0 : 1;
}
