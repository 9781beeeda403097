#!/usr/bin/env bash
# Installs dependencies, builds layertap (with the CUDA kernels when nvcc is found) and runs every
# test: ctest (unit, golden, io, mpi, e2e, slurm; GPU tests report "Skipped" without a GPU), the
# Python package's tests in their pinned environment (which this creates: torch, transformers and
# the trainers, about 6 GB downloaded on the first run), then the sanitizer and fuzz job. Prints a
# per-stage time table at the end, also when a stage fails.
set -euo pipefail
cd "$(dirname "$0")/.."
stages=()
stage() {  # stage NAME COMMAND...: runs it, records its seconds
  local name=$1 t0
  shift
  t0=$(date +%s)
  local rc=0
  "$@" || rc=$?
  stages+=("$(printf '%-22s %6d s%s' "$name" $(( $(date +%s) - t0 )) "$([ $rc = 0 ] || echo "  FAILED ($rc)")")")
  return $rc
}
report() {
  local rc=$?
  echo "--- stage times (exit $rc)"
  printf '%s\n' "${stages[@]}"
  echo "total                  $(( $(date +%s) - start )) s"
}
start=$(date +%s)
trap report EXIT
build=${BUILD_DIR:-build}
stage deps bash tools/install_deps.sh
stage configure cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
stage build cmake --build "$build" -j "$(nproc)"
# Open MPI refuses root unless told; CI and containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
stage ctest ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
# The Python package (python/: layertap-prep, layertap.data, layertap-export checked through the
# trainers' own loaders): pinned venv at ${LAYERTAP_PYENV:-/opt/layertap-pyenv}, then pytest.
LAYERTAP_BIN="$(cd "$build" && pwd)/src/cli/layertap"
export LAYERTAP_BIN
stage python bash tools/python_env.sh --test
# ASan/UBSan run of the unit, golden, io, e2e and mpi tests, then the libFuzzer targets (docs/TESTING.md).
stage sanitizers-fuzz bash tools/run_sanitizer_tests.sh
