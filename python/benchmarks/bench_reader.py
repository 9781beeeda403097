"""Reader throughput: layertap.data.HiddenStatesDataset through a DataLoader with 0 and N
workers, against a raw sequential read of the same shards (large contiguous reads of every
dataset, bf16 as raw bits) and h5py's plain slicing (HDF5 converting bf16 to float32).

    python python/benchmarks/bench_reader.py OUT [--workers 0 4] [--synthetic]

MB/s counts the stored bytes of the samples read (hidden states + ids + mask). The page cache is
warmed by a first raw pass unless --drop-caches (root) empties it before each measurement.
``--synthetic`` first writes OUT as a format-v1 output with random states
(``--hidden-size``, ``--points``, ``--samples``, ``--mean-tokens``, ``--shard-gib``)."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from layertap.data import HiddenStatesDataset  # noqa: E402
from layertap.output import Output  # noqa: E402


def drop_caches(enabled: bool) -> bool:
    if not enabled:
        return False
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def sample_bytes(out: Output) -> tuple[int, int]:
    esize = 2 if out.storage_dtype == "bfloat16" else 4
    per_token = len(out.points) * out.hidden_size * esize + 4 + 1
    return per_token, out.num_tokens * per_token


def raw_sequential(out: Output, block_rows: int | None = None) -> float:
    t0 = time.perf_counter()
    for k in range(len(out.shards)):
        with out.reader(k) as r:
            T = int(r.offsets[-1])
            rows = block_rows or max(1, (64 << 20) // (r.num_points * r.hidden_size * 2))
            for a in range(0, T, rows):
                b = min(T, a + rows)
                r.read_hidden(a, b)
            r.read_ids(0, T)
            r.read_mask(0, T)
    return time.perf_counter() - t0


def h5py_plain(out: Output, limit: int) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    n = toks = 0
    for s in out.shards:
        with h5py.File(out.path / s["file"], "r") as f:
            off = f["sample_offsets"][...]
            for i in range(len(off) - 1):
                a, b = off[i], off[i + 1]
                f["hidden_states"][a:b]
                f["input_ids"][a:b]
                f["loss_mask"][a:b]
                n += 1
                toks += int(b - a)
                if n >= limit:
                    return time.perf_counter() - t0, n, toks
    return time.perf_counter() - t0, n, toks


def loader_pass(path: Path, workers: int, shuffle: bool) -> tuple[float, int, int]:
    ds = HiddenStatesDataset(path)
    order = list(range(len(ds)))
    if shuffle:
        random.Random(0).shuffle(order)
    loader = DataLoader(torch.utils.data.Subset(ds, order), batch_size=None, num_workers=workers,
                        prefetch_factor=4 if workers else None,
                        persistent_workers=False)
    t0 = time.perf_counter()
    n = toks = 0
    for item in loader:
        n += 1
        toks += int(item["input_ids"].shape[0])
    return time.perf_counter() - t0, n, toks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 4])
    p.add_argument("--h5py-samples", type=int, default=50,
                   help="samples read with plain h5py slicing (it is slow on bf16)")
    p.add_argument("--drop-caches", action="store_true")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--synthetic", action="store_true")
    p.add_argument("--hidden-size", type=int, default=4096)
    p.add_argument("--points", type=int, default=4)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--mean-tokens", type=int, default=512)
    p.add_argument("--shard-gib", type=float, default=1.0)
    args = p.parse_args()

    path = Path(args.out)
    if args.synthetic and not (path / "manifest.json").exists():
        from layertap.synthetic import write_output

        rng = np.random.default_rng(1)
        lengths = [int(x) for x in rng.integers(args.mean_tokens // 4, args.mean_tokens * 7 // 4,
                                                args.samples)]
        per_sample = args.mean_tokens * args.points * args.hidden_size * 2
        per_shard = max(1, int(args.shard_gib * (1 << 30) / per_sample))
        L = 32
        ids = [2, 16, 29, 33, 32][: args.points]
        t0 = time.perf_counter()
        write_output(path, L, args.hidden_size, sorted(ids), lengths, samples_per_shard=per_shard)
        print(f"wrote {path} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    out = Output(path)
    per_token, total = sample_bytes(out)
    n_all, t_all = len(out), out.num_tokens
    res = {"output": str(path), "samples": n_all, "tokens": t_all, "shards": len(out.shards),
           "points": len(out.points), "hidden_size": out.hidden_size,
           "storage_dtype": out.storage_dtype, "bytes": total, "cpus": os.cpu_count(),
           "runs": []}

    def record(name, secs, n, toks, cold):
        mb = toks * per_token / 1e6
        row = {"reader": name, "seconds": round(secs, 3), "samples": n,
               "samples_per_s": round(n / secs, 1), "MB_per_s": round(mb / secs, 1),
               "cache": "cold" if cold else "warm"}
        res["runs"].append(row)
        print(f"{name:42s} {row['samples_per_s']:9.1f} samples/s {row['MB_per_s']:9.1f} MB/s "
              f"({n} samples, {secs:.2f} s, {row['cache']} cache)")

    if not args.drop_caches:
        raw_sequential(out)     # warm the page cache so every reader sees the same state
    cold = drop_caches(args.drop_caches)
    record("raw sequential read (64 MiB blocks)", raw_sequential(out), n_all, t_all, cold)
    for w in args.workers:
        for shuffle in (False, True):
            cold = drop_caches(args.drop_caches)
            secs, n, toks = loader_pass(path, w, shuffle)
            record(f"HiddenStatesDataset, {w} workers, {'shuffled' if shuffle else 'in order'}",
                   secs, n, toks, cold)
    if args.h5py_samples:
        cold = drop_caches(args.drop_caches)
        secs, n, toks = h5py_plain(out, args.h5py_samples)
        record("h5py slicing (HDF5 bf16->float32)", secs, n, toks, cold)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
