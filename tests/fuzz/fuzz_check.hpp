/// \file
/// \brief Shared by the fuzz targets: `fuzz_check(cond, what)` aborts (so libFuzzer reports the input
/// and keeps it as a crash artifact) when an invariant does not hold. Unlike assert it survives -DNDEBUG.
#pragma once

#include <cstdio>
#include <cstdlib>

#define fuzz_check(cond, what)                                                                     \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: invariant failed: %s (%s)\n", __FILE__, __LINE__, #cond, what); \
      std::abort();                                                                                \
    }                                                                                              \
  } while (false)
