#!/usr/bin/env bash
# Planning at scale: the time to index and plan a large dataset and the peak memory of each rank,
# at np 1 and 4, on a synthetic 1M-sample, 1k-token-average file (made once, ~7 GB, by
# make_synthetic_dataset.py). Each run starts for real on the tiny shipped model, is stopped with
# SIGTERM as soon as its weights are loaded (so every rank has parsed its own samples), and reports
# from its log: indexing time, time until the first batch, and each rank's peak memory.
#   tools/bench_planning.sh BUILD_DIR [WORK_DIR]   (WORK_DIR default /tmp/layertap-bench-planning)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
work=${2:-/tmp/layertap-bench-planning}
mkdir -p "$work"
data=$work/1m.jsonl
[ -s "$data" ] || /usr/bin/python3 "$root/tools/make_synthetic_dataset.py" "$data" --samples 1000000 --mean-tokens 1000 --vocab 160
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "dataset: $(du -h "$data" | cut -f1), $(wc -l < "$data") lines; $(nproc) cores"
for np in ${NPS:-1 4}; do
  log=$work/np$np.log
  mpirun --oversubscribe -np "$np" "$build/src/cli/layertap" extract --model "$root/tests/fixtures/models/llama" \
    --data "$data" --out "$work/out-np$np" --overwrite --ignore-free-space --capture final > "$log" 2>&1 &
  pid=$!
  until grep -q "weights loaded" "$log" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null; do sleep 1; done
  # SIGTERM to the ranks themselves: each stops after the batch in flight and logs its peak memory.
  # (not mpirun, whose command line also names them: it would kill them without their report).
  for p in $(pgrep -f "layertap extract.*out-np$np"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = layertap ] && kill -TERM "$p"
  done
  wait "$pid" || true
  echo "np $np:"
  grep -E "indexed in|weights loaded in|peak memory" "$log" | sed 's/^/  /'
done
