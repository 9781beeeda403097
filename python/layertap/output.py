"""Reading a layertap output directory (docs/FORMAT.md): the manifest, its capture points and the
shards, one sample at a time with one contiguous read per dataset.

bf16 hidden states are read as their raw 16-bit patterns (the file's own type as the memory type,
so HDF5 converts nothing) and handed to torch as ``bfloat16`` without a copy; float32 storage is
read as float32.
"""

from __future__ import annotations

import bisect
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from .manifest import (CODEC_FILTER, DEFLATE, FORMAT_VERSION, ZSTD, IncompleteOutputError,
                       OutputError, canonical_compression, describe_pipeline, ensure_filter, excerpt,
                       expected_pipeline, filter_problem, is_filter_error, one_line,
                       read_manifest, shard_file)

__all__ = ["Output", "Point", "ShardReader", "IncompleteOutputError", "OutputError",
           "FORMAT_VERSION", "hidden_to_torch"]

# shard_reader.cpp: a shard of N bytes holds at most N * 1024 elements per dataset (no lossless
# filter compresses activations 1024x), capture points and hidden size at most 2^24; declared
# sizes beyond are refused before anything is allocated for them.
MAX_EXPANSION = 1024
MAX_DIM = 1 << 24
DATASETS = (("hidden_states", 3), ("input_ids", 1), ("loss_mask", 1), ("sample_offsets", 1),
            ("sample_index", 1))


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

    The manifest is checked by key and type, and every shard it lists confined to the directory
    and checked for presence and size, before anything is read (layertap.manifest: the rules of
    the C++ checker); each shard's datasets are checked when it is opened (ShardReader). Any
    failure is an ``OutputError`` (a ValueError) whose message is one line naming the file and
    the key or dataset.

    ``allow_incomplete=True`` accepts a manifest with ``"complete": false`` (a run stopped by a
    signal): its listed shards are complete and readable, the rest of the dataset is missing.
    """

    def __init__(self, path: str | os.PathLike, allow_incomplete: bool = False):
        self.path = Path(path)
        m = read_manifest(self.path)
        self.manifest = m.raw
        self.manifest_path = m.path
        self.complete = m.complete
        if not self.complete and not allow_incomplete:
            raise IncompleteOutputError(
                f"{self.path}: manifest says \"complete\": false (the run was stopped"
                f"{' by ' + one_line(m.stopped_by) if m.stopped_by else ''}"
                "); finish it with `layertap extract ... --resume`, or pass allow_incomplete=True "
                "(--allow-incomplete) to read the shards it lists")
        self.num_layers = m.num_layers
        self.hidden_size = m.hidden_size
        self.vocab_size = m.vocab_size
        self.storage_dtype = m.storage_dtype
        self.compression = m.compression
        self.dataset_path = m.dataset_path
        self.dataset_samples = m.dataset_samples
        self.identity = m.identity
        self.skipped = m.skipped
        self.points = [Point(spec, pid, i, meaning) for i, (spec, pid, meaning) in enumerate(m.points)]
        self.shards = m.shards
        codec = self.compression.split(":")[0]
        if codec in CODEC_FILTER:
            problem = ensure_filter(CODEC_FILTER[codec])
            if problem:
                raise OutputError(f"{m.path}: key 'compression' = "
                                  f"{excerpt(m.raw.get('compression'))}: the shards need {problem}")
        self._files = [shard_file(self.path, s, m.path) for s in self.shards]
        self.starts = [0]
        for s in self.shards:
            self.starts.append(self.starts[-1] + s["samples"])

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
        return sum(s["tokens"] for s in self.shards)

    def locate(self, n: int) -> tuple[int, int]:
        """(shard number, sample within the shard) of the n-th sample in manifest order."""
        if n < 0:
            n += len(self)
        if not 0 <= n < len(self):
            raise IndexError(f"sample {n} out of range (the output holds {len(self)})")
        k = bisect.bisect_right(self.starts, n) - 1
        return k, n - self.starts[k]

    def shard_path(self, k: int) -> Path:
        return self._files[k]

    def reader(self, k: int) -> "ShardReader":
        s = self.shards[k]
        return ShardReader(self._files[k], expected_samples=s["samples"],
                           num_points=len(self.points), hidden_size=self.hidden_size,
                           storage_dtype=self.storage_dtype, expected_tokens=s["tokens"],
                           point_ids=[p.id for p in self.points], num_layers=self.num_layers,
                           max_index=self.dataset_samples, vocab_size=self.vocab_size,
                           compression=self.compression, manifest_key=s["key"],
                           identity=self.identity, skipped=self.skipped,
                           first_last=(s["first_sample"], s["last_sample"]))

    def check_shards(self) -> None:
        """Opens every shard once (its datasets, shapes, attributes and filters checked)."""
        for k in range(len(self.shards)):
            self.reader(k).close()


def _describe_type(t) -> str:
    """io/hdf5.cpp describe_type."""
    bits = 8 * t.get_size()
    cls = t.get_class()
    if cls == h5py.h5t.FLOAT:
        return "bfloat16" if _is_bf16(t) else f"float{bits}"
    if cls == h5py.h5t.INTEGER:
        return f"{'uint' if t.get_sign() == h5py.h5t.SGN_NONE else 'int'}{bits}"
    if cls == h5py.h5t.STRING:
        return "string"
    return f"other ({bits}-bit)"


def _is_bf16(t) -> bool:
    """io/hdf5.cpp is_bf16_type: docs/FORMAT.md's bf16 type, exactly."""
    return (t.get_class() == h5py.h5t.FLOAT and t.get_size() == 2
            and tuple(t.get_fields()) == (15, 7, 8, 0, 7) and t.get_ebias() == 127
            and t.get_order() == h5py.h5t.ORDER_LE)


class ShardReader:
    """One open shard. Reads a sample with one contiguous hyperslab read per dataset.

    Opening checks, before any value is used (shard_reader.cpp structure_problems and
    output_check.cpp check_shard): the five datasets present, stored in the file (no external
    links, external storage or virtual datasets), of the right rank and type; declared sizes a file of
    this size can hold; ``/hidden_states`` [T, P, H] with T the tokens of ``/input_ids`` and
    ``/loss_mask`` and P, H, the dtype, the capture point ids and the layer count those of the
    manifest (when given); ``/sample_offsets`` S+1 entries from 0 to T, strictly increasing;
    ``/sample_index`` S entries, increasing, non-negative (and below ``max_index``, none of
    ``skipped``); the string attributes present and the model's ``identity`` the manifest's; every filter
    decodable here. Any failure is an ``OutputError`` naming the shard and the dataset."""

    def __init__(self, path: Path, expected_samples: int | None = None, num_points: int | None = None,
                 hidden_size: int | None = None, storage_dtype: str | None = None, *,
                 expected_tokens: int | None = None, point_ids: list[int] | None = None,
                 num_layers: int | None = None, max_index: int | None = None,
                 vocab_size: int | None = None, compression: str | None = None,
                 manifest_key: str | None = None, identity: dict[str, str] | None = None,
                 skipped: list[int] | None = None, first_last: tuple[int, int] | None = None):
        self.path = Path(path)
        self.vocab_size = vocab_size
        self._key = f" ({manifest_key} in manifest.json)" if manifest_key else ""
        try:
            st = os.stat(self.path)
        except OSError as e:
            self._fail(f"cannot be opened: {e.strerror or e}")
        if not stat.S_ISREG(st.st_mode):
            self._fail("is not a regular file")
        self.file_bytes = st.st_size
        try:
            self.file = h5py.File(self.path, "r")
        except (OSError, ValueError) as e:
            self._fail(f"cannot be read as HDF5 (truncated, damaged or not a shard): {one_line(e)}")
        try:
            self._check(expected_samples, num_points, hidden_size, storage_dtype, expected_tokens,
                        point_ids, num_layers, max_index, compression, skipped, first_last)
            self._check_identity(identity)
        except BaseException:
            self.file.close()
            raise
        self._hs_type = self.hs.id.get_type()

    def _fail(self, why: str):
        raise OutputError(f"{self.path}: {why}{self._key}")

    def _dataset(self, name: str, rank: int) -> h5py.Dataset:
        f = self.file
        try:
            link = f.get(name, getlink=True)
        except Exception:
            link = None
        if link is None:
            self._fail(f"/{name} is missing")
        if isinstance(link, h5py.ExternalLink):     # a soft link stays inside the file
            self._fail(f"/{name} is an external link to {excerpt(link.filename, 256)}, expected a "
                       "dataset stored in the shard")
        try:
            obj = f[name]
        except Exception as e:
            self._fail(f"/{name} cannot be opened: {one_line(e)}")
        if not isinstance(obj, h5py.Dataset):
            self._fail(f"/{name} is a group, expected a dataset")
        if obj.is_virtual or obj.external:
            self._fail(f"/{name} keeps its data outside the shard (external storage or a virtual "
                       "dataset), expected it stored in the file")
        shape = obj.shape or ()
        if len(shape) != rank:
            self._fail(f"/{name} has rank {len(shape)}, expected {rank}"
                       + (" [T, P, H]" if name == "hidden_states" else ""))
        return obj

    def _filters(self, ds: h5py.Dataset) -> list[int]:
        return [fid for fid, _ in self._pipeline(ds)]

    @staticmethod
    def _pipeline(ds: h5py.Dataset) -> list[tuple[int, int | None]]:
        """(filter id, level for zstd and deflate) in write order (shard_reader.cpp
        dataset_pipeline, compared as output_check.cpp same_pipeline compares)."""
        plist = ds.id.get_create_plist()
        out = []
        for i in range(plist.get_nfilters()):
            fid, _, cd, _ = plist.get_filter(i)
            out.append((int(fid), (int(cd[0]) if cd else 0) if fid in (ZSTD, DEFLATE) else None))
        return out

    def _attr(self, name: str):
        try:
            if name not in self.file.attrs:
                self._fail(f"attribute {name} is missing")
            v = self.file.attrs[name]
        except OutputError:
            raise
        except Exception as e:
            self._fail(f"attribute {name} cannot be read: {one_line(e)}")
        return v

    def _attr_int(self, name: str) -> int:
        v = np.asarray(self._attr(name))
        if v.shape != () or v.dtype.kind not in "iu":
            self._fail(f"attribute {name} = {excerpt(v.tolist())} must be an integer")
        return int(v)

    def _attr_str(self, name: str) -> str:
        v = self._attr(name)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if not isinstance(v, str):
            self._fail(f"attribute {name} must be a string, found {excerpt(np.asarray(v).tolist())}")
        return v

    def _check_identity(self, identity: dict[str, str] | None):
        """The string attributes every shard carries (docs/FORMAT.md), and the model's identity
        equal to the manifest's (output_check.cpp check_shard: another model's shard is refused)."""
        for name in ("capture_request", "capture_convention"):
            self._attr_str(name)
        specs = np.atleast_1d(np.asarray(self._attr("capture_points"), dtype=object))
        if not all(isinstance(x, (str, bytes)) for x in specs):
            self._fail(f"attribute capture_points = {excerpt(specs.tolist())} must be a list of "
                       "strings")
        if len(specs) != self.num_points:
            self._fail(f"attribute capture_points has {len(specs)} names for the {self.num_points} "
                       "points of /hidden_states")
        for name in ("architecture", "config_sha256", "weights_fingerprint"):
            got = self._attr_str(name)
            if identity is not None and got != identity[name]:
                self._fail(f"attribute {name} = {excerpt(got)}, manifest says "
                           f"{excerpt(identity[name])} (another model's shard)")

    def _check(self, expected_samples, num_points, hidden_size, storage_dtype, expected_tokens,
               point_ids, num_layers, max_index, compression, skipped, first_last):
        ds = {name: self._dataset(name, rank) for name, rank in DATASETS}
        self.hs, self.ids, self.mask = ds["hidden_states"], ds["input_ids"], ds["loss_mask"]
        for name, d in ds.items():
            if name != "hidden_states" and d.id.get_type().get_class() != h5py.h5t.INTEGER:
                self._fail(f"/{name} is stored as {_describe_type(d.id.get_type())}, expected integers")
        shape = tuple(int(x) for x in self.hs.shape)
        T, S = int(self.ids.shape[0]), int(ds["sample_index"].shape[0])
        n_off = int(ds["sample_offsets"].shape[0])
        most = self.file_bytes * MAX_EXPANSION
        for name, n in (("input_ids", T), ("loss_mask", self.mask.shape[0]), ("sample_index", S),
                        ("sample_offsets", n_off)):
            if n > most:
                self._fail(f"/{name} declares {n} elements, more than a file of {self.file_bytes} "
                           "bytes can hold: the shard is damaged")
        if shape[1] > MAX_DIM or shape[2] > MAX_DIM or shape[0] * shape[1] * shape[2] > most:
            self._fail(f"/hidden_states declares {list(shape)}, more than a file of "
                       f"{self.file_bytes} bytes can hold: the shard is damaged")
        P = num_points if num_points is not None else shape[1]
        H = hidden_size if hidden_size is not None else shape[2]
        if shape != (T, P, H):
            self._fail(f"/hidden_states has shape {list(shape)}, expected [T, P, H] = {[T, P, H]} "
                       "(T the tokens of /input_ids, P the manifest's capture points, H its "
                       "model.hidden_size)")
        if self.mask.shape[0] != T:
            self._fail(f"/loss_mask has {self.mask.shape[0]} entries for the {T} tokens of /input_ids")
        if expected_tokens is not None and T != expected_tokens:
            self._fail(f"/input_ids holds {T} tokens, manifest says {expected_tokens}")
        if expected_samples is not None and S != expected_samples:
            self._fail(f"/sample_index holds {S} samples, manifest says {expected_samples}")
        if n_off != S + 1:
            self._fail(f"/sample_offsets has {n_off} entries for the {S} samples of /sample_index "
                       f"(expected {S + 1})")
        self.num_samples = S
        self.num_points, self.hidden_size = P, H

        # attributes
        version = self._attr_int("format_version")
        if version != FORMAT_VERSION:
            self._fail(f"attribute format_version = {version}, expected {FORMAT_VERSION}")
        ids_attr = np.asarray(self._attr("capture_point_ids"))
        if ids_attr.ndim != 1 or ids_attr.dtype.kind not in "iu":
            self._fail(f"attribute capture_point_ids = {excerpt(ids_attr.tolist())} must be a list "
                       "of integers")
        ids_attr = [int(x) for x in ids_attr]
        if len(ids_attr) != P:
            self._fail(f"attribute capture_point_ids has {len(ids_attr)} ids for the {P} points of "
                       "/hidden_states")
        if point_ids is not None and ids_attr != list(point_ids):
            self._fail(f"attribute capture_point_ids = {ids_attr}, manifest says {list(point_ids)}")
        layers = self._attr_int("num_layers")
        if num_layers is not None and layers != num_layers:
            self._fail(f"attribute num_layers = {layers}, manifest says {num_layers}")
        if self._attr_int("hidden_size") != H:
            self._fail(f"attribute hidden_size = {self._attr_int('hidden_size')}, expected {H}")
        self._check_routing(T, layers)
        self.storage_dtype = self._attr_str("dtype")
        if storage_dtype is not None and self.storage_dtype != storage_dtype:
            self._fail(f"attribute dtype = {excerpt(self.storage_dtype)}, manifest says {storage_dtype}")
        stored = _describe_type(self.hs.id.get_type())
        if self.storage_dtype not in ("bfloat16", "float32"):
            self._fail(f"attribute dtype = {excerpt(self.storage_dtype)}: this reader reads bfloat16 "
                       "and float32 shards")
        if stored != self.storage_dtype:
            self._fail(f"/hidden_states is stored as {stored}, expected {self.storage_dtype}")
        # compression (output_check.cpp storage_problems): the attribute (absent: none) and the
        # actual filters of /hidden_states against the manifest
        if compression is not None:
            attr = self._attr_str("compression") if "compression" in self.file.attrs else "none"
            if canonical_compression(attr) != compression:
                self._fail(f"attribute compression = {excerpt(attr)}, manifest says {compression}")
            actual = self._pipeline(self.hs)
            want = expected_pipeline(compression, self.hs.id.get_type().get_size())
            if actual != want:
                self._fail(f"/hidden_states is filtered by {describe_pipeline(actual)}, manifest says "
                           f"compression {compression} ({describe_pipeline(want)})")
        # every filter decodable here, before a value is read
        for name, d in ds.items():
            for fid in self._filters(d):
                problem = ensure_filter(fid)
                if problem:
                    self._fail(f"/{name} needs {problem}")

        # values (sizes are bounded above)
        self.offsets = self._read_all(ds["sample_offsets"], "sample_offsets")
        self.sample_index = self._read_all(ds["sample_index"], "sample_index")
        off = self.offsets
        if off[0] != 0 or off[-1] != T:
            self._fail(f"/sample_offsets spans [{off[0]}, {off[-1]}], expected [0, {T}] (the tokens "
                       "of /input_ids)")
        steps = np.diff(off)
        if (steps <= 0).any():
            s = int(np.argmax(steps <= 0))
            self._fail(f"/sample_offsets is not increasing at sample {s} ({off[s]} -> {off[s + 1]})")
        idx = self.sample_index
        if S and idx.min() < 0:
            self._fail(f"/sample_index holds {int(idx.min())}, expected positions >= 0")
        if S > 1 and (np.diff(idx) <= 0).any():
            s = int(np.argmax(np.diff(idx) <= 0))
            self._fail(f"/sample_index is not increasing at sample {s} ({idx[s]} -> {idx[s + 1]})")
        if S and max_index is not None and idx.max() >= max_index:
            self._fail(f"/sample_index holds {int(idx.max())}, but the manifest's dataset.samples "
                       f"is {max_index}")
        held_and_skipped = np.isin(idx, np.array(sorted(skipped or ()), dtype=np.int64))
        if held_and_skipped.any():
            self._fail(f"/sample_index holds {int(idx[np.argmax(held_and_skipped)])}, which "
                       "manifest.json lists in skipped_samples")
        # the entry's first and last sample: the manifest holds them in dataset order
        if S and first_last is not None and (int(idx[0]), int(idx[-1])) != tuple(first_last):
            self._fail(f"/sample_index runs from {int(idx[0])} to {int(idx[-1])}, manifest says "
                       f"first_sample {first_last[0]}, last_sample {first_last[1]}")

    def _check_routing(self, T: int, num_layers: int):
        """MoE outputs' /routed_experts [T, M, k] integers, named by the attributes routed_layers
        (M increasing layer ids) and routed_top_k (shard_reader.cpp structure_problems). The
        readers here do not use it; `layertap verify` replays it."""
        has_data, has_attr = "routed_experts" in self.file, "routed_layers" in self.file.attrs
        if has_data != has_attr:
            self._fail("/routed_experts without the attribute routed_layers" if has_data
                       else "attribute routed_layers without /routed_experts")
        if not has_data:
            return
        layers = np.asarray(self._attr("routed_layers"))
        if layers.ndim != 1 or layers.dtype.kind not in "iu":
            self._fail(f"attribute routed_layers = {excerpt(layers.tolist())} must be a list of integers")
        layers = [int(x) for x in layers]
        k = self._attr_int("routed_top_k")
        d = self._dataset("routed_experts", 3)
        if d.id.get_type().get_class() != h5py.h5t.INTEGER:
            self._fail(f"/routed_experts is stored as {_describe_type(d.id.get_type())}, expected integers")
        want = [T, len(layers), k]
        if [int(x) for x in d.shape] != want:
            self._fail(f"/routed_experts has shape {[int(x) for x in d.shape]}, expected [T, layers, top-k] = "
                       f"{want} from /input_ids and the attributes routed_layers, routed_top_k")
        if k < 1:
            self._fail(f"attribute routed_top_k is {k}, expected at least 1")
        if any(x < 0 or x >= num_layers for x in layers) or any(b <= a for a, b in zip(layers, layers[1:])):
            self._fail(f"attribute routed_layers {layers} is not increasing layer ids below {num_layers}")

    def _read_error(self, ds: h5py.Dataset, name: str, what: str, e: BaseException):
        hint = ""
        if is_filter_error(e):
            extra = [fid for fid in self._filters(ds) if fid >= 256]
            if extra:
                hint = f"; /{name} needs {filter_problem(extra[0])}"
        self._fail(f"reading {what} of /{name} failed: {one_line(e)}{hint}")

    def _read_all(self, ds: h5py.Dataset, name: str) -> np.ndarray:
        try:
            return ds[...].astype(np.int64)
        except (OSError, ValueError, TypeError) as e:
            self._read_error(ds, name, "all entries", e)

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
        try:
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
        except OSError as e:
            self._read_error(self.hs, "hidden_states", f"rows {a}..{b}", e)

    def read_ids(self, a: int, b: int) -> np.ndarray:
        """Rows a:b of /input_ids as int32; ids outside [0, vocab_size) are refused."""
        out = np.empty(b - a, dtype=np.int32)
        if b > a:
            try:
                self.ids.read_direct(out, np.s_[a:b])
            except OSError as e:
                self._read_error(self.ids, "input_ids", f"rows {a}..{b}", e)
            if self.vocab_size is not None:
                lo, hi = int(out.min()), int(out.max())
                if lo < 0 or hi >= self.vocab_size:
                    bad = lo if lo < 0 else hi
                    self._fail(f"/input_ids rows {a}..{b} hold token id {bad}, outside [0, "
                               f"{self.vocab_size}) (the manifest's model.vocab_size)")
        return out

    def read_mask(self, a: int, b: int) -> np.ndarray:
        out = np.empty(b - a, dtype=np.uint8)
        if b > a:
            try:
                self.mask.read_direct(out, np.s_[a:b])
            except OSError as e:
                self._read_error(self.mask, "loss_mask", f"rows {a}..{b}", e)
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


def check_aux_points(ids: list[int], num_layers: int, src: str = "aux points") -> None:
    """EAGLE-3's auxiliary points, the one rule ``layertap.data.Eagle3Dataset`` and
    ``layertap-export`` share: decoder-layer inputs ``0..L-1`` (``last``/``final`` are targets),
    each at most once (a repeated layer feeds the draft the same state twice: a configuration
    mistake, e.g. ``eagle3`` on a model whose ``L // 2`` is 2). Raises ValueError naming them."""
    for k in ids:
        if not 0 <= k < num_layers:
            raise ValueError(f"{src} {list(ids)}: point {k} is outside the decoder-layer inputs "
                             f"0..{num_layers - 1} (L = {num_layers}); 'last'/'final' are targets")
    repeated = sorted({k for k in ids if list(ids).count(k) > 1})
    if repeated:
        raise ValueError(f"{src} {list(ids)} repeat layer{'s' if len(repeated) > 1 else ''} "
                         f"{', '.join(map(str, repeated))}")

