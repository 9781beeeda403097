"""What the e2e test scripts share: their command line, the environment for mpirun, reading an
output directory and safetensors files (by hand: Debian's Python has no safetensors package), and
writing a seeded dataset."""
import argparse
import collections
import json
import os
import random
import struct
import sys
import unittest
from pathlib import Path

import h5py
import numpy as np

# The parsed options, filled in place by run_tests: a script imports it before it is parsed.
ARGS = argparse.Namespace()

# Lets mpirun run as root and keeps each rank to one BLAS thread (the runs oversubscribe the cores).
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")

TYPES = {"cuda": int}  # every other option is a path or a command


def run_tests(options, defaults=None):
    """Parses --<name> for each name in `options` into ARGS (required unless `defaults` gives it a
    value), then runs the calling script's tests with the arguments left over (-v, test names)."""
    defaults = defaults or {}
    parser = argparse.ArgumentParser()
    for name in options:
        if name in defaults:
            parser.add_argument(f"--{name}", type=TYPES.get(name), default=defaults[name])
        else:
            parser.add_argument(f"--{name}", type=TYPES.get(name), required=True)
    _, rest = parser.parse_known_args(namespace=ARGS)
    unittest.main(argv=[sys.argv[0], *rest])


Sample = collections.namedtuple("Sample", "index ids mask states")


def read_output(out):
    """(manifest, [Sample(index, ids, mask, states)]) of an output directory, in manifest order."""
    out = Path(out)
    manifest = json.loads((out / "manifest.json").read_text())
    samples = []
    for shard in manifest["shards"]:
        with h5py.File(out / shard["file"], "r") as h:
            off, hs = h["sample_offsets"][:], h["hidden_states"][:]
            ids, mask = h["input_ids"][:], h["loss_mask"][:]
            for s, idx in enumerate(h["sample_index"][:]):
                a, b = off[s], off[s + 1]
                samples.append(Sample(int(idx), ids[a:b], mask[a:b], hs[a:b]))
    return manifest, samples


def write_dataset(path, n, seed, lo=60, hi=200):
    """n samples "s0".. of lo to hi random token ids below 150, the same for the same seed."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            ids = [rng.randrange(150) for _ in range(rng.randint(lo, hi))]
            f.write(json.dumps({"id": f"s{i}", "input_ids": ids}) + "\n")


def read_safetensors_header(path):
    """(header length, header bytes, header dict) of one safetensors file, its data left unread
    (shape-only checkpoints are sparse files of hundreds of GB)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        raw = f.read(n)
    return n, raw, json.loads(raw)


def read_safetensors_raw(path):
    """(header dict, data bytes) of one safetensors file."""
    n, _, header = read_safetensors_header(path)
    with open(path, "rb") as f:
        f.seek(8 + n)
        return header, f.read()


def read_safetensors(path):
    """{name: array} of one safetensors file (fixture weights and references: F32 and I32)."""
    header, data = read_safetensors_raw(path)
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "I32": np.int32}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(t["shape"])
    return out
