/// \file
/// \brief The instruction-set levels mixprec's fast paths are written for, the level this CPU
/// supports (detected once, at run time), and the level in use: the detected one, or a lower one
/// forced by the environment variable `MIXPREC_ISA` or by `set_isa_limit`. A program built without
/// any `-m`/`-march` flag still runs the fastest path this CPU supports.
///
/// Kernels dispatch once per operation on `active_isa()`; tests force each lower level in turn, as
/// oneDNN's `ONEDNN_MAX_CPU_ISA` and Highway's `SetSupportedTargetsForTest` do.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
/// 1 where the CPU's features are read through CPUID (GCC or Clang on x86).
#define MIXPREC_DETAIL_X86_CPUID 1
#include <cpuid.h>
#else
#define MIXPREC_DETAIL_X86_CPUID 0
#endif

namespace mixprec {

/// Instruction-set levels, ordered: each level includes everything of the levels below it.
enum class isa : std::uint8_t {
  portable,    ///< plain C++ (the compiler's baseline, e.g. x86-64 SSE2); every CPU
  avx2,        ///< AVX2 + FMA + F16C (x86-64-v3: Intel Haswell, AMD Zen 1 and later)
  avx512,      ///< AVX-512 F/BW/VL/DQ + the avx2 level (Intel Skylake-SP, AMD Zen 4 and later)
  avx512bf16,  ///< the avx512 level + AVX512_BF16 (VDPBF16PS, VCVTNEPS2BF16: Intel Cooper Lake, AMD Zen 4)
};

/// Every level, lowest first.
inline constexpr std::array<isa, 4> all_isas{isa::portable, isa::avx2, isa::avx512, isa::avx512bf16};

/// The level's name as `MIXPREC_ISA` and `parse_isa` spell it: "portable", "avx2", "avx512", "avx512bf16".
[[nodiscard]] constexpr std::string_view name(isa level) noexcept {
  switch (level) {
    case isa::portable: return "portable";
    case isa::avx2: return "avx2";
    case isa::avx512: return "avx512";
    case isa::avx512bf16: break;
  }
  return "avx512bf16";
}

/// Prints `name(level)`.
inline std::ostream& operator<<(std::ostream& os, isa level) { return os << name(level); }

/// Parses a level's name (exactly as `name` writes it).
///
/// Errors: throws std::invalid_argument naming the text and the accepted names.
[[nodiscard]] inline isa parse_isa(std::string_view text) {
  for (const isa level : all_isas) {
    if (name(level) == text) return level;
  }
  std::string message = "mixprec::parse_isa: unknown instruction-set level '";
  message.append(text);
  message.append("': write portable, avx2, avx512 or avx512bf16");
  throw std::invalid_argument(message);
}

namespace detail {

/// What the CPU and operating system offer the kernels, read once: the highest level, and
/// AVX512_VBMI, which is not part of any level (below).
struct cpu_features {
  isa level = isa::portable;
  bool avx512_vbmi = false;
};

#if MIXPREC_DETAIL_X86_CPUID
/// The CPU's features as CPUID reports them and the operating system enables them through XCR0
/// (Intel SDM vol. 1 §13 and vol. 2 CPUID; the OS must save the YMM state for AVX and the opmask and
/// ZMM states for AVX-512). Asked directly: `__builtin_cpu_supports` lacks "f16c" in Clang 14.
[[nodiscard]] inline cpu_features detect_x86_features() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return {};
  __cpuid_count(1, 0, eax, ebx, ecx, edx);
  const bool fma = (ecx >> 12) & 1u, osxsave = (ecx >> 27) & 1u, avx = (ecx >> 28) & 1u, f16c = (ecx >> 29) & 1u;
  if (!osxsave || !avx) return {};
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0u));
  const bool os_ymm = (xcr0_low & 0x6u) == 0x6u;    // SSE and AVX state
  const bool os_zmm = (xcr0_low & 0xE6u) == 0xE6u;  // and opmask, ZMM_Hi256, Hi16_ZMM
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const unsigned max_subleaf = eax;
  const bool avx2 = (ebx >> 5) & 1u, avx512f = (ebx >> 16) & 1u, avx512dq = (ebx >> 17) & 1u,
             avx512bw = (ebx >> 30) & 1u, avx512vl = (ebx >> 31) & 1u, avx512vbmi = (ecx >> 1) & 1u;
  bool avx512bf16 = false;
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    avx512bf16 = (eax >> 5) & 1u;
  }
  if (!os_ymm || !avx2 || !fma || !f16c) return {};
  if (!os_zmm || !avx512f || !avx512bw || !avx512vl || !avx512dq) return {isa::avx2, false};
  return {avx512bf16 ? isa::avx512bf16 : isa::avx512, avx512vbmi};
}
#endif

/// This CPU's features, detected once; none on other architectures and compilers.
[[nodiscard]] inline const cpu_features& detected_features() noexcept {
#if MIXPREC_DETAIL_X86_CPUID
  static const cpu_features detected = detect_x86_features();
#else
  static const cpu_features detected;
#endif
  return detected;
}

}  // namespace detail

/// The highest level this CPU and operating system support, detected once. `isa::portable` on other
/// architectures and compilers.
[[nodiscard]] inline isa detected_isa() noexcept { return detail::detected_features().level; }

namespace detail {

/// Whether the CPU reports AVX512_VBMI (CPUID.(EAX=7, ECX=0):ECX[1]: VPERMB and VPERMT2B, byte
/// permutes across a whole zmm register) and the operating system enables AVX-512, detected once.
/// Not a level of its own: Intel Cooper Lake has AVX512_BF16 without it, Intel Ice Lake the reverse;
/// AMD Zen 4 and Zen 5 and Intel Sapphire Rapids onwards have both. The kernels that use it ask
/// beside `active_isa()` (which must be at least `isa::avx512`) and take another path without it.
[[nodiscard]] inline bool cpu_has_avx512_vbmi() noexcept { return detected_features().avx512_vbmi; }

/// The process-wide limit on the level in use: one object per program (an inline function's static).
/// Starts at `MIXPREC_ISA` when that is set (an unknown name is ignored, with a message on stderr,
/// rather than stopping a program at start-up), else at the highest level.
[[nodiscard]] inline std::atomic<isa>& isa_limit_storage() noexcept {
  static std::atomic<isa> limit{[] {
    const char* text = std::getenv("MIXPREC_ISA");
    if (text == nullptr || *text == '\0') return isa::avx512bf16;
    try {
      return parse_isa(text);
    } catch (const std::invalid_argument& e) {
      std::fputs(e.what(), stderr);
      std::fputs(" (in the environment variable MIXPREC_ISA; ignored)\n", stderr);
      return isa::avx512bf16;
    }
  }()};
  return limit;
}

}  // namespace detail

/// The level the fast paths use: the lower of `detected_isa()` and the limit (`MIXPREC_ISA` or
/// `set_isa_limit`). A limit above what the CPU supports has no effect: nothing can raise the level
/// beyond the CPU. Thread-safe; read it once per operation.
[[nodiscard]] inline isa active_isa() noexcept {
  return std::min(detected_isa(), detail::isa_limit_storage().load(std::memory_order_relaxed));
}

/// Sets the limit on the level in use, for the whole process (overrides `MIXPREC_ISA`), and returns
/// the previous limit. `set_isa_limit(isa::avx512bf16)` removes the limit. Thread-safe, but an
/// operation already running keeps the level it started with.
inline isa set_isa_limit(isa limit) noexcept {
  return detail::isa_limit_storage().exchange(limit, std::memory_order_relaxed);
}

/// RAII: limits the level in use for the scope's lifetime (process-wide), then restores the previous
/// limit. For tests and benchmarks that compare paths; not meant to be nested across threads.
class isa_limit_scope {
 public:
  /// Sets `limit` (see `set_isa_limit`).
  explicit isa_limit_scope(isa limit) noexcept : previous_(set_isa_limit(limit)) {}
  isa_limit_scope(const isa_limit_scope&) = delete;
  isa_limit_scope& operator=(const isa_limit_scope&) = delete;
  ~isa_limit_scope() { set_isa_limit(previous_); }

 private:
  isa previous_;
};

}  // namespace mixprec
