"""A format-v1 output directory with random states, written with h5py (for tests and the reader
benchmark: realistic hidden sizes without running a model). It follows docs/FORMAT.md: the same
datasets, chunking rule, attributes, custom bf16 type and manifest keys as layertap's writer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import h5py
import numpy as np

from .manifest import FORMAT_VERSION

__all__ = ["write_output", "bf16_type"]


def bf16_type() -> h5py.h5t.TypeFloatID:
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_size(2)
    t.set_ebias(127)
    return t


def _point_spec(pid: int, L: int) -> tuple[str, str]:
    if pid == L + 1:
        return "final", "after the final norm"
    if pid == L:
        return str(L), f"output of the last decoder layer {L - 1}, before the final norm"
    if pid == 0:
        return "0", "embedding output (input to decoder layer 0)"
    return str(pid), f"input to decoder layer {pid}"


def write_output(path, num_layers: int, hidden_size: int, point_ids: list[int],
                 lengths: list[int], samples_per_shard: int | None = None,
                 dtype: str = "bfloat16", vocab_size: int = 32000, seed: int = 0,
                 complete: bool = True, skipped: tuple[int, ...] = ()) -> Path:
    """`lengths` are the held samples' token counts; `skipped` are dataset indices left out as
    `--on-nonfinite skip` leaves them (listed in skipped_samples, absent from every shard)."""
    out = Path(path)
    n = len(lengths) + len(skipped)
    held = [i for i in range(n) if i not in set(skipped)]
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    P, H, L = len(point_ids), hidden_size, num_layers
    esize = 2 if dtype == "bfloat16" else 4
    rows_per_chunk = int(min(65536, max(1, (2 << 20) // (P * H * esize))))
    per = samples_per_shard or len(lengths)
    shards = []
    for s0 in range(0, len(lengths), per):
        lens = lengths[s0:s0 + per]
        T = int(sum(lens))
        name = f"shard-{len(shards):05d}.h5"
        with h5py.File(out / name, "w") as f:
            if dtype == "bfloat16":
                tid = bf16_type()
                space = h5py.h5s.create_simple((T, P, H), (h5py.h5s.UNLIMITED, P, H))
                plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                plist.set_chunk((rows_per_chunk, P, H))
                dsid = h5py.h5d.create(f.id, b"hidden_states", tid, space, dcpl=plist)
                step = max(1, (64 << 20) // (P * H * 2))
                for a in range(0, T, step):
                    b = min(T, a + step)
                    x = rng.standard_normal((b - a, P, H), dtype=np.float32)
                    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
                    fs = dsid.get_space()
                    fs.select_hyperslab((a, 0, 0), (b - a, P, H))
                    dsid.write(h5py.h5s.create_simple((b - a, P, H)), fs, bits, mtype=tid)
            else:
                d = f.create_dataset("hidden_states", (T, P, H), dtype="<f4",
                                     chunks=(rows_per_chunk, P, H), maxshape=(None, P, H))
                d[...] = rng.standard_normal((T, P, H), dtype=np.float32)
            ids = rng.integers(0, vocab_size, T, dtype=np.int32)
            mask = (rng.random(T) < 0.6).astype(np.uint8)
            off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            for k, v in (("input_ids", ids), ("loss_mask", mask), ("sample_offsets", off),
                         ("sample_index", np.array(held[s0:s0 + len(lens)], dtype=np.int64))):
                f.create_dataset(k, data=v, chunks=True, maxshape=(None,))
            f.attrs["format_version"] = np.int64(FORMAT_VERSION)
            f.attrs["capture_points"] = [_point_spec(p, L)[0] for p in point_ids]
            f.attrs["capture_point_ids"] = np.array(point_ids, dtype=np.int64)
            f.attrs["capture_request"] = ",".join(_point_spec(p, L)[0] for p in point_ids)
            f.attrs["capture_convention"] = "layertap-v1"
            f.attrs["num_layers"] = np.int64(L)
            f.attrs["hidden_size"] = np.int64(H)
            f.attrs["dtype"] = dtype
            f.attrs["compression"] = "none"
            f.attrs["architecture"] = "LlamaForCausalLM"
            f.attrs["config_sha256"] = ""
            f.attrs["weights_fingerprint"] = ""
        shards.append({"file": name, "samples": len(lens), "tokens": T,
                       "first_sample": held[s0], "last_sample": held[s0 + len(lens) - 1],
                       "bytes": (out / name).stat().st_size,
                       "sha256": hashlib.sha256((out / name).read_bytes()).hexdigest()
                       if (out / name).stat().st_size < (256 << 20) else ""})
    manifest = {
        "format_version": FORMAT_VERSION, "complete": complete,
        "capture": {"request": ",".join(_point_spec(p, L)[0] for p in point_ids),
                    "convention": "layertap-v1",
                    "points": [{"spec": _point_spec(p, L)[0], "id": p,
                                "meaning": _point_spec(p, L)[1]} for p in point_ids]},
        "model": {"dir": "synthetic", "architecture": "LlamaForCausalLM",
                  "num_hidden_layers": L, "hidden_size": H, "vocab_size": vocab_size,
                  "checkpoint_dtype": "bfloat16", "quantization": "none",
                  "config_sha256": "", "weights_fingerprint": ""},
        "dataset": {"path": "", "sha256": "", "samples": n, "tokens": int(sum(lengths))},
        "storage_dtype": dtype, "shards": shards,
        "skipped_samples": [{"index": i, "id": f"sample-{i}", "reason": "non-finite states"}
                            for i in skipped],
        "totals": {"samples": len(lengths), "tokens": int(sum(lengths)),
                   "bytes": sum(s["bytes"] for s in shards)},
        "run": {"command": "synthetic", "backend": "cpu"},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out
