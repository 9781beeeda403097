#!/usr/bin/env python3
"""Damage a layertap output in one precise way, to prove `layertap verify` notices (tests only).

  corrupt_output.py OUT swap-points P Q          exchange capture points P and Q of every sample
  corrupt_output.py OUT replace-point P SRC Q    store point Q of output SRC (same samples) as point P
  corrupt_output.py OUT shift-tokens S           move sample S's states one token later
  corrupt_output.py OUT exchange-samples A B     exchange the states of samples A and B (common prefix)
  corrupt_output.py OUT truncate N               cut N bytes off the end of the first shard
  corrupt_output.py OUT flip-byte                invert one byte inside the first /hidden_states chunk
  corrupt_output.py OUT resize DATASET N         make the first shard's 1-D DATASET N long (values kept
                                                 or repeated), or /hidden_states N wide (hidden size)
  corrupt_output.py OUT declare-huge DATASET     replace the first shard's 1-D DATASET by an unwritten
                                                 one of 2^40 elements (a few KiB on disk)
  corrupt_output.py OUT set-attr NAME JSON       set a root attribute of the first shard
  corrupt_output.py OUT manifest KEY.PATH JSON   set a manifest value (list positions are numbers)

Samples are numbered by their /sample_index; states edits apply to the shard that holds them.
With --rechecksum the manifest's sizes and SHA-256 are updated afterwards, as a writer that
checksummed wrong data would have done, so only the semantic checks can catch the damage.
Uses Debian's h5py (bf16 datasets are written back through float32, which is exact).
"""
import argparse
import hashlib
import json
from pathlib import Path

import h5py
import numpy as np


def shards(out):
    manifest = json.loads((out / "manifest.json").read_text())
    return manifest, [out / s["file"] for s in manifest["shards"]]


def locate(out, sample):
    """(shard path, first row, last row) of a sample given its /sample_index."""
    for f in shards(out)[1]:
        with h5py.File(f, "r") as h:
            idx = list(h["sample_index"][:])
            if sample in idx:
                s = idx.index(sample)
                off = h["sample_offsets"]
                return f, int(off[s]), int(off[s + 1])
    raise SystemExit(f"sample {sample} not found in {out}")


def rewrite(f, fn):
    with h5py.File(f, "r+") as h:
        hs = h["hidden_states"]
        data = hs[:]
        fn(data)
        hs[...] = data


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("mode")
    ap.add_argument("args", nargs="*")
    ap.add_argument("--rechecksum", action="store_true")
    a = ap.parse_args()
    out, files = a.out, shards(a.out)[1]

    if a.mode == "swap-points":
        p, q = map(int, a.args)
        for f in files:
            rewrite(f, lambda d: d.__setitem__((slice(None), [p, q]), d[:, [q, p]]))
    elif a.mode == "replace-point":
        p, src, q = int(a.args[0]), Path(a.args[1]), int(a.args[2])
        for f, g in zip(files, shards(src)[1]):
            with h5py.File(g, "r") as h:
                other = h["hidden_states"][:, q]
            rewrite(f, lambda d: d.__setitem__((slice(None), p), other))
    elif a.mode == "shift-tokens":
        f, t0, t1 = locate(out, int(a.args[0]))
        rewrite(f, lambda d: d.__setitem__(slice(t0, t1), np.roll(d[t0:t1], 1, axis=0)))
    elif a.mode == "exchange-samples":
        (fa, a0, a1), (fb, b0, b1) = (locate(out, int(x)) for x in a.args)
        assert fa == fb, "exchange-samples needs both samples in one shard"
        n = min(a1 - a0, b1 - b0)

        def swap(d):
            d[a0:a0 + n], d[b0:b0 + n] = d[b0:b0 + n].copy(), d[a0:a0 + n].copy()
        rewrite(fa, swap)
    elif a.mode == "truncate":
        f = files[0]
        data = f.read_bytes()
        f.write_bytes(data[: len(data) - int(a.args[0])])
    elif a.mode == "flip-byte":
        f = files[0]
        with h5py.File(f, "r") as h:
            info = h["hidden_states"].id.get_chunk_info(0)
            offset = info.byte_offset + info.size // 2
        with open(f, "r+b") as fh:
            fh.seek(offset)
            b = fh.read(1)
            fh.seek(offset)
            fh.write(bytes([b[0] ^ 0xFF]))
    elif a.mode == "resize":
        name, n = a.args[0], int(a.args[1])
        with h5py.File(files[0], "r+") as h:
            old = h[name][:]
            if name == "hidden_states":
                new = old[:, :, :n]
            else:
                new = np.resize(old, n)  # repeats the values to fill
            dtype = h[name].dtype if name != "hidden_states" else np.float32
            del h[name]
            h.create_dataset(name, data=new.astype(dtype), maxshape=(None,) + new.shape[1:], chunks=True)
    elif a.mode == "declare-huge":
        name = a.args[0]
        with h5py.File(files[0], "r+") as h:
            dtype = h[name].dtype
            del h[name]
            h.create_dataset(name, shape=(2**40,), maxshape=(None,), chunks=(1024,), dtype=dtype)
    elif a.mode == "set-attr":
        with h5py.File(files[0], "r+") as h:
            value = json.loads(a.args[1])
            h.attrs[a.args[0]] = np.array(value, dtype=np.int64) if isinstance(value, list) else value
    elif a.mode == "manifest":
        manifest = json.loads((out / "manifest.json").read_text())
        *path, last = [int(k) if k.isdigit() else k for k in a.args[0].split(".")]
        node = manifest
        for k in path:
            node = node[k]
        node[last] = json.loads(a.args[1])
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    else:
        raise SystemExit(f"unknown mode {a.mode}")

    if a.rechecksum:
        manifest = json.loads((out / "manifest.json").read_text())
        for s in manifest["shards"]:
            data = (out / s["file"]).read_bytes()
            s["bytes"], s["sha256"] = len(data), hashlib.sha256(data).hexdigest()
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
