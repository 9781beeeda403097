#!/usr/bin/env python3
"""A large synthetic JSONL dataset for planning benchmarks (bench_planning.sh): N samples whose
lengths are drawn uniformly from [1, 2 * mean - 1] (mean `mean`), token ids below `vocab`, a
loss mask on the second half of each sample, and an id. Fast: each line is a slice of one long
pre-rendered id list, so writing is I/O bound (about 6 GB for 1M samples of 1k tokens).

  make_synthetic_dataset.py OUT.jsonl --samples 1000000 --mean-tokens 1000 --vocab 160
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--mean-tokens", type=int, default=1000)
    ap.add_argument("--vocab", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    longest = 2 * a.mean_tokens - 1
    ids = [str(rng.randrange(a.vocab)) for _ in range(longest)]
    # prefix[n]: the first n ids rendered "i, j, ..."; masks likewise from "0, ..." and "1, ..."
    rendered = ", ".join(ids)
    ends = [0]
    for s in ids:
        ends.append(ends[-1] + len(s) + 2)
    zeros, ones = "0, " * longest, "1, " * longest
    total = 0
    with open(a.out, "w", buffering=16 << 20) as f:
        for i in range(a.samples):
            n = rng.randint(1, longest)
            half = n // 2
            mask = (zeros[: 3 * half] + ones[: 3 * (n - half)])[:-2]
            f.write(f'{{"id": "s{i}", "input_ids": [{rendered[: ends[n] - 2]}], "loss_mask": [{mask}]}}\n')
            total += n
    print(f"{a.out}: {a.samples} samples, {total} tokens")


if __name__ == "__main__":
    main()
