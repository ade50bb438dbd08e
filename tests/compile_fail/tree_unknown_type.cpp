// Must not compile: a struct that has not opted in (no mixprec::tree_traits) is not a tree; the
// static_assert in mixprec/arrays/tree.hpp says how to opt in. The opted-in twin compiles.
#include <mixprec/policies/cast.hpp>
#include <tuple>

namespace {
struct plain {
  float w;
};
struct opted_in {
  float w;
};
}  // namespace

template <>
struct mixprec::tree_traits<opted_in> {
  static auto children(auto& p) noexcept { return std::tie(p.w); }
  static opted_in rebuild(float w) { return {w}; }
};

inline auto cast_struct() {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  return mixprec::cast_floating<double>(plain{1.0f});
#else
  return mixprec::cast_floating<float>(opted_in{1.0f});
#endif
}
