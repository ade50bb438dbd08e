#!/usr/bin/env bash
# Lints mixprec's own files, on a Debian machine (installs clang-format and clang-tidy if missing):
#   1. clang-format (.clang-format) in check mode on every C++ file git tracks: prints the files
#      that differ and fails; `clang-format -i <file>` fixes one;
#   2. clang-tidy (.clang-tidy) on every public header, through one TU that includes them all
#      (preset lint: Clang, MIXPREC_CLANG_TIDY=ON, target mixprec_clang_tidy; whether each header
#      compiles on its own is the GCC presets' ctest case headers/self_contained).
#
#   ./scripts/lint.sh            both
#   ./scripts/lint.sh format     clang-format only (seconds)
#
# Environment: MIXPREC_BUILD_ROOT (default: <repo>/out/build), MIXPREC_JOBS (default: cores).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
what=${1:-all}
./scripts/install-deps.sh cmake make clang clang-format clang-tidy libeigen3-dev xtensor-dev nlohmann-json3-dev catch2

failed=()
echo "=== lint: clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1)"
mapfile -t sources < <(git ls-files '*.hpp' '*.cpp' '*.cpp.in')
if ! clang-format --dry-run --Werror "${sources[@]}"; then
  echo "=== lint: clang-format: the files above differ from .clang-format (fix: clang-format -i <file>)" >&2
  failed+=("clang-format")
fi

if [ "$what" != "format" ]; then
  echo "=== lint: clang-tidy $(clang-tidy --version | grep -o 'version [0-9][0-9.]*' | head -1) on every public header"
  dir=${MIXPREC_BUILD_ROOT:-$repo/out/build}/lint
  if ! { cmake --preset lint -B "$dir" >/dev/null &&
         cmake --build "$dir" --target mixprec_clang_tidy -j "${MIXPREC_JOBS:-$(nproc)}" -- -k; }; then
    failed+=("clang-tidy")
  fi
fi

if [ "${#failed[@]}" -gt 0 ]; then
  echo "=== lint: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "=== lint: passed"
