// Allowed: kernels/ chooses the implementation.
#pragma once
inline int level() { return static_cast<int>(mixprec::active_isa()); }
