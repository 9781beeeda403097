#!/usr/bin/env bash
# Peak resident memory per rank of `layertap extract` on a synthetic DeepSeek-V3-shaped MoE
# (tools/make_synthetic_moe.py) at TP 1, 2 and 4, with whole experts per rank and with every
# expert sliced. Prints one line per layout; reads the manifest's run.peak_rss_mib_max.
#   tools/bench_moe_memory.sh BUILD_DIR [WORK_DIR]
set -euo pipefail
build=${1:?usage: bench_moe_memory.sh BUILD_DIR [WORK_DIR]}
work=${2:-$(mktemp -d)}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-/usr/bin/python3}  # Debian's, with numpy
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
[ -f "$work/model/model.safetensors" ] || "$python" "$here/tools/make_synthetic_moe.py" "$work/model"
for tp in 1 2 4; do
  for split in experts intermediate; do
    [ "$tp" = 1 ] && [ "$split" = intermediate ] && continue
    out="$work/out-$tp-$split"
    mpirun --oversubscribe -np "$tp" "$build/src/cli/layertap" extract --model "$work/model" \
      --data "$here/tests/fixtures/data/golden.jsonl" --out "$out" --tp "$tp" --moe-split "$split" --capture 0,2,last,final \
      --overwrite --log-level warning
    "$python" -c "import json,sys; r=json.load(open('$out/manifest.json'))['run']; \
print(f'tp {r[\"tp\"]} --moe-split {r[\"moe_split\"]:12s} peak RSS per rank (max over ranks) {r[\"peak_rss_mib_max\"]:.0f} MiB')"
  done
done
