// Planted: a layer that reads the instruction-set level and reaches into the kernels' internals.
#pragma once
inline bool wide() { return mixprec::active_isa() >= mixprec::isa::avx512; }
inline int x = mixprec::kernels::detail::helper();
