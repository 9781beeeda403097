"""PyTorch datasets over a layertap output directory.

>>> from layertap.data import HiddenStatesDataset, Eagle3Dataset, PadCollate
>>> ds = Eagle3Dataset("out/", target="final")          # aux = the three intermediate points
>>> loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=4, collate_fn=PadCollate())

Each worker opens the shards it needs lazily (an HDF5 handle is never shared across a fork) and
reads a sample with one contiguous read per dataset: all capture points of the sample's rows of
``/hidden_states`` at once, then its ``/input_ids`` and ``/loss_mask`` rows. bf16 storage comes
back as ``torch.bfloat16`` without any conversion.

A malformed or tampered output (a manifest key missing or of the wrong type, a shard path outside
the directory, a shard whose datasets disagree with the manifest, a compressed output whose HDF5
filter this Python lacks) raises ``OutputError`` (a ValueError), one line naming the manifest or
shard and the key or dataset: at construction for the manifest and the shard files, when a shard
is first opened for its datasets.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Iterable, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from .output import IncompleteOutputError, Output, OutputError, Point, ShardReader, check_aux_points, hidden_to_torch

__all__ = ["HiddenStatesDataset", "Eagle3Dataset", "PadCollate", "pad_collate",
           "IncompleteOutputError", "OutputError"]


class HiddenStatesDataset(Dataset):
    """One item per sample of a layertap output, in manifest order.

    Item: ``hidden_states`` [T, P, H] (the requested ``points`` in the order given, all of them
    by default; bfloat16 or float32 as stored unless ``dtype`` says otherwise), ``input_ids`` [T]
    int64, ``loss_mask`` [T] int64, ``sample_index`` (the sample's position in the input
    dataset).

    ``points``: names as on the layertap command line (``"2"``, ``"last"``, ``"final"``) or ids.
    ``allow_incomplete``: read an output whose manifest says ``"complete": false``.
    ``max_open_shards``: HDF5 handles kept open per worker (least recently used closed first).
    """

    def __init__(self, out: str | os.PathLike, points: Sequence[str | int] | None = None,
                 allow_incomplete: bool = False, dtype: torch.dtype | None = None,
                 max_open_shards: int = 8):
        self.output = Output(out, allow_incomplete=allow_incomplete)
        if points is None:
            self.selected: list[Point] = list(self.output.points)
        else:
            self.selected = [self.output.point(p) for p in points]
        self.point_index = [p.index for p in self.selected]
        self._all_points = self.point_index == list(range(len(self.output.points)))
        self.dtype = dtype
        self.max_open_shards = max(1, int(max_open_shards))
        self._readers: OrderedDict[int, ShardReader] = OrderedDict()
        self._pid = os.getpid()

    # Handles are per process: dropped when pickled for a worker, reopened after a fork.
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_readers"] = OrderedDict()
        return state

    def _reader(self, k: int) -> ShardReader:
        if self._pid != os.getpid():
            self._readers = OrderedDict()   # inherited through fork: never reuse
            self._pid = os.getpid()
        r = self._readers.get(k)
        if r is None:
            r = self.output.reader(k)
            self._readers[k] = r
            while len(self._readers) > self.max_open_shards:
                _, old = self._readers.popitem(last=False)
                old.close()
        else:
            self._readers.move_to_end(k)
        return r

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()

    def __len__(self) -> int:
        return len(self.output)

    @property
    def points(self) -> list[str]:
        L = self.output.num_layers
        return ["final" if p.id == L + 1 else "last" if p.id == L else str(p.id)
                for p in self.selected]

    def _read(self, n: int):
        k, i = self.output.locate(n)
        r = self._reader(k)
        a, b = r.rows(i)
        hs = hidden_to_torch(r.read_hidden(a, b), r.storage_dtype)     # [T, P, H]
        ids = torch.from_numpy(r.read_ids(a, b).astype(np.int64))
        mask = torch.from_numpy(r.read_mask(a, b).astype(np.int64))
        return hs, ids, mask, int(r.sample_index[i])

    def __getitem__(self, n: int) -> dict:
        hs, ids, mask, index = self._read(n)
        if not self._all_points:
            hs = hs[:, self.point_index, :]
        if self.dtype is not None and hs.dtype != self.dtype:
            hs = hs.to(self.dtype)
        return {"hidden_states": hs, "input_ids": ids, "loss_mask": mask, "sample_index": index}


class Eagle3Dataset(HiddenStatesDataset):
    """The EAGLE-3 view: ``aux`` [T, len(aux) * H], the auxiliary points concatenated in the
    order given (by default the output's intermediate points, ids below L, which must be
    three), and ``target`` [T, H], the ``last`` (before the final norm) or ``final`` (after it)
    state, plus ``input_ids``, ``loss_mask``, ``sample_index``."""

    def __init__(self, out: str | os.PathLike, aux: Sequence[str | int] | None = None,
                 target: str = "final", allow_incomplete: bool = False,
                 dtype: torch.dtype | None = None, max_open_shards: int = 8):
        if target not in ("final", "last"):
            raise ValueError(f"target must be 'final' or 'last', not {target!r}")
        output = Output(out, allow_incomplete=allow_incomplete)
        if aux is None:
            inter = output.intermediate_points()
            if len(inter) != 3:
                raise ValueError(
                    f"{out} holds {len(inter)} intermediate points ({', '.join(str(p.id) for p in inter)}); "
                    "EAGLE-3 takes three: pass aux=[...] to choose")
            aux = [p.id for p in inter]
        aux = list(aux)
        super().__init__(out, points=[*aux, target], allow_incomplete=allow_incomplete,
                         dtype=dtype, max_open_shards=max_open_shards)
        self.aux_points = self.selected[:-1]
        self.target_point = self.selected[-1]
        check_aux_points([p.id for p in self.aux_points], output.num_layers, f"{out}: aux points")

    def __getitem__(self, n: int) -> dict:
        hs, ids, mask, index = self._read(n)
        T, H = hs.shape[0], hs.shape[2]
        aux = hs[:, self.point_index[:-1], :].reshape(T, len(self.aux_points) * H)
        target = hs[:, self.point_index[-1], :].contiguous()
        if self.dtype is not None:
            aux, target = aux.to(self.dtype), target.to(self.dtype)
        return {"aux": aux, "target": target, "input_ids": ids, "loss_mask": mask,
                "sample_index": index}


class PadCollate:
    """Pads a list of items to the longest one (right padding) and stacks them.

    Tensors with a token axis first are padded with 0 (``input_ids`` with ``pad_token_id``);
    adds ``attention_mask`` [B, T] (1 on real tokens) and ``lengths`` [B]; other values
    (``sample_index``) become a tensor. ``max_length`` truncates longer samples;
    ``pad_to_multiple_of`` rounds the padded length up. Picklable (use it with workers and
    spawn)."""

    def __init__(self, pad_token_id: int = 0, max_length: int | None = None,
                 pad_to_multiple_of: int | None = None):
        self.pad_token_id = pad_token_id
        self.max_length = max_length
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, batch: Iterable[dict]) -> dict:
        batch = list(batch)
        if not batch:
            raise ValueError("empty batch")
        lengths = [int(b["input_ids"].shape[0]) for b in batch]
        if self.max_length is not None:
            lengths = [min(n, self.max_length) for n in lengths]
        T = max(lengths)
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            T = (T + m - 1) // m * m
        out: dict = {}
        for key, first in batch[0].items():
            if isinstance(first, torch.Tensor) and first.dim() >= 1:
                fill = self.pad_token_id if key == "input_ids" else 0
                buf = torch.full((len(batch), T, *first.shape[1:]), fill, dtype=first.dtype)
                for j, b in enumerate(batch):
                    n = lengths[j]
                    buf[j, :n] = b[key][:n]
                out[key] = buf
            else:
                out[key] = torch.tensor([b[key] for b in batch])
        lens = torch.tensor(lengths, dtype=torch.int64)
        out["attention_mask"] = (torch.arange(T)[None, :] < lens[:, None]).to(torch.int64)
        out["lengths"] = lens
        return out


def pad_collate(batch: Iterable[dict]) -> dict:
    """PadCollate() with its defaults."""
    return PadCollate()(batch)
