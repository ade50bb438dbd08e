/// \file
/// \brief Test support: `layer_params<T>`, a user-defined struct made a tree (two leaves of type T
/// and an int step) by specialising `mixprec::tree_traits`, as docs/casting.md shows a user doing.
/// Shared by the tree, tree_map and cast tests.
#pragma once

#include <tuple>
#include <utility>

#include "mixprec/arrays/tree.hpp"

namespace mixprec_test {

/// A layer's parameters: weights, bias, and an integer step that casts leave alone.
template <class T>
struct layer_params {
  T w;
  T b;
  int step;
};

}  // namespace mixprec_test

template <class T>
struct mixprec::tree_traits<mixprec_test::layer_params<T>> {
  static auto children(auto& p) noexcept { return std::tie(p.w, p.b, p.step); }
  template <class U>
  static mixprec_test::layer_params<U> rebuild(U w, U b, int step) {
    return {std::move(w), std::move(b), step};
  }
};
