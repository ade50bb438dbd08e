// distributed::broadcast_parameters and parameters_agree on 2 ranks, float32 and bfloat16 parameters.
#include <catch2/catch.hpp>

#include <random>
#include <stdexcept>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/parameters.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/policies/policy.hpp"

namespace parameters_test {

namespace dist = mixprec::distributed;
namespace nn = mixprec::nn;

TEMPLATE_TEST_CASE("broadcast_parameters gives every rank rank 0's parameters, and parameters_agree sees it",
                   "[distributed]", float, mixprec::bfloat16) {
  using P = mixprec::policy<TestType>;
  const dist::communicator comm;
  std::mt19937 rng(100 + static_cast<unsigned>(comm.rank()));  // each rank starts from its own weights
  nn::dense<P> layer(6, 4, rng);
  std::mt19937 rank0_rng(100);
  const nn::dense<P> rank0(6, 4, rank0_rng);  // what rank 0 holds
  CHECK_FALSE(dist::parameters_agree(comm, layer));
  dist::broadcast_parameters(comm, layer);
  CHECK(dist::parameters_agree(comm, layer));
  CHECK(bool(layer.kernel() == rank0.kernel()));
  CHECK(dist::parameter_checksum(layer) == dist::parameter_checksum(rank0));
}

TEST_CASE("broadcast_parameters errors: a root that is not a rank, models that differ", "[distributed]") {
  using P = mixprec::policy<float>;
  const dist::communicator comm;
  std::mt19937 rng(5);
  nn::dense<P> layer(6, 4, rng);
  CHECK_THROWS_WITH(dist::broadcast_parameters(comm, layer, 2), Catch::Contains("root 2 is not a rank"));
  nn::dense<P> other(comm.rank() == 0 ? 6 : 7, 4, rng);
  CHECK_THROWS_WITH(
      dist::broadcast_parameters(comm, other),
      "mixprec::distributed: the ranks' parameters differ: tensor 0 is kernel [7, 4] (4-byte elements) on "
      "rank 1 but kernel [6, 4] (4-byte elements) on rank 0; every rank must build the same model");
}

}  // namespace parameters_test
