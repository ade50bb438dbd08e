#!/usr/bin/env bash
# Compile-time benchmark: how long a user's translation unit takes to compile, and how much memory,
# beside the floor (<string> + <vector>) and a TU with one Eigen product, measured in the same run.
#
#   ./scripts/compile-benchmark.sh            every TU of benchmarks/compile_time/, 3 rounds
#   ./scripts/compile-benchmark.sh 5 core     5 rounds of floor, eigen_product and core only
#
# Each round compiles every TU once, in turn (interleaved, so that a change in the machine's load
# reaches all of them alike); the table gives the median wall time, the largest peak memory, and the
# ratios of the median to the floor's and to the Eigen TU's. Compiler: $CXX (default g++), flags as a
# user's optimised build: -std=c++20 -O2, mixprec's include/ and Eigen as include paths; extra flags
# in $MIXPREC_COMPILE_FLAGS. Each mixprec TU is compiled in each mode of $MIXPREC_COMPILE_MODES
# (default "header-only compiled"): header-only, and compiled (-DMIXPREC_COMPILED, as linking
# mixprec::compiled defines it: the kernels' instantiations are the library's, kernels/compiled.hpp).
# Needs GNU time (/usr/bin/time, Debian package `time`).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
[ -x /usr/bin/time ] || ./scripts/install-deps.sh time
rounds=${1:-3}
shift || true
tus=("$@")
if [ "${#tus[@]}" -eq 0 ]; then
  mapfile -t tus < <(cd benchmarks/compile_time && ls ./*.cpp | sed 's|^\./||; s|\.cpp$||' | grep -v -x -e floor -e eigen_product)
fi
read -r -a modes <<<"${MIXPREC_COMPILE_MODES:-header-only compiled}"
# Each entry: a TU and its mode ("" for the two baselines, which include no mixprec header).
entries=("floor:" "eigen_product:")
for tu in "${tus[@]}"; do
  for mode in "${modes[@]}"; do entries+=("$tu:$mode"); done
done
cxx=${CXX:-g++}
# shellcheck disable=SC2206
flags=(-std=c++20 -O2 -Iinclude -isystem /usr/include/eigen3 ${MIXPREC_COMPILE_FLAGS:-})
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for ((r = 1; r <= rounds; ++r)); do
  for entry in "${entries[@]}"; do
    tu=${entry%%:*}
    mode=${entry#*:}
    extra=()
    [ "$mode" = compiled ] && extra=(-DMIXPREC_COMPILED)
    /usr/bin/time -f "%e %M" -o "$out/$tu.$mode.time.$r" "$cxx" "${flags[@]}" "${extra[@]}" \
      -c "benchmarks/compile_time/$tu.cpp" -o "$out/$tu.o"
  done
done

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
family=$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
echo "CPU: $cpu (family $family), $(nproc) cores; $("$cxx" --version | head -1); flags: ${flags[*]}; $rounds rounds"
echo
echo "| translation unit | mode | wall (median) | × floor | × Eigen product | peak memory |"
echo "|---|---|---|---|---|---|"
floor=$(cat "$out"/floor..time.* | cut -d' ' -f1 | median)
eigen=$(cat "$out"/eigen_product..time.* | cut -d' ' -f1 | median)
for entry in "${entries[@]}"; do
  tu=${entry%%:*}
  mode=${entry#*:}
  wall=$(cat "$out/$tu.$mode".time.* | cut -d' ' -f1 | median)
  peak=$(cat "$out/$tu.$mode".time.* | cut -d' ' -f2 | sort -n | tail -1)
  awk -v tu="$tu" -v mode="${mode:-}" -v w="$wall" -v f="$floor" -v e="$eigen" -v m="$peak" \
    'BEGIN {printf "| %s | %s | %.2f s | %.1f× | %.2f× | %d MB |\n", tu, mode, w, w / f, w / e, m / 1024}'
done
