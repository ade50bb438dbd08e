// Compile-time benchmark: the dependency-free core (formats, dtypes, promotion, policies), one bfloat16.
#include <mixprec/core.hpp>

int main() {
  const mixprec::bfloat16 x(1.5f);
  return static_cast<float>(x) == 1.5f ? 0 : 1;
}
