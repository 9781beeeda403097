#!/usr/bin/env python3
"""Per-kernel GPU times from Nsight Compute's CSV (`ncu --csv --print-units base --metrics
gpu__time_duration.sum`), summed by kernel name: launches, total and mean microseconds, share.

    python3 tools/kernel_times.py ncu_llama3-8b.csv [more.csv ...]

Times are ncu's per-kernel replays (each kernel alone on an idle GPU, caches flushed between
replays unless --cache-control none), so they add up to more than a forward's wall time.
"""
import csv
import sys
from collections import OrderedDict


def rows(path):
    with open(path, newline="") as f:
        # ncu prints its own "==PROF==" lines before the table when --log-file is not used.
        lines = [l for l in f if l.startswith('"')]
    return csv.DictReader(lines)


def summarize(path):
    by_name = OrderedDict()
    for r in rows(path):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[r["Metric Unit"]]
        us = float(r["Metric Value"].replace(",", "")) * scale
        name = r["Kernel Name"]
        n, t = by_name.get(name, (0, 0.0))
        by_name[name] = (n + 1, t + us)
    total = sum(t for _, t in by_name.values())
    print(f"--- {path}: {sum(n for n, _ in by_name.values())} kernels, {total / 1e3:.3f} ms in all (ncu replays)")
    print(f"{'kernel':<60} {'launches':>8} {'total us':>11} {'mean us':>10} {'share':>7}")
    for name, (n, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:60]:<60} {n:>8} {t:>11.1f} {t / n:>10.2f} {100 * t / total:>6.1f}%")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        summarize(p)
