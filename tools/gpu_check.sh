#!/usr/bin/env bash
# One call on a GPU machine (CUDA, cuBLAS, NCCL; no MPI, no HDF5, no network needed): configures
# the core-only CUDA build, builds the GPU tests and layertap_bench, runs `ctest -L gpu`, then the
# benchmark (Llama-3.1-8B shapes, 8k and 16k-token batches, 4 capture points). Everything goes to
# $OUT/gpu_check.log (OUT defaults to ./gpu-check-out); a summary is printed last. Each stage runs
# under `timeout` against one deadline, so the whole check ends within 8 minutes.
#
#   bash tools/gpu_check.sh                        # from the repository root
#   OUT=/tmp/out BUILD_DIR=build-gpu JOBS=16 bash tools/gpu_check.sh
#
# Needs no apt or pip: only what the CUDA build itself needs (cmake, a C++20 compiler, nvcc, and
# the compute core's OpenBLAS, OpenSSL, nlohmann_json and GoogleTest development files).
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-./gpu-check-out}
BUILD=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-16}
ARCH=${CUDA_ARCH:-90-real}
BUDGET_S=${BUDGET_S:-470}  # the whole script, with 10 s to spare under 8 minutes
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
export BENCH_TXT="$OUT/bench.txt"
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

START=$(date +%s)
DEADLINE=$((START + BUDGET_S))
declare -a SUMMARY=()
OVERALL=0

# stage NAME CAP_SECONDS COMMAND...: runs COMMAND under timeout min(CAP, time left); records the result.
stage() {
  local name=$1 cap=$2
  shift 2
  local left=$((DEADLINE - $(date +%s)))
  local limit=$((cap < left ? cap : left))
  if ((limit < 5)); then
    SUMMARY+=("$(printf '%-10s SKIPPED (out of time)' "$name")")
    OVERALL=1
    return 1
  fi
  echo
  echo "=== $name (limit ${limit} s): $*"
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  local took=$(($(date +%s) - t0))
  local verdict=ok
  if ((rc == 124 || rc == 137)); then
    verdict="TIMED OUT after ${limit} s"
  elif ((rc != 0)); then
    verdict="FAILED (exit $rc)"
  fi
  [[ $verdict == ok ]] || OVERALL=1
  SUMMARY+=("$(printf '%-10s %-28s %4d s' "$name" "$verdict" "$took")")
  return $rc
}

echo "layertap GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "--- machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,temperature.gpu --format=csv 2>&1 ||
  echo "nvidia-smi: not available"
nvcc --version 2>&1 | tail -n 1 || echo "nvcc: not on PATH"
cmake --version | head -n 1
echo "cores: $(nproc)"

GENERATOR=()
if [[ ! -f "$BUILD/CMakeCache.txt" ]] && command -v ninja >/dev/null; then GENERATOR=(-G Ninja); fi

# NCCL: cmake/Cuda.cmake looks in the CUDA toolkit. Where NCCL comes only with PyTorch's wheel
# (nvidia-nccl-cu13: include/nccl.h and lib/libnccl.so.2, no libnccl.so), point it there.
EXTRA=()
cuda_root=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
if ! ls "$cuda_root"/include/nccl.h "$cuda_root"/targets/*/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1; then
  nccl_py=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  nccl_lib=$(ls "$nccl_py"/lib/libnccl.so* 2>/dev/null | head -n 1)
  if [[ -n $nccl_py && -f $nccl_py/include/nccl.h && -n $nccl_lib ]]; then
    echo "NCCL from the Python wheel: $nccl_lib"
    EXTRA+=(-DLAYERTAP_NCCL_INCLUDE_DIR="$nccl_py/include" -DLAYERTAP_NCCL_LIBRARY="$nccl_lib")
  fi
fi
# What the compute core's configure will need (a missing one fails the configure stage below).
for header in cblas.h nlohmann/json.hpp openssl/sha.h gtest/gtest.h; do
  found=$(find /usr/include /usr/local/include -path "*/$header" -not -path "*/node/*" -print -quit 2>/dev/null)
  echo "header $header: ${found:-MISSING}"
done

built=0
if stage configure 90 cmake -S . -B "$BUILD" "${GENERATOR[@]}" -DLAYERTAP_CORE_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${EXTRA[@]}"; then
  if stage build 240 cmake --build "$BUILD" -j "$JOBS" --target gpu_tests layertap_bench; then built=1; fi
else
  echo "configure failed: the core-only build needs cmake >= 3.25, nvcc, and the development files of"
  echo "OpenBLAS (cblas.h), OpenSSL, nlohmann_json and GoogleTest; see the messages above."
fi

if ((built)); then
  stage ctest 150 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 140
  cp "$BUILD/Testing/Temporary/LastTest.log" "$OUT/ctest_last.log" 2>/dev/null
  # Whatever time is left goes to the benchmark (it needs ~1 minute on an H200). `stage` must not
  # run in a pipeline (a subshell would lose its summary line), so the tee runs inside.
  stage bench 300 bash -c 'set -o pipefail; "$@" | tee "$BENCH_TXT"' bench "$BUILD/src/layertap_bench" \
    --synthetic llama3-8b --tokens 8192,16384 --points 4 --iters 5
fi

echo
echo "=== summary ($(($(date +%s) - START)) s of ${BUDGET_S} s; log: $LOG)"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
grep -hE "tests passed|tests failed" "$LOG" | tail -n 1 | sed 's/^/  ctest: /'
skipped=$(grep -cE "^[[:space:]]+[0-9]+ - gpu\..* \(Skipped\)" "$LOG")
((skipped > 0)) && echo "  ctest: $skipped test(s) SKIPPED (no GPU visible, or too few GPUs for nccl_comm)"
if [[ -f "$BENCH_TXT" ]]; then
  echo "  benchmark:"
  grep -E "^ +tokens \||^ +[0-9]+ \|" "$BENCH_TXT" | sed 's/^/    /'
fi
echo "  result: $([[ $OVERALL == 0 ]] && echo PASS || echo FAIL)"
exit "$OVERALL"
