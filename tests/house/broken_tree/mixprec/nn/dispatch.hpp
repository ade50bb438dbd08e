// Planted — a layer that reads the instruction-set level, over rows [i0, i1), and reaches into the kernels.
#pragma once
inline bool wide() { return mixprec::active_isa() >= mixprec::isa::avx512; }
inline int x = mixprec::kernels::detail::helper();
inline void f() { mixprec::detail::norm_avx2::rows(); }
