#!/usr/bin/env python3
"""Checks a layertap output directory against its JSONL input, reading it as users do (h5py).

usage: check_output.py OUT_DIR DATA.jsonl MODEL_DIR [--world-size N]

Manifest complete and consistent with the files (sha256, counts); samples in input order across
the shards in manifest order; input_ids and loss_mask equal to the JSONL; /hidden_states of shape
[T, P, H] with P = capture points and H = hidden_size, finite. Exit status 1 on any mismatch.
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

import h5py
import numpy as np


def fail(msg):
    print(f"check_output: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("data")
    ap.add_argument("model")
    ap.add_argument("--world-size", type=int)
    a = ap.parse_args()
    out = Path(a.out)
    mpath = out / "manifest.json"
    if not mpath.exists():
        fail(f"{mpath} missing: the run is incomplete")
    m = json.loads(mpath.read_text())
    samples = [json.loads(l) for l in Path(a.data).read_text().splitlines() if l.strip()]
    hidden = json.loads((Path(a.model) / "config.json").read_text())["hidden_size"]
    n_points = len(m["capture"]["points"])
    total_tokens = sum(len(s["input_ids"]) for s in samples)

    if m.get("complete") is not True:
        fail(f"manifest 'complete' is {m.get('complete')!r}")
    if m["totals"]["samples"] != len(samples) or m["totals"]["tokens"] != total_tokens:
        fail(f"manifest totals {m['totals']} vs input {len(samples)} samples, {total_tokens} tokens")
    if a.world_size is not None and m["run"]["world_size"] != a.world_size:
        fail(f"manifest world_size {m['run']['world_size']}, expected {a.world_size}")
    if not m["shards"]:
        fail("manifest lists no shards")

    order = []
    for sh in m["shards"]:
        path = out / sh["file"]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != sh["sha256"]:
            fail(f"{path}: sha256 {digest} != manifest {sh['sha256']}")
        with h5py.File(path, "r") as f:
            hs = f["hidden_states"]
            ids = f["input_ids"][...]
            mask = f["loss_mask"][...]
            offs = f["sample_offsets"][...]
            idx = f["sample_index"][...]
            T = int(offs[-1])
            if hs.shape != (T, n_points, hidden):
                fail(f"{path}: hidden_states shape {hs.shape}, expected [T, P, H] = {(T, n_points, hidden)}")
            if ids.shape != (T,) or mask.shape != (T,) or offs.shape != (len(idx) + 1,) or offs[0] != 0:
                fail(f"{path}: input_ids {ids.shape}, loss_mask {mask.shape}, offsets {offs.shape} "
                     f"inconsistent with T={T}, S={len(idx)}")
            if len(idx) != sh["samples"] or T != sh["tokens"]:
                fail(f"{path}: {len(idx)} samples, {T} tokens; manifest says {sh['samples']}, {sh['tokens']}")
            if not np.isfinite(hs[...]).all():
                fail(f"{path}: non-finite hidden states")
            for k, si in enumerate(idx):
                s = samples[int(si)]
                a_, b_ = int(offs[k]), int(offs[k + 1])
                if ids[a_:b_].tolist() != s["input_ids"]:
                    fail(f"{path}: sample {k} (input line {si}): input_ids differ from the JSONL")
                want_mask = s.get("loss_mask", [1] * len(s["input_ids"]))
                if mask[a_:b_].tolist() != want_mask:
                    fail(f"{path}: sample {k} (input line {si}): loss_mask differs from the JSONL")
            order += [int(i) for i in idx]
    if order != list(range(len(samples))):
        fail(f"samples across shards (manifest order) are {order}, expected input order 0..{len(samples) - 1}")
    print(f"check_output: OK: {len(samples)} samples, {total_tokens} tokens, {len(m['shards'])} shard(s), "
          f"hidden_states [T, {n_points}, {hidden}], world_size {m['run']['world_size']}, tp {m['run'].get('tp')}")


if __name__ == "__main__":
    main()
