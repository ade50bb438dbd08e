// The distributed tests' main: MPI for the whole run (mixprec::distributed::environment), then Catch.
// mpiexec starts one copy per rank; every rank runs every test case, in the same order, so that their
// collectives meet. A failing check is reported by the rank that saw it, and the run fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "mixprec/distributed/communicator.hpp"

int main(int argc, char** argv) {
  const mixprec::distributed::environment mpi(argc, argv);
  return Catch::Session().run(argc, argv);
}
