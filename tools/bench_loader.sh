#!/usr/bin/env bash
# Loader throughput against a raw sequential read (dd, 16 MiB blocks) of the same files on the same
# disk, same run:
# a real (non-sparse) bf16 checkpoint of about SIZE_GB GB (Llama-3.1-70B's width, as many layers as
# fit, random finite values), the page cache dropped before every read, REPS repetitions
# interleaved. The loader is `extract --dry-run --backend cuda --read-weights` at --tp TP (default 1;
# TP=8 runs 8 ranks under mpirun, each reading its windows at once, as a node's ranks do): the CUDA
# backend's load plan and staging path (pread on 4 threads into the ring, every value checked) into
# host buffers. At TP > 1 half the bytes are column windows of row-parallel o_proj/down_proj, read
# in blocks of whole rows. Prints each repetition's GB/s (all ranks' bytes over the slowest rank's
# seconds), the read calls per rank, and the median loader/raw ratio.
#
#   bash tools/bench_loader.sh build/src/cli/layertap      # SIZE_GB=4 REPS=3 TP=8 DIR=/tmp/... override
set -euo pipefail
layertap=${1:?usage: bench_loader.sh path/to/layertap}
size_gb=${SIZE_GB:-4}
reps=${REPS:-3}
tp=${TP:-1}
dir=${DIR:-$(mktemp -d /tmp/layertap-bench-loader.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# 80 layers of Llama-3.1-70B are 141 GB: 1.7 GB per layer plus the 2.1 GB embedding at vocab 128256.
layers=$(python3 -c "print(max(1, int(($size_gb - 0.27) / 1.71)))")
# A DIR that already holds a filled checkpoint (from an earlier run) is reused.
if [ ! -f "$dir/model/.filled" ]; then
python3 "$here/make_shape_checkpoint.py" --arch llama-3.1-70b --layers "$layers" --vocab 16384 --out "$dir/model" \
  --force >/dev/null
# Fill every data byte with random finite bf16 values (the holes would read as zeros from the page cache).
/usr/bin/python3 - "$dir/model" <<'EOF'  # Debian's numpy
import json, struct, sys
from pathlib import Path
import numpy as np
rng = np.random.default_rng(1)
for f in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    with open(f, "r+b") as h:
        (n,) = struct.unpack("<Q", h.read(8))
        h.seek(8 + n)
        left = f.stat().st_size - 8 - n
        while left > 0:
            k = min(left, 1 << 28) // 2
            bits = (rng.standard_normal(k, dtype=np.float32) * 0.02).view(np.uint32) >> 16
            h.write(bits.astype(np.uint16).tobytes())
            left -= 2 * k
EOF
touch "$dir/model/.filled"
fi
echo '{"input_ids": [1, 2, 3]}' >"$dir/d.jsonl"
bytes=$(du -sb "$dir/model" | cut -f1)
echo "checkpoint: $layers layers, $(python3 -c "print(round($bytes / 1e9, 2))") GB in $(ls "$dir"/model/*.safetensors | wc -l) files at $dir"

drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || echo "(cannot drop the page cache: figures include cached reads)"; }
ratios=()
for r in $(seq "$reps"); do
  drop
  t0=$(date +%s.%N)
  for f in "$dir"/model/*.safetensors; do dd if="$f" of=/dev/null bs=16M status=none; done
  t1=$(date +%s.%N)
  raw=$(python3 -c "print($bytes / ($t1 - $t0) / 1e9)")
  drop
  lines=$(mpirun --oversubscribe -np "$tp" "$layertap" extract --model "$dir/model" --data "$dir/d.jsonl" \
    --out "$dir/out" --capture 0 --backend cuda --tp "$tp" --dry-run --gpu-memory 80 --read-weights \
    --calibrate-batches 0 --log-level error | grep -E "^ *rank [0-9]+: read")
  # "rank k: read ... in S s, G GB/s, ...": all ranks' bytes (G x S) over the slowest rank's S.
  loader=$(echo "$lines" | python3 -c "
import re, sys
r = [tuple(map(float, re.search(r' in ([0-9.]+) s, ([0-9.]+) GB/s', l).groups())) for l in sys.stdin]
print(round(sum(s * g for s, g in r) / max(s for s, _ in r), 3))")
  calls=$(echo "$lines" | sed -nE 's/.* ([0-9]+) read calls.*/\1/p' | sort -n | tail -1)
  ratio=$(python3 -c "print(round($loader / $raw, 3))")
  ratios+=("$ratio")
  echo "rep $r: raw sequential read $(python3 -c "print(round($raw, 2))") GB/s, loader $loader GB/s, ratio $ratio," \
    "at most ${calls:-?} read calls per rank"
  echo "$lines" | sed 's/^/       /'
done
echo "median loader/raw ratio: $(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(( (reps + 1) / 2 ))p")"
[ -n "${DIR:-}" ] || rm -rf "$dir"
