// Must not compile: delayed scaling (TransformerEngine's float8 recipe) of a format that is not float8.
#include <mixprec/formats/bfloat16.hpp>
#include <mixprec/formats/float8.hpp>
#include <mixprec/scaled/delayed_scaling.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
inline mixprec::delayed_scaling<mixprec::bfloat16> scaling;
#else
inline mixprec::delayed_scaling<mixprec::float8_e5m2> scaling;
#endif
