#!/usr/bin/env bash
# Regenerates the cost report's tables in docs/cost/ (docs/GPU.md quotes them): one rank's forward
# of Kimi-K2.5 and DeepSeek-V3 (FP8) at --tp-shard 8 and Llama-3.1-8B whole, recorded by the
# simulated GPU without running it and projected onto H200, B200 and RTX PRO 6000 Blackwell. A
# model, not a measurement. Seconds once layertap_bench is built (BUILD, default build-sim, a
# -DLAYERTAP_CUDA_SIM=ON build; configured and built here when missing).
#
#   bash tools/cost_tables.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-sim}
[[ -f "$BUILD/CMakeCache.txt" ]] || cmake -S . -B "$BUILD" -DLAYERTAP_CUDA_SIM=ON -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$(nproc)" --target layertap_bench
mkdir -p docs/cost
CARDS=h200,b200,rtx-pro-6000
run() {
  local name=$1
  shift
  echo "== $name: layertap_bench $*"
  LAYERTAP_SIM_DEVICES=1 "$BUILD/src/layertap_bench" "$@" --points 4 --project "$CARDS" >"docs/cost/$name.txt"
  sed -n '/^ projected tokens\/s/,/^$/p' "docs/cost/$name.txt"
}
run kimi-k2.5-tp8 --synthetic kimi-k2.5 --tp-shard 8 --tokens 8192,16384
run deepseek-v3-tp8 --synthetic deepseek-v3 --tp-shard 8 --tokens 8192,16384
run llama3-8b-tp1 --synthetic llama3-8b --tokens 8192,16384
