#!/usr/bin/env bash
# Installs the Debian packages mixprec needs (Debian 12 "bookworm" names), only those missing,
# with apt-get (non-interactive; through sudo when not run as root).
#
#   ./scripts/install-deps.sh              everything: compilers, Eigen, xtensor, nlohmann-json, Catch2, Benchmark,
#                                          Open MPI (mixprec::distributed and its tests)
#   ./scripts/install-deps.sh pkg...       just these packages
set -euo pipefail

if [ "$#" -gt 0 ]; then
  packages=("$@")
else
  # make: CMake's default generator. g++ 12 and clang 14 are bookworm's defaults; libclang-rt-14-dev
  # holds Clang's libFuzzer and sanitizer runtimes (the fuzz preset).
  packages=(cmake make g++ clang libclang-rt-14-dev libeigen3-dev xtensor-dev nlohmann-json3-dev catch2 libbenchmark-dev
            libopenmpi-dev openmpi-bin)
fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null; then
  echo "error: missing packages (${missing[*]}) and no apt-get: install them by hand (see README.md, Requirements)." >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "error: missing packages (${missing[*]}); run as root or install sudo." >&2
    exit 1
  fi
  sudo=(sudo)
fi
echo "Installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
