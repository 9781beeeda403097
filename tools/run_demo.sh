#!/usr/bin/env bash
# Installs dependencies, builds layertap, installs it (PREFIX, default /usr/local: `layertap` on
# PATH), and runs the main job on the tiny Llama model and the 200-sample dataset shipped in
# tests/fixtures, capturing four points (embedding output, input of layer 2, last layer output
# before the final norm, after the final norm), then inspects the output (${OUT:-out/demo}).
# On a machine without a visible GPU it builds the CPU backend only (the demo runs there), unless
# LAYERTAP_WITH_CUDA=ON asks for the CUDA kernels too.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash tools/install_deps.sh
if [ -z "${LAYERTAP_WITH_CUDA:-}" ]; then
  LAYERTAP_WITH_CUDA=OFF
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then LAYERTAP_WITH_CUDA=ON; fi
fi
# Separate build directories, so that a CPU-only demo does not reconfigure the full build of
# tools/run_tests.sh (and the other way round).
build=${BUILD_DIR:-$([ "$LAYERTAP_WITH_CUDA" = ON ] && echo build || echo build-cpu)}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLAYERTAP_WITH_CUDA="$LAYERTAP_WITH_CUDA"
cmake --build "$build" -j "$(nproc)" --target layertap
cmake --install "$build" --prefix "${PREFIX:-/usr/local}" >/dev/null
echo "installed: ${PREFIX:-/usr/local}/bin/layertap (and layertap-prep, layertap-export, share/layertap/jobs)"
out=${OUT:-out/demo}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 1 "${PREFIX:-/usr/local}/bin/layertap" extract \
  --model tests/fixtures/models/llama \
  --data tests/fixtures/data/demo.jsonl \
  --out "$out" --capture 0,2,last,final --overwrite
"${PREFIX:-/usr/local}/bin/layertap" inspect "$out"
echo "demo: $(( $(date +%s) - t0 )) s"
