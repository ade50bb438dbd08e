// libFuzzer target: the llama2.c checkpoint and tokenizer readers of the main example
// (examples/llama/llama2c_checkpoint.hpp, llama2c_tokenizer.hpp) on arbitrary files. Invariant: a file
// that is not a valid model is a llama2c::file_error naming the file, never a crash, a hang, an
// out-of-memory allocation or another exception; a file that reads decodes every token id.
// The first input byte chooses the reader; the rest is the file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_check.hpp"
#include "llama/llama2c_checkpoint.hpp"
#include "llama/llama2c_tokenizer.hpp"

namespace {

const std::filesystem::path& scratch_file() {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("mixprec_llama2c_fuzz_" + std::to_string(::getpid()) + ".bin");
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto& path = scratch_file();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  try {
    if (data[0] % 2 == 0) {
      const llama2c::checkpoint ck = llama2c::read_checkpoint(path);
      fuzz_check(ck.config.vocab_size > 0 && ck.config.dim > 0, "a checkpoint that reads is a plausible model");
    } else {
      const int vocab = 1 + data[0] / 2;  // 1..128 tokens
      const llama2c::tokenizer tok = llama2c::read_tokenizer(path, vocab);
      for (int id = 0; id < vocab; ++id) {
        const int ids[1] = {id};
        (void)tok.decode_text(ids);
      }
    }
  } catch (const llama2c::file_error& e) {
    fuzz_check(e.path() == path, "the error names the file");
  }
  return 0;
}
