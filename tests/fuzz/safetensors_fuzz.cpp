// libFuzzer target: the safetensors reader (train/safetensors.hpp) on arbitrary bytes. Invariants: a
// malformed file is a safetensors_error, never a crash, a hang, a huge allocation or another exception;
// a file that parses is written back by to_bytes into a file that parses to the same checkpoint, and
// that second file is a fixed point (writing it again gives the same bytes).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_check.hpp"
#include "mixprec/train/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using mixprec::train::checkpoint;
  try {
    const checkpoint first = checkpoint::from_bytes(std::span<const std::uint8_t>(data, size));
    const std::vector<std::uint8_t> written = first.to_bytes();
    const checkpoint second = checkpoint::from_bytes(written);
    fuzz_check(second.to_bytes() == written, "writing a parsed file is a fixed point");
  } catch (const mixprec::train::safetensors_error&) {
  }
  return 0;
}
