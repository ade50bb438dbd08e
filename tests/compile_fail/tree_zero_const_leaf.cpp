// Must not compile: tree_zero on a tree with a const leaf (a std::span<const float>); the
// static_assert in mixprec/arrays/tree.hpp names the cause. The mutable twin compiles.
#include <mixprec/arrays/tree.hpp>
#include <span>
#include <vector>

inline void zero_spans(std::vector<float>& buffer) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  std::vector<std::span<const float>> spans{std::span<const float>(buffer)};
#else
  std::vector<std::span<float>> spans{std::span<float>(buffer)};
#endif
  mixprec::tree_zero(spans);
}
