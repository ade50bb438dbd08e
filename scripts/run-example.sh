#!/usr/bin/env bash
# Builds and runs mixprec's main example, mixprec-llama (examples/llama, docs/example_llama.md): the
# pretrained llama2.c model stories260K assembled from mixprec's layers, run under float32, bfloat16,
# float16 and float64 policies, with the parity report of each against float32. On a Debian machine;
# installs missing Debian packages first (compiler, CMake, Eigen, xtensor).
#
#   ./scripts/run-example.sh                      the full report (Release build)
#   ./scripts/run-example.sh --policy bf16 ...    any mixprec-llama flags are passed on (see --help)
#
# The model is read from the repository's data/stories260K (or $MIXPREC_DATA_DIR/stories260K).
# Environment: MIXPREC_BUILD_ROOT   the build folder is $MIXPREC_BUILD_ROOT/example (default: out/build)
#              MIXPREC_JOBS         parallel build jobs (default: number of cores)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
./scripts/install-deps.sh cmake make g++ libeigen3-dev xtensor-dev nlohmann-json3-dev

dir=${MIXPREC_BUILD_ROOT:-$repo/out/build}/example
cmake --preset example -B "$dir" >/dev/null
cmake --build "$dir" --target mixprec_example_mixprec-llama -j "${MIXPREC_JOBS:-$(nproc)}" >/dev/null
"$dir/examples/llama/mixprec-llama" "$@"
