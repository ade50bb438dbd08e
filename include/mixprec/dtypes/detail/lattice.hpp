/// \file
/// \brief The JAX type promotion lattice as data: each dtype and its immediate successors, written
/// once as JAX writes it (`jax/_src/dtypes.py`, `_type_promotion_lattice`), with the upper-bound
/// closure (`_make_lattice_upper_bounds`) and the least upper bound (`_least_upper_bound`) computed
/// in constexpr code. Users include `mixprec/dtypes/promotion.hpp`; nothing here is public API.
///
/// Source: jax-ml/jax, `jax/_src/dtypes.py` at commit 001d837f122a50e5c799e5bd2573a3d30a1741fe.
/// See docs/promotion.md for the diagram, the published table and what differs from `jnp`.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "mixprec/dtypes/dtype.hpp"

namespace mixprec::detail {

/// A set of dtypes, one bit per enumerator (JAX's Python `set` of lattice nodes).
class dtype_set {
 public:
  constexpr dtype_set() noexcept = default;
  constexpr dtype_set(std::initializer_list<dtype> dtypes) noexcept {
    for (dtype d : dtypes) insert(d);
  }

  /// Every dtype (the top of an intersection).
  [[nodiscard]] static constexpr dtype_set all() noexcept {
    dtype_set s;
    s.bits_ = dtype_count == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << dtype_count) - 1;
    return s;
  }

  constexpr void insert(dtype d) noexcept { bits_ |= bit(d); }
  [[nodiscard]] constexpr bool contains(dtype d) const noexcept { return (bits_ & bit(d)) != 0; }
  [[nodiscard]] constexpr bool empty() const noexcept { return bits_ == 0; }
  [[nodiscard]] constexpr int size() const noexcept { return std::popcount(bits_); }
  /// The lowest-numbered member; only meaningful when `!empty()`.
  [[nodiscard]] constexpr dtype first() const noexcept { return static_cast<dtype>(std::countr_zero(bits_)); }
  [[nodiscard]] constexpr bool is_subset_of(dtype_set other) const noexcept { return (bits_ & ~other.bits_) == 0; }

  constexpr dtype_set& operator|=(dtype_set o) noexcept {
    bits_ |= o.bits_;
    return *this;
  }
  constexpr dtype_set& operator&=(dtype_set o) noexcept {
    bits_ &= o.bits_;
    return *this;
  }
  [[nodiscard]] friend constexpr dtype_set operator|(dtype_set a, dtype_set b) noexcept { return a |= b; }
  [[nodiscard]] friend constexpr dtype_set operator&(dtype_set a, dtype_set b) noexcept { return a &= b; }
  [[nodiscard]] friend constexpr bool operator==(dtype_set, dtype_set) noexcept = default;

  /// Iterates over the members in enumerator order (`for (dtype d : set)`), one step per member.
  class iterator {
   public:
    constexpr explicit iterator(std::uint64_t rest) noexcept : rest_(rest) {}
    [[nodiscard]] constexpr dtype operator*() const noexcept { return static_cast<dtype>(std::countr_zero(rest_)); }
    constexpr iterator& operator++() noexcept {
      rest_ &= rest_ - 1;  // clear the lowest set bit
      return *this;
    }
    [[nodiscard]] friend constexpr bool operator==(iterator, iterator) noexcept = default;

   private:
    std::uint64_t rest_;
  };
  [[nodiscard]] constexpr iterator begin() const noexcept { return iterator(bits_); }
  [[nodiscard]] constexpr iterator end() const noexcept { return iterator(0); }

 private:
  static constexpr std::uint64_t bit(dtype d) noexcept { return std::uint64_t{1} << static_cast<unsigned>(d); }
  std::uint64_t bits_ = 0;
};
static_assert(dtype_count <= 64, "dtype_set stores one bit per dtype in a 64-bit word: widen it for more dtypes.");

/// One row of a lattice table: a node and its immediate successors (JAX's `node: [successors]`).
struct lattice_row {
  dtype node;
  dtype_set successors;
};

/// A lattice as an adjacency list indexed by dtype: `next[d]` holds d's immediate successors.
using lattice_graph = std::array<dtype_set, dtype_count>;

/// JAX's standard lattice, `_type_promotion_lattice(strict=False, x64=True)`, row by row in JAX's
/// order. `weak_int`, `weak_float`, `weak_complex` are JAX's `i_`, `f_`, `c_` (Python int, float,
/// complex, or weakly typed values). Every dtype appears exactly once (checked below); a node with
/// no successors is written `{}`, as JAX writes `[]`. JAX's optional `int1`/`uint1` are not modelled.
inline constexpr auto standard_lattice_rows = [] {
  using enum dtype;
  return std::array<lattice_row, dtype_count>{{
      {bool_, {weak_int}},
      {weak_int, {uint8, uint2, uint4, int8, int2, int4}},
      {uint2, {}},
      {uint4, {}},
      {uint8, {int16, uint16}},
      {uint16, {int32, uint32}},
      {uint32, {int64, uint64}},  // x64=False replaces this row: see standard_lattice()
      {uint64, {weak_float}},
      {int2, {}},
      {int4, {}},
      {int8, {int16}},
      {int16, {int32}},
      {int32, {int64}},
      {int64, {weak_float}},
      // f_: [*small_float_types, bf16, f16, c_]; the small floats are JAX's _custom_float_dtypes
      // without bfloat16, in JAX's order.
      {weak_float,
       {float4_e2m1fn, float6_e2m3fn, float6_e3m2fn, float8_e3m4, float8_e4m3, float8_e8m0fnu, float8_e4m3b11fnuz,
        float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, bfloat16, float16, weak_complex}},
      // **{t: [] for t in small_float_types}: no small float promotes implicitly.
      {float4_e2m1fn, {}},
      {float6_e2m3fn, {}},
      {float6_e3m2fn, {}},
      {float8_e3m4, {}},
      {float8_e4m3, {}},
      {float8_e8m0fnu, {}},
      {float8_e4m3b11fnuz, {}},
      {float8_e4m3fn, {}},
      {float8_e4m3fnuz, {}},
      {float8_e5m2, {}},
      {float8_e5m2fnuz, {}},
      {bfloat16, {float32}},
      {float16, {float32}},
      {float32, {float64, complex64}},
      {float64, {complex128}},
      {weak_complex, {complex64}},
      {complex64, {complex128}},
      {complex128, {}},
  }};
}();

/// The x64=False patch to the standard lattice (JAX: `if not x64: out[u32] = [i32, u64]`). JAX's
/// comment calls it "u4xi4->i8" in its older byte-size names: uint32 x int32 would otherwise form
/// int64 from 32-bit inputs; with the patch it gives int32.
inline constexpr lattice_row standard_lattice_x32_uint32_row{dtype::uint32, {dtype::int32, dtype::uint64}};

/// JAX `_type_promotion_lattice(strict=False, x64)` as an adjacency list.
[[nodiscard]] constexpr lattice_graph standard_lattice(bool x64) noexcept {
  lattice_graph next{};
  for (const lattice_row& row : standard_lattice_rows) next[static_cast<std::size_t>(row.node)] = row.successors;
  if (!x64) {
    const lattice_row& patch = standard_lattice_x32_uint32_row;
    next[static_cast<std::size_t>(patch.node)] = patch.successors;
  }
  return next;
}

/// JAX `_type_promotion_lattice(strict=True, x64)`, written as JAX writes it:
/// `i_: [f_] + _int_types`, `f_: [c_] + _float_types`, `c_: _complex_types`, every other dtype `[]`.
/// Strong dtypes are incomparable; only the weak types adapt (bool adapts to nothing).
[[nodiscard]] constexpr lattice_graph strict_lattice() noexcept {
  lattice_graph next{};
  auto& weak_int_next = next[static_cast<std::size_t>(dtype::weak_int)];
  auto& weak_float_next = next[static_cast<std::size_t>(dtype::weak_float)];
  auto& weak_complex_next = next[static_cast<std::size_t>(dtype::weak_complex)];
  weak_int_next.insert(dtype::weak_float);
  weak_float_next.insert(dtype::weak_complex);
  for (dtype d : all_dtypes) {
    if (is_weak(d)) continue;
    if (is_integer(d)) weak_int_next.insert(d);
    if (is_floating(d)) weak_float_next.insert(d);
    if (is_complex(d)) weak_complex_next.insert(d);
  }
  return next;
}

/// UB(n) for every node n: the set of upper bounds (n and everything reachable from it).
struct upper_bound_table {
  std::array<dtype_set, dtype_count> ub{};
  bool acyclic = true;  ///< false if some node reaches itself (JAX raises "cycle detected")

  [[nodiscard]] constexpr dtype_set operator[](dtype d) const noexcept { return ub[static_cast<std::size_t>(d)]; }
};

/// JAX `_make_lattice_upper_bounds`: starting from {n}, add the successors of every bound until
/// nothing new appears; a node that reaches itself marks the lattice cyclic.
[[nodiscard]] constexpr upper_bound_table make_upper_bounds(const lattice_graph& next) noexcept {
  upper_bound_table table;
  for (dtype n : all_dtypes) {
    dtype_set& bounds = table.ub[static_cast<std::size_t>(n)];
    bounds = {n};
    while (true) {
      dtype_set reached;
      for (dtype b : bounds) reached |= next[static_cast<std::size_t>(b)];
      if (reached.contains(n)) {
        table.acyclic = false;
        break;
      }
      if (reached.is_subset_of(bounds)) break;
      bounds |= reached;
    }
  }
  return table;
}

/// The three lattices JAX precomputes (`_standard_x64_lattice_ubs`, `_standard_x32_lattice_ubs`,
/// `_strict_lattice_ubs`).
inline constexpr upper_bound_table standard_x64_upper_bounds = make_upper_bounds(standard_lattice(true));
inline constexpr upper_bound_table standard_x32_upper_bounds = make_upper_bounds(standard_lattice(false));
inline constexpr upper_bound_table strict_upper_bounds = make_upper_bounds(strict_lattice());

/// Outcome of a least-upper-bound search.
enum class lub_status : std::uint8_t {
  ok,              ///< a unique least upper bound exists
  no_upper_bound,  ///< the nodes have no common upper bound (JAX: TypePromotionError)
  not_unique,      ///< common upper bounds without a least one: the lattice is ill-formed
};

struct lub_result {
  dtype value = dtype::bool_;  ///< the least upper bound when status == ok
  lub_status status = lub_status::ok;
};

/// JAX `_least_upper_bound` on the node set N: CUB(N) is the intersection of UB(n) over N; the LUB
/// is N ∩ CUB(N) if that is non-empty, otherwise the c in CUB(N) with CUB(N) ⊆ UB(c).
[[nodiscard]] constexpr lub_result least_upper_bound(const upper_bound_table& ubs, dtype_set nodes) noexcept {
  dtype_set common = dtype_set::all();
  for (dtype n : nodes) common &= ubs[n];
  dtype_set least = common & nodes;
  if (least.empty()) {
    for (dtype c : common) {
      if (ubs[c] == common) least.insert(c);  // UB(c) ⊆ CUB(N) always holds for c in CUB(N)
    }
  }
  if (least.size() == 1) return {least.first(), lub_status::ok};
  return {dtype::bool_, least.empty() ? lub_status::no_upper_bound : lub_status::not_unique};
}

/// The least upper bound of every pair, precomputed (JAX memoises `_least_upper_bound` with an LRU
/// cache; a table is the constexpr equivalent). Since the lattices are well formed (checked below),
/// the join of any number of dtypes is a fold over this table.
class join_table {
 public:
  constexpr explicit join_table(const upper_bound_table& ubs) noexcept {
    for (dtype a : all_dtypes) {
      for (dtype b : all_dtypes) {
        const lub_result join = least_upper_bound(ubs, {a, b});
        joins_[index(a, b)] = join;
        well_formed_ = well_formed_ && join.status != lub_status::not_unique;
      }
    }
  }
  [[nodiscard]] constexpr lub_result operator()(dtype a, dtype b) const noexcept { return joins_[index(a, b)]; }
  /// True when every pair with a common upper bound has a unique least one.
  [[nodiscard]] constexpr bool well_formed() const noexcept { return well_formed_; }

 private:
  static constexpr std::size_t index(dtype a, dtype b) noexcept {
    return static_cast<std::size_t>(a) * dtype_count + static_cast<std::size_t>(b);
  }
  std::array<lub_result, dtype_count * dtype_count> joins_{};
  bool well_formed_ = true;
};

inline constexpr join_table standard_x64_joins{standard_x64_upper_bounds};
inline constexpr join_table standard_x32_joins{standard_x32_upper_bounds};
inline constexpr join_table strict_joins{strict_upper_bounds};

// ---------------------------------------------------------------------------------------------
// Lattice laws, checked where the table is written (cheap: pairs only; triples are in the tests).
// ---------------------------------------------------------------------------------------------

/// Every dtype is a row of the standard table exactly once, so no node is missing or doubled.
static_assert(
    [] {
      for (dtype d : all_dtypes) {
        int rows = 0;
        for (const lattice_row& row : standard_lattice_rows) rows += row.node == d ? 1 : 0;
        if (rows != 1) return false;
      }
      return true;
    }(),
    "standard_lattice_rows must list every dtype exactly once.");

/// f_'s successors are exactly the small floats (dtype.hpp's is_small_float), bfloat16, float16 and
/// c_: the table and dtype.hpp's classification agree.
static_assert(
    [] {
      dtype_set expected{dtype::bfloat16, dtype::float16, dtype::weak_complex};
      for (dtype d : all_dtypes) {
        if (is_small_float(d)) expected.insert(d);
      }
      return standard_lattice(true)[static_cast<std::size_t>(dtype::weak_float)] == expected;
    }(),
    "weak_float's successors must be the small floats, bfloat16, float16 and weak_complex.");

static_assert(standard_x64_upper_bounds.acyclic && standard_x32_upper_bounds.acyclic && strict_upper_bounds.acyclic,
              "a type promotion lattice has a cycle: some dtype is its own strict upper bound.");

/// Well formed: every pair with a common upper bound has a unique least one (JAX raises an
/// "Internal Type Promotion error" otherwise). This also makes the n-ary join a fold of the binary one.
static_assert(standard_x64_joins.well_formed() && standard_x32_joins.well_formed() && strict_joins.well_formed(),
              "a type promotion lattice is ill-formed: some pair has common upper bounds but no least one.");

/// Antisymmetric: a <= b and b <= a only when a == b (follows from acyclicity; checked directly).
static_assert(
    [] {
      for (dtype a : all_dtypes) {
        for (dtype b : all_dtypes) {
          if (a != b && standard_x64_upper_bounds[a].contains(b) && standard_x64_upper_bounds[b].contains(a))
            return false;
        }
      }
      return true;
    }(),
    "the standard lattice must be antisymmetric.");

}  // namespace mixprec::detail
