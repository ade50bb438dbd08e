// Compile-time benchmark: the umbrella header, nothing used.
#include <mixprec/mixprec.hpp>

int main() { return 0; }
