#!/usr/bin/env bash
# Sanitizer job (CI runs it from tools/run_tests.sh; docs/TESTING.md explains it):
#  1. a build with AddressSanitizer + UBSan (LAYERTAP_SANITIZE=ON, GCC) in ${SAN_BUILD_DIR:-build-asan},
#     whose CUDA backend runs on the simulated GPU (LAYERTAP_CUDA_SIM=ON, when the CUDA toolkit's
#     headers are installed), and the unit, golden, io, e2e, mpi and gpu tests under it: ASan then
#     checks every kernel's memory accesses too;
#  2. the libFuzzer build (LAYERTAP_FUZZ=ON, clang) in ${FUZZ_BUILD_DIR:-build-fuzz}: every
#     committed reproducer (fuzz/regressions/) and seed (fuzz/corpus/) replayed, then each target
#     fuzzed for ${FUZZ_SECONDS:-15} s (FUZZ_SECONDS=0: replay only).
# Any sanitizer report, failed test or fuzzer crash makes the script exit non-zero (both parts run
# either way). From scratch on 2 cores (a fresh clone, 2026-12-06): 31 minutes (ASan build 6.3,
# unit/golden/io 0.5, e2e/mpi 8.4, gpu on the simulated GPU 13, fuzz build 1.3, fuzzing 4 x 15 s
# plus replays 2.4).
# SAN_SKIP_TESTS=1 or SAN_SKIP_FUZZ=1 runs one part only.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)

# Debian 12 packages beyond tools/install_deps.sh: clang and its compiler-rt (libFuzzer and the
# clang sanitizer runtimes live in libclang-rt-14-dev), llvm-symbolizer for readable stacks. GCC's
# ASan/UBSan runtimes (libasan8, libubsan1) come with g++.
bash tools/install_deps.sh
packages=(clang libclang-rt-14-dev llvm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Sanitizer settings, exported so that every process sees them: ctest, the test binaries, the
# Python e2e scripts and the layertap processes they start, mpirun and its ranks.
#  - UBSan halts on the first report (the code is also built with -fno-sanitize-recover=all).
#  - LeakSanitizer stays on; tools/lsan.supp suppresses only the one-time start-up allocations
#    of Open MPI, hwloc, libevent, PMIx and OpenBLAS (without it every MPI process exits 1 and
#    loses its buffered output). Open MPI unloads its components at MPI_Finalize and is built
#    without frame pointers, so the fast unwinder's allocation stacks end in <unknown module>:
#    for the processes that start MPI (the e2e and mpi labels) $asan_mpi adds
#    fast_unwind_on_malloc=0 with 30 frames, which reaches libmpi/libopen-rte (every malloc
#    gets slower, so the other labels keep the fast unwinder).
#  - intercept_tls_get_addr=0: GCC 12's runtime tracks dynamic TLS through its __tls_get_addr
#    interceptor and, for a block that a module Open MPI dlopens at MPI_Init holds in ASan's own
#    heap, reads a bogus range (0xc10-0x400001d12) from what it takes for glibc's chunk header;
#    LeakSanitizer's tracer then dies with "Tracer caught signal 11" at the exit of every process
#    that ran MPI_Init without mpirun (seen with glibc 2.36-9+deb12u14, here and in CI). Without
#    the interceptor LSan does not scan dynamic TLS; layertap has none of its own (its
#    thread_local variables are static TLS, scanned with every thread).
#  - Reports go to stderr, which ctest --output-on-failure and the e2e scripts print.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:intercept_tls_get_addr=0"
asan_mpi="$ASAN_OPTIONS:fast_unwind_on_malloc=0:malloc_context_size=30"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$root/tools/lsan.supp:print_suppressions=0"
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer || true)}
# Open MPI refuses root unless told; CI and containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

failed=()
start=$SECONDS

# ---- 1. ASan + UBSan build and tests -------------------------------------------------------
if [ "${SAN_SKIP_TESTS:-0}" != 1 ]; then
  san_build=${SAN_BUILD_DIR:-build-asan}
  # The simulated GPU needs only the CUDA toolkit's headers (nvcc is not used).
  sim=OFF
  [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime_api.h" ] && sim=ON
  gpu_targets=()
  [ "$sim" = ON ] && gpu_targets=(gpu_tests)
  # -O1 -g1: what ASan recommends, half the compile time of -O2 -g, line numbers in every report.
  cmake -S . -B "$san_build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAYERTAP_WITH_CUDA=OFF \
        -DLAYERTAP_CUDA_SIM="$sim" -DLAYERTAP_SANITIZE=ON -DLAYERTAP_BUILD_TESTS=ON \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1"
  # Only what the selected tests run (not the Slurm tests' inputs or the CUDA benchmark).
  if ! cmake --build "$san_build" -j "$jobs" \
         --target unit_tests golden_tests io_tests layertap test_collectives test_tp_golden "${gpu_targets[@]}"; then
    failed+=("ASan/UBSan build (${san_build})")
    SAN_SKIP_TESTS=1
  fi
  echo "sanitizer build: $((SECONDS - start)) s"
fi
if [ "${SAN_SKIP_TESTS:-0}" != 1 ]; then
  # The CPU labels see a machine without a GPU (the build's CUDA backend runs on the simulated
  # GPU, whose devices only the gpu-labelled tests ask for: LAYERTAP_SIM_DEVICES=4 in their ctest
  # environment).
  export LAYERTAP_SIM_DEVICES=0
  # Labels run: unit, golden, io (under a minute), then e2e (the CLI through the Python
  # scripts, including e2e_distributed/e2e_moe/e2e_resilience.*/e2e_hostile_inputs under mpirun)
  # and mpi (tests/mpi under mpirun): 8.4 minutes on 2 quiet cores (13 when shared with other
  # builds), the two e2e_resilience parts (side by side) the longest at about 5 each. Left out: slurm (a
  # throw-away Slurm cluster around the same binary the e2e tests run; munge/slurmd start-up
  # dominates it) and gpu (no CUDA in this build).
  t0=$SECONDS
  if ! ctest --test-dir "$san_build" --output-on-failure -j "$jobs" -L '^(unit|golden|io)$' -LE '^(slurm|gpu)$'; then
    failed+=("ASan/UBSan unit/golden/io tests (${san_build})")
  fi
  echo "sanitizer unit/golden/io tests: $((SECONDS - t0)) s"
  t0=$SECONDS
  if ! ASAN_OPTIONS="$asan_mpi" ctest --test-dir "$san_build" --output-on-failure -j "$jobs" \
         -L '^(e2e|mpi)$' -LE '^(slurm|gpu)$'; then
    failed+=("ASan/UBSan e2e/mpi tests (${san_build})")
  fi
  echo "sanitizer e2e/mpi tests: $((SECONDS - t0)) s"
  if [ "$sim" = ON ]; then
    # The GPU tests and the CUDA backend under mpirun, on the simulated GPU. Without
    # detect_stack_use_after_return: it gives every fiber (every CUDA thread) a fake stack, one
    # mapping per fiber switch, which makes a kernel test take tens of minutes.
    t0=$SECONDS
    if ! ASAN_OPTIONS="${ASAN_OPTIONS/detect_stack_use_after_return=1/detect_stack_use_after_return=0}" \
         ctest --test-dir "$san_build" --output-on-failure -j "$jobs" -L '^gpu$' -LE '^mpi$'; then
      failed+=("ASan/UBSan gpu tests on the simulated GPU (${san_build})")
    fi
    if ! ASAN_OPTIONS="${asan_mpi/detect_stack_use_after_return=1/detect_stack_use_after_return=0}" \
         ctest --test-dir "$san_build" --output-on-failure -j "$jobs" -L '^gpu$' -L '^mpi$'; then
      failed+=("ASan/UBSan gpu tests under mpirun on the simulated GPU (${san_build})")
    fi
    echo "sanitizer gpu tests (simulated GPU): $((SECONDS - t0)) s"
  fi
fi

# ---- 2. libFuzzer targets ------------------------------------------------------------------
if [ "${SAN_SKIP_FUZZ:-0}" != 1 ]; then
  fuzz_build=${FUZZ_BUILD_DIR:-build-fuzz}
  fuzz_seconds=${FUZZ_SECONDS:-15}
  t0=$SECONDS
  # CC/CXX are read on the first configure of a build directory only.
  CC=clang CXX=clang++ cmake -S . -B "$fuzz_build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAYERTAP_FUZZ=ON
  if ! cmake --build "$fuzz_build" -j "$jobs" --target fuzz_targets; then
    failed+=("fuzz build (${fuzz_build}, clang)")
    SAN_SKIP_FUZZ=1
  fi
  echo "fuzz build: $((SECONDS - t0)) s"
fi
if [ "${SAN_SKIP_FUZZ:-0}" != 1 ]; then
  # The fuzzers' own halting: libFuzzer stops at the first crash, leak, timeout or UBSan report.
  fuzz_asan="detect_leaks=1:halt_on_error=1:abort_on_error=0"
  for target in safetensors hf_config jsonl chunk_decode; do
    exe=$fuzz_build/fuzz/fuzz_$target
    artifacts=$fuzz_build/artifacts/$target
    work=$fuzz_build/corpus-work/$target  # new inputs found here; the committed corpus stays as is
    mkdir -p "$artifacts" "$work"
    inputs=()
    for f in fuzz/regressions/"$target"/* fuzz/corpus/"$target"/*; do
      [ -f "$f" ] && inputs+=("$f")
    done
    echo "== fuzz_$target: replaying ${#inputs[@]} committed inputs"
    if [ ${#inputs[@]} -gt 0 ] &&
       ! ASAN_OPTIONS="$fuzz_asan" "$exe" -rss_limit_mb=2048 -timeout=10 \
                                           -artifact_prefix="$artifacts/" "${inputs[@]}"; then
      failed+=("fuzz_$target replay")
      continue  # a known crash would stop the fuzzing run at once
    fi
    [ "$fuzz_seconds" -gt 0 ] || continue
    echo "== fuzz_$target: fuzzing for $fuzz_seconds s"
    if ! ASAN_OPTIONS="$fuzz_asan" "$exe" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 \
           -timeout=10 -print_final_stats=1 -dict="fuzz/dict/$target.dict" \
           -artifact_prefix="$artifacts/" "$work" "fuzz/corpus/$target"; then
      echo "fuzz_$target found a crash; reproducer in $artifacts/ (minimise it with" \
           "$exe -minimize_crash=1 -runs=10000 FILE and commit it to fuzz/regressions/$target/)"
      failed+=("fuzz_$target")
    fi
  done
  echo "fuzzing: $((SECONDS - t0)) s"
fi

echo "sanitizer job: $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "sanitizer job: OK"
