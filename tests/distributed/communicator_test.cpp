// distributed::communicator, all_ranks and check_same_structure on 2 ranks.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/distributed/communicator.hpp"
#include "mixprec/distributed/structure.hpp"

namespace communicator_test {

namespace dist = mixprec::distributed;

TEST_CASE("communicator: two ranks, their numbers, a barrier", "[distributed]") {
  const dist::communicator comm;
  CHECK(comm.size() == 2);
  CHECK(comm.rank() >= 0);
  CHECK(comm.rank() < comm.size());
  int sum = comm.rank();
  dist::check(MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, comm.native()), "MPI_Allreduce");
  CHECK(sum == 1);  // ranks 0 and 1
  comm.barrier();
  CHECK_THROWS_AS(dist::environment(), std::logic_error);  // MPI is already initialised
}

TEST_CASE("all_ranks is true only when every rank says true", "[distributed]") {
  const dist::communicator comm;
  CHECK(dist::all_ranks(comm, true));
  CHECK_FALSE(dist::all_ranks(comm, comm.rank() == 0));  // rank 1 says false
  CHECK_FALSE(dist::all_ranks(comm, comm.rank() == 1));  // rank 0 says false
  CHECK_FALSE(dist::all_ranks(comm, false));
}

TEST_CASE("an MPI error is an mpi_error with MPI's message, not an abort", "[distributed]") {
  const dist::communicator comm;
  int value = 0;
  try {
    dist::check(MPI_Bcast(&value, 1, MPI_INT, /*root=*/7, comm.native()), "MPI_Bcast");
    FAIL("a broadcast from rank 7 of 2 must fail");
  } catch (const dist::mpi_error& e) {
    CHECK(std::string(e.what()).find("MPI_Bcast failed: ") != std::string::npos);
    CHECK(e.code() != MPI_SUCCESS);
  }
}

TEST_CASE("check_same_structure passes equal walks and names the first difference on every rank", "[distributed]") {
  const dist::communicator comm;
  std::vector<dist::tensor_entry> mine = {{"w", 4, 6, {2, 3}}, {"b", 4, 3, {3}}};
  CHECK_NOTHROW(dist::check_same_structure(comm, mine, "gradients"));
  // Rank 1's second tensor has another shape.
  std::vector<dist::tensor_entry> other = mine;
  if (comm.rank() == 1) other[1] = {"b", 4, 4, {4}};
  try {
    dist::check_same_structure(comm, other, "gradients");
    FAIL("the walks differ");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) ==
          "mixprec::distributed: the ranks' gradients differ: tensor 1 is b [4] (4-byte elements) on rank 1 but "
          "b [3] (4-byte elements) on rank 0; every rank must build the same model");
  }
  // Rank 1 has one tensor more.
  std::vector<dist::tensor_entry> longer = mine;
  if (comm.rank() == 1) longer.push_back({"c", 8, 1, {1}});
  try {
    dist::check_same_structure(comm, longer, "parameters");
    FAIL("the walks differ");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) ==
          "mixprec::distributed: the ranks' parameters differ: rank 1 has 3 tensors and rank 0 2: rank 0 lacks "
          "c [1] (8-byte elements); every rank must build the same model");
  }
}

}  // namespace communicator_test
