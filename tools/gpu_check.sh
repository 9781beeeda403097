#!/usr/bin/env bash
# One call on a GPU machine (CUDA, cuBLAS, NCCL; no MPI, no HDF5, no network needed): configures
# the core-only CUDA build, builds the GPU tests and layertap_bench, runs `ctest -L gpu`, then the
# benchmarks: Llama-3.1-8B shapes (8k and 16k-token batches, 4 capture points), one rank's share of
# Kimi-K2.5 on 8 GPUs (--tp-shard 8: INT4 experts packed on the device, uniform and Zipf routing,
# the 8-GPU projection), per-kernel times (Nsight Compute, when `ncu` is there) and Qwen3-30B-A3B
# whole on one GPU, and the cost report's projection of the same configurations for this card (a
# simulated-GPU build of layertap_bench, `--project`), printed beside the measured figures.
# Everything goes to $OUT/gpu_check.log
# (OUT defaults to ./gpu-check-out), each benchmark's output also to its own file; a summary is
# printed last. Each stage runs under `timeout` against one deadline, so the whole check ends
# within 8 minutes.
#
#   bash tools/gpu_check.sh                        # from the repository root
#   OUT=/tmp/out BUILD_DIR=build-gpu JOBS=16 bash tools/gpu_check.sh
#
# Needs no apt or pip: only cmake, a C++20 compiler and nvcc. The compute core's OpenBLAS, OpenSSL,
# nlohmann_json and GoogleTest development files come from the machine where it has them, else
# from .gpu-deps/ (Debian packages fetched beforehand by `bash tools/gpu_deps.sh` where apt works,
# carried along: run(command="bash tools/gpu_check.sh", carry=[".gpu-deps"])), unpacked into
# DEPS_ROOT (/tmp/gpu-deps-root), never into /.
set -uo pipefail
cd "$(dirname "$0")/.."

export OUT=${OUT:-./gpu-check-out}
BUILD=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-16}
ARCH=${CUDA_ARCH:-90-real}
BUDGET_S=${BUDGET_S:-470}  # the whole script, with 10 s to spare under 8 minutes
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
export BENCH_TXT="$OUT/bench.txt" BENCH_KIMI_TXT="$OUT/bench_kimi_k2.5.txt" BENCH_QWEN_TXT="$OUT/bench_qwen3_30b_a3b.txt"
export BENCH_KIMI_EXPAND_TXT="$OUT/bench_kimi_k2.5_expand.txt" NCU_DIR="${NCU_DIR:-/tmp/gpu-check-ncu}"
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

# The tree that travelled may differ from its HEAD (a device copy of a working tree): say so.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
git diff --quiet HEAD 2>/dev/null || commit="$commit with uncommitted changes"
echo "layertap GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit"
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
# Development files a bare GPU image lacks (OpenBLAS, OpenSSL, nlohmann_json, GoogleTest) come as
# Debian packages that tools/gpu_deps.sh downloaded into .gpu-deps (the device call carries it).
# Each one the machine lacks (a compile-and-link probe with its own compiler) is unpacked into a
# private prefix, never into /, and CMake is pointed at it; what the machine has is used as is.
# OpenBLAS and libcrypto are linked statically from the packages' .a files: nothing of the prefix
# is needed at run time (LD_LIBRARY_PATH is set to it all the same).
DEPS_DIR=${DEPS_DIR:-.gpu-deps}
DEPS_ROOT=${DEPS_ROOT:-/tmp/gpu-deps-root}
probe_cxx=${CXX:-$(command -v c++ || command -v g++ || echo c++)}
MA=$("$probe_cxx" -print-multiarch 2>/dev/null)
MA=${MA:-x86_64-linux-gnu}
probe() { # probe SOURCE [LINK ARGS...]: do this machine's compiler and default paths build SOURCE?
  local src=$1 bin=/tmp/gpu-deps-probe.$$
  shift
  printf '%b\n' "$src" | "$probe_cxx" -std=c++17 -x c++ - -x none -o "$bin" "$@" >/dev/null 2>&1
  local rc=$?
  rm -f "$bin"
  return $rc
}
unpack() { # unpack PACKAGE: its .deb from DEPS_DIR into DEPS_ROOT
  local deb
  deb=$(ls "$DEPS_DIR/$1"_*.deb 2>/dev/null | head -n 1)
  [[ -n $deb ]] || { echo "deps: $1 is not in $DEPS_DIR (run tools/gpu_deps.sh)"; return 1; }
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$DEPS_ROOT"
  else # ar + tar where dpkg is missing
    local t member abs
    t=$(mktemp -d)
    abs=$(realpath "$deb")
    member=$(ar t "$abs" | grep '^data\.tar')
    (cd "$t" && ar x "$abs" "$member") && tar -xf "$t/$member" -C "$DEPS_ROOT"
    rm -rf "$t"
  fi
}
json_config=$(ls /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
  /usr/lib/*/cmake/nlohmann_json/nlohmann_jsonConfig.cmake /usr/lib*/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
  /usr/local/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake \
  /usr/local/lib*/cmake/nlohmann_json/nlohmann_jsonConfig.cmake 2>/dev/null | head -n 1)
declare -A HAVE=()
probe '#include <cblas.h>\nint main() { openblas_set_num_threads(1); return 0; }' -lopenblas && HAVE[openblas]=1
probe '#include <openssl/evp.h>\nint main() { return EVP_sha256() ? 0 : 1; }' -lcrypto && HAVE[openssl]=1
[[ -n $json_config ]] && probe '#include <nlohmann/json.hpp>\nint main() { return nlohmann::json(1).get<int>() - 1; }' &&
  HAVE[nlohmann_json]=1
probe '#include <gtest/gtest.h>\nTEST(a, b) {}' -lgtest -lgtest_main -pthread && HAVE[gtest]=1
probe '#include <re2/re2.h>\nint main() { return RE2::FullMatch("ab", "a.") ? 0 : 1; }' -lre2 -pthread && HAVE[re2]=1
probe '#include <boost/program_options.hpp>\nint main() { boost::program_options::options_description d; return 0; }' \
  -lboost_program_options && HAVE[boost]=1
declare -a DEPS_CMAKE=() DEPS_INC=()
deps_used=()
if [[ -d $DEPS_DIR ]]; then
  rm -rf "$DEPS_ROOT"
  mkdir -p "$DEPS_ROOT"
fi
R=$DEPS_ROOT/usr
for dep in openblas openssl nlohmann_json gtest re2 boost; do
  if [[ -n ${HAVE[$dep]:-} ]]; then
    echo "deps: $dep from this machine"
    continue
  fi
  if [[ ! -d $DEPS_DIR ]]; then
    echo "deps: $dep MISSING on this machine and no $DEPS_DIR (run tools/gpu_deps.sh where apt works; carry it)"
    continue
  fi
  case $dep in
    openblas)
      unpack libopenblas-pthread-dev || continue
      DEPS_INC+=("$R/include/$MA/openblas-pthread")
      DEPS_CMAKE+=(-DBLA_STATIC=ON "-DBLAS_openblas_LIBRARY=$R/lib/$MA/openblas-pthread/libopenblas.a;-lpthread;-lm")
      ;;
    openssl)
      unpack libssl-dev || continue
      DEPS_INC+=("$R/include/$MA") # openssl/configuration.h
      DEPS_CMAKE+=(-DOPENSSL_USE_STATIC_LIBS=TRUE -DOPENSSL_ROOT_DIR="$R" -DOPENSSL_INCLUDE_DIR="$R/include"
        -DOPENSSL_CRYPTO_LIBRARY="$R/lib/$MA/libcrypto.a" -DOPENSSL_SSL_LIBRARY="$R/lib/$MA/libssl.a")
      ;;
    nlohmann_json)
      unpack nlohmann-json3-dev || continue
      DEPS_CMAKE+=(-Dnlohmann_json_DIR="$R/share/cmake/nlohmann_json")
      ;;
    gtest)
      unpack libgtest-dev || continue
      DEPS_CMAKE+=(-DGTest_DIR="$R/lib/$MA/cmake/GTest")
      ;;
    re2)
      unpack libre2-dev || continue
      DEPS_CMAKE+=(-DRE2_INCLUDE_DIR="$R/include" -DRE2_LIBRARY="$R/lib/$MA/libre2.a")
      ;;
    boost)
      { unpack libboost1.74-dev && unpack libboost-program-options1.74-dev; } || continue
      DEPS_CMAKE+=(-DBoost_DIR="$R/lib/$MA/cmake/Boost-1.74.0" -DBoost_USE_STATIC_LIBS=ON)
      ;;
  esac
  deps_used+=("$dep")
  echo "deps: $dep from $DEPS_DIR (unpacked into $DEPS_ROOT)"
done
if ((${#deps_used[@]})); then
  inc=$(IFS=';'; echo "${DEPS_INC[*]:-}")
  [[ -n $inc ]] && DEPS_CMAKE+=(-DCMAKE_C_STANDARD_INCLUDE_DIRECTORIES="$inc"
    -DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES="$inc" -DCMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES="$inc")
  export LD_LIBRARY_PATH="$R/lib/$MA:$R/lib/$MA/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  EXTRA+=("${DEPS_CMAKE[@]}")
fi

built=0
if stage configure 90 cmake -S . -B "$BUILD" "${GENERATOR[@]}" -DLAYERTAP_CORE_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${EXTRA[@]}"; then
  if stage build "${BUILD_CAP_S:-240}" cmake --build "$BUILD" -j "$JOBS" --target gpu_tests layertap_bench; then built=1; fi
else
  echo "configure failed: the core-only build needs cmake >= 3.25, nvcc, and the development files of"
  echo "OpenBLAS (cblas.h), OpenSSL, nlohmann_json, GoogleTest and RE2 (from this machine, or carried in"
  echo ".gpu-deps by tools/gpu_deps.sh); see the 'deps:' lines and the messages above."
fi

if ((built)); then
  stage ctest 170 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 160
  cp "$BUILD/Testing/Temporary/LastTest.log" "$OUT/ctest_last.log" 2>/dev/null
  # The benchmarks (about a minute each on an H200). `stage` must not run in a pipeline (a subshell
  # would lose its summary line), so the tee runs inside.
  stage bench 120 bash -c 'set -o pipefail; "$@" | tee "$BENCH_TXT"' bench "$BUILD/src/layertap_bench" \
    --synthetic llama3-8b --tokens 8192,16384 --points 4 --iters 5
  stage kimi-k2.5 150 bash -c 'set -o pipefail; "$@" | tee "$BENCH_KIMI_TXT"' bench "$BUILD/src/layertap_bench" \
    --synthetic kimi-k2.5 --tp-shard 8 --tokens 8192 --points 4 --iters 3 --routing uniform,zipf
  # The reference path of the MoE experts (expanded to bf16, one cuBLASLt product each, a host
  # wait per layer), timed and checked the same way: the grouped path above is held to it.
  stage kimi-k2.5-expand 120 bash -c 'set -o pipefail; "$@" | tee "$BENCH_KIMI_EXPAND_TXT"' bench \
    "$BUILD/src/layertap_bench" --synthetic kimi-k2.5 --tp-shard 8 --tokens 8192 --points 4 --iters 3 \
    --routing uniform --expert-gemm expand
  # Per-kernel times: Nsight Compute replays each kernel of the first forward (no capture) of a
  # 3-layer build (eagle3 needs 3; the random weight fills skipped by name), Llama-3.1-8B shapes
  # and Kimi-K2.5's rank share (layer 0 dense, then MoE) at 8192 tokens; tools/kernel_times.py sums
  # them by kernel. Without the reference check, whose forwards would come first (the benchmark
  # stages above run it).
  if command -v ncu >/dev/null; then
    stage kernels 150 bash -c 'set -e
      prof() { ncu --csv --print-units base --clock-control none --metrics gpu__time_duration.sum \
        -k "regex:^(?!fill_)" --launch-count "$2" --log-file "$NCU_DIR/ncu_$1.csv" "${@:3}" >/dev/null; }
      mkdir -p "$NCU_DIR"
      prof llama3-8b 32 "$0" --synthetic llama3-8b --layers 3 --tokens 8192 --points 4 --iters 1 --warmup 1 \
        --check-tokens 0
      prof kimi-k2.5 400 "$0" --synthetic kimi-k2.5 --tp-shard 8 --layers 3 --tokens 8192 --points 4 --iters 1 \
        --warmup 1 --routing uniform --check-tokens 0
      python3 tools/kernel_times.py "$NCU_DIR"/ncu_llama3-8b.csv "$NCU_DIR"/ncu_kimi-k2.5.csv >"$OUT/kernel_times.txt"; cat "$OUT/kernel_times.txt"' \
      "$BUILD/src/layertap_bench"
  else
    echo "ncu not on PATH: no per-kernel times"
  fi
  # The cost report's projection of the same configurations for this card (a model, built with
  # the simulated GPU, which records each forward's calls without running them), printed in the
  # summary beside what was measured, so that its assumptions can be corrected from this run.
  CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  case "$CARD" in
    *H200*) CARD=h200 ;; *H100*) CARD=h100 ;; *B200*) CARD=b200 ;; *"RTX PRO 6000"*) CARD=rtx-pro-6000 ;; *) CARD=h200 ;;
  esac
  export CARD JOBS PROJECTION_TXT="$OUT/projection.txt"
  stage projection 150 bash -c 'set -e
    cmake -S . -B "$0-sim" "${@:1}" -DLAYERTAP_CORE_ONLY=ON -DLAYERTAP_CUDA_SIM=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$0-sim" -j "$JOBS" --target layertap_bench >/dev/null
    { "$0-sim/src/layertap_bench" --synthetic llama3-8b --tokens 8192,16384 --points 4 --project "$CARD"
      "$0-sim/src/layertap_bench" --synthetic kimi-k2.5 --tp-shard 8 --tokens 8192 --points 4 --project "$CARD"
    } >"$PROJECTION_TXT"' "$BUILD" "${GENERATOR[@]}" "${EXTRA[@]}"
  stage qwen3-moe 100 bash -c 'set -o pipefail; "$@" | tee "$BENCH_QWEN_TXT"' bench "$BUILD/src/layertap_bench" \
    --synthetic qwen3-30b-a3b --tokens 8192 --points 4 --iters 3 --routing uniform,zipf
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
for f in "$BENCH_KIMI_TXT" "$BENCH_KIMI_EXPAND_TXT" "$BENCH_QWEN_TXT"; do
  grep -qE "^ (per-layer|projection) \|" "$f" 2>/dev/null || continue
  echo "  $(basename "$f" .txt):"
  grep -E "^ (per-layer|projection) \|" "$f" | sed 's/^/    /'
done
if [[ -f "$PROJECTION_TXT" ]]; then
  echo "  projected on $CARD by the cost report (a model, not a measurement; beside the measured figures above):"
  grep -E "^ projected on|^ +(MoE layer|dense layer|after the last|GPU idle|cuBLASLt|all-reduces|int4|route)" \
    "$PROJECTION_TXT" | head -n 40 | sed 's/^/    /'
fi
echo "  result: $([[ $OVERALL == 0 ]] && echo PASS || echo FAIL)"
exit "$OVERALL"
