"""Reading a layertap output directory (docs/FORMAT.md): the manifest, its capture points and the
shards, one sample at a time with one contiguous read per dataset.

bf16 hidden states are read as their raw 16-bit patterns (the file's own type as the memory type,
so HDF5 converts nothing) and handed to torch as ``bfloat16`` without a copy; float32 storage is
read as float32.
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

__all__ = ["Output", "Point", "ShardReader", "IncompleteOutputError", "FORMAT_VERSION", "hidden_to_torch"]

FORMAT_VERSION = 1


class IncompleteOutputError(RuntimeError):
    """The output directory has no manifest, or its manifest says ``"complete": false``."""


@dataclass(frozen=True)
class Point:
    """One capture point of a run, in the ``layertap-v1`` convention."""

    spec: str       # as recorded in the manifest ("2", "16", "32" for last, "final")
    id: int         # k = input to decoder layer k; L = last (before the final norm); L+1 = final
    index: int      # position along the point axis of /hidden_states
    meaning: str

    def is_intermediate(self, num_layers: int) -> bool:
        return self.id < num_layers


class Output:
    """A layertap output directory, described by its manifest.

    ``allow_incomplete=True`` accepts a manifest with ``"complete": false`` (a run stopped by a
    signal): its listed shards are complete and readable, the rest of the dataset is missing.
    """

    def __init__(self, path: str | os.PathLike, allow_incomplete: bool = False):
        self.path = Path(path)
        manifest_path = self.path / "manifest.json"
        if not manifest_path.is_file():
            raise IncompleteOutputError(
                f"{self.path}: no manifest.json; this is not a finished layertap output "
                "(an interrupted run has none until --resume completes it)")
        self.manifest = json.loads(manifest_path.read_text())
        version = self.manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(f"{manifest_path}: format_version {version!r}; this reader knows "
                             f"{FORMAT_VERSION}")
        self.complete = bool(self.manifest.get("complete"))
        if not self.complete and not allow_incomplete:
            raise IncompleteOutputError(
                f"{self.path}: manifest says \"complete\": false (the run was stopped"
                f"{' by ' + self.manifest['run']['stopped_by'] if self.manifest.get('run', {}).get('stopped_by') else ''}"
                "); finish it with `layertap extract ... --resume`, or pass allow_incomplete=True "
                "(--allow-incomplete) to read the shards it lists")
        model = self.manifest["model"]
        self.num_layers = int(model["num_hidden_layers"])
        self.hidden_size = int(model["hidden_size"])
        self.vocab_size = int(model["vocab_size"]) if model.get("vocab_size") is not None else None
        self.storage_dtype = self.manifest["storage_dtype"]
        if self.storage_dtype not in ("bfloat16", "float32"):
            raise ValueError(f"{manifest_path}: unknown storage_dtype {self.storage_dtype!r}")
        self.points = [Point(str(p["spec"]), int(p["id"]), i, str(p.get("meaning", "")))
                       for i, p in enumerate(self.manifest["capture"]["points"])]
        self.shards = list(self.manifest["shards"])
        self.starts = [0]
        for s in self.shards:
            self.starts.append(self.starts[-1] + int(s["samples"]))

    # ---- capture points -------------------------------------------------------------------
    def point_id(self, name: str | int) -> int:
        """The id of a point named as on the layertap command line: ``k``, ``last``, ``L``,
        ``final``."""
        if isinstance(name, (int, np.integer)):
            return int(name)
        s = str(name).strip()
        if s == "final":
            return self.num_layers + 1
        if s == "last":
            return self.num_layers
        try:
            k = int(s)
        except ValueError:
            raise ValueError(f"capture point {name!r}: expected k, 'last' or 'final'") from None
        if not 0 <= k <= self.num_layers:
            raise ValueError(f"capture point {k} outside 0..{self.num_layers} "
                             f"(L = {self.num_layers})")
        return k

    def point(self, name: str | int) -> Point:
        pid = self.point_id(name)
        for p in self.points:
            if p.id == pid:
                return p
        raise KeyError(f"capture point {name!r} (id {pid}) is not in {self.path} "
                       f"(it holds {', '.join(self.point_names())})")

    def point_names(self) -> list[str]:
        L = self.num_layers
        return ["final" if p.id == L + 1 else "last" if p.id == L else str(p.id)
                for p in self.points]

    def intermediate_points(self) -> list[Point]:
        return [p for p in self.points if p.id < self.num_layers]

    # ---- samples --------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.starts[-1]

    @property
    def num_tokens(self) -> int:
        return sum(int(s["tokens"]) for s in self.shards)

    def locate(self, n: int) -> tuple[int, int]:
        """(shard number, sample within the shard) of the n-th sample in manifest order."""
        if n < 0:
            n += len(self)
        if not 0 <= n < len(self):
            raise IndexError(f"sample {n} out of range (the output holds {len(self)})")
        k = bisect.bisect_right(self.starts, n) - 1
        return k, n - self.starts[k]

    def shard_path(self, k: int) -> Path:
        return self.path / self.shards[k]["file"]

    def reader(self, k: int) -> "ShardReader":
        return ShardReader(self.shard_path(k), expected_samples=int(self.shards[k]["samples"]),
                           num_points=len(self.points), hidden_size=self.hidden_size,
                           storage_dtype=self.storage_dtype)


class ShardReader:
    """One open shard. Reads a sample with one contiguous hyperslab read per dataset."""

    def __init__(self, path: Path, expected_samples: int | None = None, num_points: int | None = None,
                 hidden_size: int | None = None, storage_dtype: str | None = None):
        self.path = Path(path)
        self.file = h5py.File(self.path, "r")
        f = self.file
        self.offsets = f["sample_offsets"][...].astype(np.int64)
        self.sample_index = f["sample_index"][...].astype(np.int64)
        self.hs = f["hidden_states"]
        self.ids = f["input_ids"]
        self.mask = f["loss_mask"]
        self.num_samples = len(self.sample_index)
        self.num_points, self.hidden_size = int(self.hs.shape[1]), int(self.hs.shape[2])
        self.storage_dtype = str(f.attrs.get("dtype", storage_dtype or "float32"))
        problems = []
        if expected_samples is not None and self.num_samples != expected_samples:
            problems.append(f"{self.num_samples} samples, manifest says {expected_samples}")
        if len(self.offsets) != self.num_samples + 1:
            problems.append("sample_offsets length is not samples + 1")
        if num_points is not None and self.num_points != num_points:
            problems.append(f"{self.num_points} points, manifest says {num_points}")
        if hidden_size is not None and self.hidden_size != hidden_size:
            problems.append(f"hidden size {self.hidden_size}, manifest says {hidden_size}")
        if storage_dtype is not None and self.storage_dtype != storage_dtype:
            problems.append(f"dtype {self.storage_dtype}, manifest says {storage_dtype}")
        if self.storage_dtype == "bfloat16" and self.hs.id.get_type().get_size() != 2:
            problems.append("dtype attribute says bfloat16 but /hidden_states is not 16-bit")
        if problems:
            self.file.close()
            raise ValueError(f"{self.path}: " + "; ".join(problems))
        self._hs_type = self.hs.id.get_type()

    def close(self) -> None:
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def rows(self, i: int) -> tuple[int, int]:
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def read_hidden(self, a: int, b: int) -> np.ndarray:
        """Rows a:b of /hidden_states, [b-a, P, H]: uint16 bf16 bit patterns for bfloat16 storage
        (view them as torch.bfloat16), float32 otherwise. One hyperslab read."""
        shape = (b - a, self.num_points, self.hidden_size)
        if self.storage_dtype == "bfloat16":
            out = np.empty(shape, dtype=np.uint16)
            if b > a:
                fspace = self.hs.id.get_space()
                fspace.select_hyperslab((a, 0, 0), shape)
                mspace = h5py.h5s.create_simple(shape)
                self.hs.id.read(mspace, fspace, out, mtype=self._hs_type)
            return out
        out = np.empty(shape, dtype=np.float32)
        if b > a:
            self.hs.read_direct(out, np.s_[a:b])
        return out

    def read_ids(self, a: int, b: int) -> np.ndarray:
        out = np.empty(b - a, dtype=np.int32)
        if b > a:
            self.ids.read_direct(out, np.s_[a:b])
        return out

    def read_mask(self, a: int, b: int) -> np.ndarray:
        out = np.empty(b - a, dtype=np.uint8)
        if b > a:
            self.mask.read_direct(out, np.s_[a:b])
        return out

    def read_sample(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a, b = self.rows(i)
        return self.read_hidden(a, b), self.read_ids(a, b), self.read_mask(a, b)


def hidden_to_torch(raw: np.ndarray, storage_dtype: str):
    """The torch tensor for an array from ShardReader.read_hidden (no copy)."""
    import torch

    t = torch.from_numpy(raw)
    if storage_dtype == "bfloat16":
        return t.view(torch.bfloat16)
    return t
