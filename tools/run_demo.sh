#!/usr/bin/env bash
# Installs dependencies, builds layertap and runs the main job on the tiny Llama model and the
# 200-sample dataset shipped in tests/fixtures, capturing four points (embedding output, input of
# layer 2, last layer output before the final norm, after the final norm), then inspects the
# output. Output directory: ${OUT:-out/demo}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)" --target layertap
out=${OUT:-out/demo}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 1 "$build/src/cli/layertap" extract \
  --model tests/fixtures/models/llama \
  --data tests/fixtures/data/demo.jsonl \
  --out "$out" --capture 0,2,last,final --overwrite
"$build/src/cli/layertap" inspect "$out"
