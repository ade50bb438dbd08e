// Compile-time benchmark: the floor, a translation unit of the standard library alone.
#include <string>
#include <vector>

int main() {
  std::vector<std::string> words{"floor"};
  return static_cast<int>(words.front().size()) - 5;
}
