#!/usr/bin/env bash
# Builds mixprec and runs its whole test suite (ctest: unit tests, compile-time and must-not-compile
# tests, the no-Eigen/xtensor check, the package consumers and the examples), on a Debian machine.
# Installs missing Debian packages first.
#
#   ./scripts/test.sh                  GCC, Debug (also builds the benchmarks, checks every header)
#   ./scripts/test.sh gcc clang asan release
#                                      each configure preset of CMakePresets.json in turn
#                                      (asan: Clang with AddressSanitizer + UndefinedBehaviorSanitizer;
#                                      tsan: GCC with ThreadSanitizer, the areas with shared state;
#                                      release: GCC -O2, everything gcc builds and runs, warnings as
#                                      errors (CI's GCC build);
#                                      fuzz: Clang libFuzzer targets, a bounded number of inputs each)
#
# With CI=true, a test that ctest reports as skipped fails its preset.
#
# Environment: MIXPREC_BUILD_ROOT   build folders go to $MIXPREC_BUILD_ROOT/<preset> (default: out/build)
#              MIXPREC_JOBS         parallel build and test jobs (default: number of cores)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
./scripts/install-deps.sh

presets=("$@")
if [ "${#presets[@]}" -eq 0 ]; then
  presets=(gcc)
fi
jobs=${MIXPREC_JOBS:-$(nproc)}
# Also used by the ctest cases that drive a build (headers/self_contained, compile_fail/*).
export CMAKE_BUILD_PARALLEL_LEVEL=$jobs
build_root=${MIXPREC_BUILD_ROOT:-$repo/out/build}

# Sanitizer reports: stack traces, and stop at the first error (also set by -fno-sanitize-recover).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_stack_use_after_return=1:strict_string_checks=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# Every preset runs even if an earlier one failed; the exit status says whether all passed.
run_preset() {
  local preset=$1 dir=$build_root/$1 start=$SECONDS
  echo "=== mixprec: preset '$preset' in $dir"
  cmake --preset "$preset" -B "$dir" || return 1
  cmake --build "$dir" || return 1
  echo "=== mixprec: preset '$preset' built in $((SECONDS - start)) s"
  local log=$dir/ctest.log
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$jobs" 2>&1 | tee "$log" || return 1
  # A test that cannot run here is reported as skipped (tests/CMakeLists.txt). In CI every test must
  # run: a skipped one fails the preset.
  if [ "${CI:-}" = "true" ] && grep -q '(Skipped)' "$log"; then
    echo "=== mixprec: preset '$preset': tests were skipped, and CI runs every test:" >&2
    grep '(Skipped)' "$log" >&2
    return 1
  fi
  echo "=== mixprec: preset '$preset' passed in $((SECONDS - start)) s"
}
failed=()
for preset in "${presets[@]}"; do
  run_preset "$preset" || failed+=("$preset")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "=== mixprec: FAILED: ${failed[*]}" >&2
  exit 1
fi
