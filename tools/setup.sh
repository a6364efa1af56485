#!/usr/bin/env bash
# First of the README's two commands: on a fresh Debian/Ubuntu machine (as
# root) install what is missing (OpenMPI included, for the optional
# ring-attention component), build FlashCL, and run `flashcl bench` on the
# default OpenCL device, then make the Python package's virtual environment
# (.venv, tools/setup_python.sh). Extra CMake arguments: FLASHCL_CMAKE_ARGS. Skip the
# benchmark with FLASHCL_SETUP_NO_BENCH=1, the Python part with FLASHCL_SETUP_NO_PYTHON=1.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake make gcc libc6-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
          pocl-opencl-icd clinfo oclgrind
          clang libclang-rt-dev  # clang + compiler-rt: the sanitizer and libFuzzer build in .ci/run
          clang-15               # the offline AMD/SPIR compile checks (POCL depends on it already)
          g++ python3 python3-venv python3-dev   # the Python package (python/: a C++ extension)
          libopenmpi-dev openmpi-bin)            # the optional MPI component (ring attention, ctest -L mpi)
if command -v dpkg >/dev/null 2>&1; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "setup: missing packages: ${missing[*]} (run as root, or install them)" >&2
      exit 1
    fi
    echo "setup: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# shellcheck disable=SC2086
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${FLASHCL_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"

if [ "${FLASHCL_SETUP_NO_BENCH:-0}" != 1 ]; then
  build/tools/flashcl bench
fi

if [ "${FLASHCL_SETUP_NO_PYTHON:-0}" != 1 ]; then
  bash tools/setup_python.sh
fi
