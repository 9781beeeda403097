#!/usr/bin/env python3
"""Per-rank device and host plans of the seed's jobs, without a GPU: full-size shape-only
checkpoints (tools/make_shape_checkpoint.py) planned by `layertap extract --dry-run --backend cuda
--gpu-memory G` under mpirun, for each card size and batch size. Prints a markdown table (the
fullest rank's device need, whether every rank fits, the largest batch that would fit on every
rank, the host plan of the writing rank and of the others) and, for comparison, the CPU backend's
float32 host figure per rank.

    python3 tools/bench_plan.py --layertap build/src/cli/layertap [--mpirun mpirun]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
TOOL = Path(__file__).with_name("make_shape_checkpoint.py")
CASES = [("kimi-k2.5", 8), ("deepseek-v3", 8), ("llama-3.1-70b", 8), ("llama-3.1-70b", 4)]


def plan(args, model, data, tp, tokens, card):
    cmd = [args.mpirun, "--oversubscribe", "-np", str(tp), args.layertap, "extract", "--model", str(model),
           "--data", str(data), "--out", str(data.parent / "out"), "--tp", str(tp), "--capture", "eagle3",
           "--backend", "cuda", "--dry-run", "--gpu-memory", str(card), "--calibrate-batches", "0",
           "--max-batch-tokens", str(tokens), "--log-level", "error"]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    device = re.findall(r"device +([0-9.]+) GiB of [0-9.]+ GiB: (fits|does NOT fit)(?: \(up to (\d+) tokens)?",
                        r.stdout)
    host = re.findall(r"host +([0-9.]+ \w+) \(", r.stdout)
    return device, host


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layertap", required=True)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--cards", default="96,141")
    p.add_argument("--tokens", default="8192,16384")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="layertap-bench-plan-"))
    data = tmp / "d.jsonl"
    data.write_text(json.dumps({"input_ids": [1, 2, 3, 4]}) + "\n")
    print("| model | tp | tokens | card GiB | device, fullest rank | fits | largest batch | host, writer / other | "
          "cpu backend: float32 weights per rank |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for arch, tp in CASES:
            model = tmp / arch
            if not model.exists():
                subprocess.run([sys.executable, str(TOOL), "--arch", arch, "--out", str(model)], check=True,
                               stdout=subprocess.DEVNULL)
            cpu = subprocess.run([args.mpirun, "--oversubscribe", "-np", str(tp), args.layertap, "extract", "--model",
                                  str(model), "--data", str(data), "--out", str(tmp / "out"), "--tp", str(tp),
                                  "--backend", "cpu", "--dry-run", "--calibrate-batches", "0"],
                                 env=ENV, capture_output=True, text=True)
            m = re.search(r"\(float32 weights ([0-9.]+ \w+)", cpu.stdout + cpu.stderr)  # the dry run's host line
            cpu_host = m.group(1) if m else "?"
            for tokens in map(int, args.tokens.split(",")):
                for card in map(int, args.cards.split(",")):
                    device, host = plan(args, model, data, tp, tokens, card)
                    need = max(float(d[0]) for d in device)
                    fits = all(d[1] == "fits" for d in device)
                    most = min(int(d[2]) if d[2] else 0 for d in device)
                    others = host[1] if len(host) > 1 else "-"
                    print(f"| {arch} | {tp} | {tokens} | {card} | {need:.2f} GiB | {'yes' if fits else 'NO'} | "
                          f"{most} | {host[0]} / {others} | {cpu_host} |", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
