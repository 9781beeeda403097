#!/usr/bin/env python3
"""Helpers of tools/bench_storage.sh (the storage-option benchmark on real activations).

  data    writes a JSON Lines dataset of real English text (Python's language reference topics and
          the licence texts Debian ships), tokenized with a model's tokenizer.json, shaped as
          ChatML conversations (user turn, assistant turn; loss on the assistant's tokens), so that
          the activations have a trained model's real statistics on real text.
  read    reads every shard of each output directory given with h5py exactly as docs/FORMAT.md
          tells users to (bf16 and float32 directly; float8_e4m3fn codes decoded and multiplied by
          /hidden_scales; compressed datasets through the hdf5plugin filters or HDF5_PLUGIN_PATH),
          compares the values with a float32 reference output and prints one line per directory.

Needs: `tokenizers` (data), h5py + numpy (read), and for compressed shards either
`import hdf5plugin` (PyPI) or HDF5_PLUGIN_PATH naming a folder with the filter plugins.
"""
import argparse
import glob
import json
import os
import random
import sys


def english_texts():
    """Paragraphs of real English prose available offline on Debian."""
    texts = []
    try:
        import pydoc_data.topics as topics  # the Python language reference, as pydoc shows it
        texts += [t for _, t in sorted(topics.topics.items())]
    except ImportError:
        pass
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
    paragraphs = []
    for t in texts:
        for p in t.split("\n\n"):
            p = " ".join(p.split())
            if len(p) > 80:
                paragraphs.append(p)
    if not paragraphs:
        sys.exit("bench_storage.py data: no English text found (pydoc_data, /usr/share/common-licenses)")
    return paragraphs


def cmd_data(a):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    paragraphs = english_texts()
    rng = random.Random(a.seed)
    start, end = tok.token_to_id("<|im_start|>"), tok.token_to_id("<|im_end|>")
    if start is None or end is None:
        sys.exit("bench_storage.py data: the tokenizer has no <|im_start|>/<|im_end|> tokens (expected SmolLM2)")
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids
    user_head, asst_head, nl = enc("user\n"), enc("assistant\n"), enc("\n")
    pos, written, total = 0, 0, 0
    with open(a.out, "w") as f:
        while written < a.samples:
            want = rng.randint(a.min_tokens, a.max_tokens)
            ids, mask = [], []
            turn = 0
            while len(ids) < want:
                body = enc(paragraphs[pos % len(paragraphs)])
                pos += 1
                head = user_head if turn % 2 == 0 else asst_head
                part = [start] + head + body + [end] + nl
                ids += part
                mask += [0] * (1 + len(head)) + [1 if turn % 2 else 0] * len(body) + [1 if turn % 2 else 0] + [0] * len(nl)
                turn += 1
            ids, mask = ids[:want], mask[:want]
            f.write(json.dumps({"input_ids": ids, "loss_mask": mask, "id": f"text-{written}"}) + "\n")
            written += 1
            total += len(ids)
    print(f"wrote {written} samples, {total} tokens of real text to {a.out}")


def shard_paths(d):
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    return [os.path.join(d, s["file"]) for s in m["shards"]]


def read_float32(path):
    """The documented h5py recipe (docs/FORMAT.md): any storage option to float32 [T, P, H]."""
    import h5py
    import numpy as np

    with h5py.File(path, "r") as f:
        hs = f["hidden_states"]
        if "hidden_scales" in f:  # float8_e4m3fn codes [T, P, H] uint8 + scales [T, P] float32
            codes = hs[...]
            table = fp8_e4m3fn_table()
            return table[codes] * f["hidden_scales"][...][..., None]
        return hs[...].astype(np.float32)  # bfloat16 (HDF5 converts) or float32


def fp8_e4m3fn_table():
    import numpy as np

    c = np.arange(256)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 0xF, c & 0x7
    v = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v[(e == 15) & (m == 7)] = np.nan
    return (sign * v).astype(np.float32)


def cmd_read(a):
    import numpy as np

    try:
        import hdf5plugin  # noqa: F401  (registers the zstd and lz4 filters with h5py's HDF5)
    except ImportError:
        print("note: hdf5plugin is not installed: zstd outputs need it, lz4 needs it or HDF5_PLUGIN_PATH")

    ref = {}
    for p in shard_paths(a.reference):
        ref[os.path.basename(p)] = read_float32(p)
    ok = True
    for d in a.outputs:
        total = err2 = ref2 = 0.0
        worst = 0.0
        files = shard_paths(d)
        got_all = [read_float32(p) for p in files]
        got = np.concatenate(got_all) if got_all else np.zeros((0,))
        want = np.concatenate([ref[k] for k in sorted(ref)])
        if want.shape[0] and got.shape[0] % want.shape[0] == 0:  # bench_storage --repeat K
            want = np.concatenate([want] * (got.shape[0] // want.shape[0]))
        if got.shape != want.shape:
            print(f"{d}: shape {got.shape}, reference {want.shape}: FAILED")
            ok = False
            continue
        diff = got.astype(np.float64) - want
        err2, ref2 = float((diff ** 2).sum()), float((want.astype(np.float64) ** 2).sum())
        worst = float(np.abs(diff).max()) if diff.size else 0.0
        total = got.size
        print(f"{d}: {len(files)} shards, {total} values read with h5py; relative RMS error vs float32 "
              f"{(err2 / ref2) ** 0.5 if ref2 else 0.0:.3e}, max abs error {worst:.3e}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="tokenize real English text into a JSONL dataset")
    d.add_argument("--model", required=True, help="model directory with tokenizer.json (SmolLM2)")
    d.add_argument("--out", required=True)
    d.add_argument("--samples", type=int, default=300)
    d.add_argument("--min-tokens", type=int, default=128)
    d.add_argument("--max-tokens", type=int, default=512)
    d.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("read", help="read outputs with h5py and compare with a float32 output")
    r.add_argument("--reference", required=True, help="output directory stored as float32")
    r.add_argument("outputs", nargs="+", help="output directories (manifest.json + shards)")
    a = ap.parse_args()
    if a.cmd == "data":
        cmd_data(a)
    else:
        sys.exit(cmd_read(a))


if __name__ == "__main__":
    main()
