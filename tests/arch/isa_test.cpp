// Tests of mixprec::isa, detected_isa, active_isa and the limit (arch/isa.hpp). The detected level is
// checked against the CPU flags the Linux kernel reports in /proc/cpuinfo, an oracle independent of
// the CPUID code under test.
#include "mixprec/arch/isa.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

namespace {

using mixprec::isa;

// The "flags" line of /proc/cpuinfo as a set; empty where there is no such file.
std::set<std::string> linux_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> flags;
      for (std::string w; words >> w;) flags.insert(w);
      return flags;
    }
  }
  return {};
}

}  // namespace

TEST_CASE("names and parse_isa round-trip, and a bad name is a clear error", "[arch][isa]") {
  CHECK(mixprec::name(isa::portable) == "portable");
  CHECK(mixprec::name(isa::avx2) == "avx2");
  CHECK(mixprec::name(isa::avx512) == "avx512");
  CHECK(mixprec::name(isa::avx512bf16) == "avx512bf16");
  for (const isa level : mixprec::all_isas) CHECK(mixprec::parse_isa(mixprec::name(level)) == level);
  CHECK_THROWS_WITH(mixprec::parse_isa("avx-512"),
                    Catch::Matchers::Contains("'avx-512'") && Catch::Matchers::Contains("portable, avx2, avx512"));
  CHECK_THROWS_AS(mixprec::parse_isa(""), std::invalid_argument);
  std::ostringstream os;
  os << isa::avx2;
  CHECK(os.str() == "avx2");
}

TEST_CASE("detected_isa agrees with the flags Linux reports in /proc/cpuinfo", "[arch][isa]") {
  const std::set<std::string> flags = linux_cpu_flags();
  if (flags.empty()) {
    WARN("SKIPPED: no flags line in /proc/cpuinfo to compare with");
    return;
  }
  const auto has = [&](const char* f) { return flags.count(f) == 1; };
  isa expected = isa::portable;
  if (has("avx2") && has("fma") && has("f16c")) {
    expected = isa::avx2;
    if (has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq")) {
      expected = has("avx512_bf16") ? isa::avx512bf16 : isa::avx512;
    }
  }
  INFO("/proc/cpuinfo says " << mixprec::name(expected));
  CHECK(mixprec::detected_isa() == expected);
}

TEST_CASE("the limit lowers the level in use but never raises it above the CPU", "[arch][isa]") {
  const isa detected = mixprec::detected_isa();
  const isa before = mixprec::active_isa();
  {
    const mixprec::isa_limit_scope scope(isa::portable);
    CHECK(mixprec::active_isa() == isa::portable);
  }
  CHECK(mixprec::active_isa() == before);
  for (const isa level : mixprec::all_isas) {
    const mixprec::isa_limit_scope scope(level);
    CHECK(mixprec::active_isa() == std::min(level, detected));
  }
  const isa previous = mixprec::set_isa_limit(isa::avx2);
  CHECK(mixprec::set_isa_limit(previous) == isa::avx2);
  CHECK(mixprec::active_isa() == before);
}

// Run by ctest a second time as arch/isa_env with MIXPREC_ISA=avx2 (tests/arch/CMakeLists.txt).
TEST_CASE("MIXPREC_ISA in the environment limits the level from the start", "[arch][isa][env]") {
  const char* text = std::getenv("MIXPREC_ISA");
  if (text == nullptr) {
    CHECK(mixprec::active_isa() == mixprec::detected_isa());
    return;
  }
  CHECK(mixprec::active_isa() == std::min(mixprec::parse_isa(text), mixprec::detected_isa()));
}
