// Must not compile: tree_zero on a const tree; the static_assert in mixprec/arrays/tree.hpp says to
// pass a non-const tree. The mutable twin compiles.
#include <mixprec/arrays/tree.hpp>
#include <vector>

inline void zero_vector(std::vector<float>& buffer) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  const std::vector<float>& tree = buffer;
#else
  std::vector<float>& tree = buffer;
#endif
  mixprec::tree_zero(tree);
}
