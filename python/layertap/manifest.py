"""The checks `layertap.data` and `layertap-export` apply to an output directory before they use
any of its values: its manifest by key and type, its shard paths confined to the directory, and
the HDF5 filters its shards need.

The rules mirror the C++ checker that `layertap inspect` and `layertap verify` share
(src/io/output_check.cpp ``read_manifest``/``check_plain_name``/``check_shard``, with the JSON
rules of src/model/json_fields.cpp and src/core/regular_file.cpp, and src/io/shard_reader.cpp
``structure_problems``, mirrored by ``output.ShardReader``), so the tools refuse the same outputs:

- a key that is missing or null is missing; an integer is a JSON integer (not a bool, not ``1.0``)
  in the range the C++ reader gives it; ``complete`` is the JSON boolean (``"false"``, a string,
  is refused, never taken as true); a string is a JSON string; ``compression`` is one
  io/compression.cpp parses (compared in its canonical form, ``zstd`` = ``zstd:1``);
- ``manifest.json`` is a regular file of at most 64 MiB, well-formed JSON (no NaN/Infinity)
  nested at most 16 levels deep;
- a shard file is a plain name inside the directory: not empty, no ``/`` (so never absolute),
  not ``.`` or ``..``; the file is present, a regular file, of the size the manifest records.

Stricter here than the C++ checker (which the Python readers need before reading a value):
a shard name that is a symbolic link must resolve inside the directory (the C++ checker follows
links); names are valid UTF-8 without NUL, each listed once; ``totals`` equal the sums over the
shards; ``dataset`` and ``run``, where present, have the types the tools read. Every failure is
an ``OutputError``: one line naming the file and the key.

python/tests/test_hostile_outputs.py runs one corpus of damaged outputs through these readers and
through ``layertap verify --samples 0`` and asserts the same verdict (accept or refuse) on each.
"""

from __future__ import annotations

import json
import os
import re
import stat as _stat
from pathlib import Path

__all__ = ["OutputError", "IncompleteOutputError", "read_manifest", "shard_file", "one_line",
           "FILTERS", "filter_problem", "ensure_filter", "Manifest", "canonical_compression",
           "expected_pipeline", "describe_pipeline"]

FORMAT_VERSION = 1                 # io/shard_writer.hpp kFormatVersion: the one version both read
KMAX = 1 << 62                     # output_check.cpp kMax: counts and sizes; keeps sums in int64
MAX_MANIFEST_BYTES = 64 << 20      # core/regular_file.hpp read_regular_file's default
MAX_DEPTH = 16                     # read_manifest: parse_json(..., 16)


def one_line(text: str) -> str:
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


class OutputError(ValueError):
    """A layertap output directory (its manifest or a shard) that is malformed, tampered with,
    or needs what this Python lacks (an HDF5 filter). The message is one line naming the file
    and the key or dataset, and what was expected."""

    def __init__(self, message: str):
        super().__init__(one_line(message))


class IncompleteOutputError(RuntimeError):
    """The output directory has no manifest, or its manifest says ``"complete": false``."""


def excerpt(value, max_chars: int = 64) -> str:
    """A JSON value as the C++ checker shows it (core/text.cpp excerpt)."""
    try:
        s = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        s = repr(value)
    return s if len(s) <= max_chars else f"{s[:max_chars]}... ({len(s)} bytes)"


def _type_name(v) -> str:        # nlohmann::json::type_name()
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _range(lo: int, hi: int) -> str:
    return f"[{lo}, {'2^62' if hi == KMAX else hi}]"


class _Fields:
    """model/json_fields.cpp JsonFields: typed access to one JSON object, naming the key (as a
    path from the top, e.g. ``shards[2].file``) and the file in every error."""

    def __init__(self, obj, file: Path, prefix: str = ""):
        self.file, self.prefix, self.obj = file, prefix, obj
        if not isinstance(obj, dict):
            where = f"key '{prefix.rstrip('.')}'" if prefix else "the top level"
            raise OutputError(f"{file}: {where} must be an object, found {_type_name(obj)} "
                              f"{excerpt(obj)}")

    def key(self, k: str) -> str:
        return f"{self.prefix}{k}"

    def has(self, k: str) -> bool:
        return self.obj.get(k) is not None

    def _fail_type(self, k: str, expected: str):
        v = self.obj[k]
        raise OutputError(f"{self.file}: key '{self.key(k)}' must be {expected}, found "
                          f"{_type_name(v)} {excerpt(v)}")

    def _need(self, k: str):
        if not self.has(k):
            raise OutputError(f"{self.file}: missing key '{self.key(k)}'")
        return self.obj[k]

    def integer(self, k: str, lo: int, hi: int) -> int:
        v = self._need(k)
        if type(v) is not int:
            self._fail_type(k, "an integer")
        if not lo <= v <= hi:
            raise OutputError(f"{self.file}: key '{self.key(k)}' = {excerpt(v)} is outside "
                              f"{_range(lo, hi)}")
        return v

    def integer_or(self, k: str, default, lo: int, hi: int):
        return self.integer(k, lo, hi) if self.has(k) else default

    def boolean(self, k: str) -> bool:
        v = self._need(k)
        if type(v) is not bool:
            self._fail_type(k, "true or false")
        return v

    def string(self, k: str) -> str:
        v = self._need(k)
        if not isinstance(v, str):
            self._fail_type(k, "a string")
        return v

    def string_or(self, k: str, default):
        return self.string(k) if self.has(k) else default

    def object(self, k: str) -> "_Fields":
        v = self._need(k)
        if not isinstance(v, dict):
            self._fail_type(k, "an object")
        return _Fields(v, self.file, f"{self.key(k)}.")

    def object_or_none(self, k: str) -> "_Fields | None":
        return self.object(k) if self.has(k) else None

    def array(self, k: str) -> list:
        v = self._need(k)
        if not isinstance(v, list):
            self._fail_type(k, "an array")
        return v


def _depth(value) -> int:
    """Container nesting depth (the top-level object is 1), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if d <= MAX_DEPTH:
                stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_COMPRESSION = re.compile(r"none|lz4|(zstd|gzip)(?::(-?[0-9]{1,9}))?")
SHUFFLE, DEFLATE, LZ4, ZSTD = 2, 1, 32004, 32015      # HDF5 filter ids (io/compression.hpp)


def canonical_compression(spec) -> str | None:
    """io/compression.cpp compression_name(parse_compression(spec)): "none", "lz4", "zstd:<level>"
    (level 0 or none given = 1, -7..22) or "gzip:<level>" (0 or none = 1, 1..9); None when
    the C++ parser refuses it."""
    m = _COMPRESSION.fullmatch(spec) if isinstance(spec, str) else None
    if m is None:
        return None
    if m.group(1) is None:
        return spec
    level = int(m.group(2) or 0) or 1
    lo, hi = (-7, 22) if m.group(1) == "zstd" else (1, 9)
    return f"{m.group(1)}:{level}" if lo <= level <= hi else None


def expected_pipeline(compression: str, element_size: int) -> list[tuple[int, int | None]]:
    """io/compression.cpp expected_pipeline: (filter id, level) in write order, for comparing a
    shard's /hidden_states filters with its manifest (output_check.cpp same_pipeline: ids, and
    the level of zstd and deflate)."""
    codec, _, level = compression.partition(":")
    if codec == "none":
        return []
    p: list[tuple[int, int | None]] = [(SHUFFLE, None)] if element_size > 1 else []
    p.append({"lz4": (LZ4, None), "zstd": (ZSTD, int(level or 1)),
              "gzip": (DEFLATE, int(level or 1))}[codec])
    return p


def describe_pipeline(pipeline: list[tuple[int, int | None]]) -> str:
    """io/compression.cpp describe_pipeline: "[shuffle, zstd:1]", "[]"."""
    names = {SHUFFLE: "shuffle", LZ4: "lz4", ZSTD: "zstd", DEFLATE: "deflate"}
    return "[" + ", ".join(
        (names[i] if i in names else f"filter {i}") + (f":{lv}" if lv is not None else "")
        for i, lv in pipeline) + "]"


def _parse_compression(f: _Fields) -> str:
    spec = f.string_or("compression", "none")
    canonical = canonical_compression(spec)
    if canonical is None:
        raise OutputError(f"{f.file}: key 'compression' = {excerpt(spec)} is not none, lz4, "
                          "zstd[:level -7..22] or gzip[:level 1..9]")
    return canonical


def _plain_name_problem(name: str) -> str | None:
    """output_check.cpp check_plain_name (plus NUL, which no path can hold)."""
    if name == "":
        return "is empty"
    if name.startswith("/"):
        return "is an absolute path"
    if ".." in name.split("/"):
        return "leads out of the directory through '..'"
    if "/" in name:
        return "holds a '/'"
    if name in (".", ".."):
        return "is '.' or '..'"
    if "\0" in name:
        return "holds a NUL character"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8 (a lone surrogate)"
    if not (len(name) > 3 and name.endswith(".h5")):    # a writer's unfinished file is .h5.tmp
        return "does not end in .h5 (a finished shard)"
    return None


class Manifest:
    """The fields the Python readers use, type-checked; ``raw`` keeps the whole JSON."""

    def __init__(self, raw: dict, path: Path, top: _Fields):
        self.raw, self.path = raw, path
        self.format_version = top.integer("format_version", 1, 1000)
        if self.format_version != FORMAT_VERSION:
            raise OutputError(f"{path}: key 'format_version' = {self.format_version}; this reader "
                              f"knows {FORMAT_VERSION}")
        self.complete = top.boolean("complete")
        self.storage_dtype = top.string("storage_dtype")
        if self.storage_dtype not in ("bfloat16", "float32", "float8_e4m3fn"):
            raise OutputError(f"{path}: key 'storage_dtype' = {excerpt(self.storage_dtype)} is not "
                              "bfloat16, float32 or float8_e4m3fn")
        if self.storage_dtype == "float8_e4m3fn":
            raise OutputError(f"{path}: key 'storage_dtype' = \"float8_e4m3fn\": layertap.data and "
                              "layertap-export read bfloat16 and float32 outputs (read float8 "
                              "shards as docs/FORMAT.md shows)")
        self.compression = _parse_compression(top)

        model = top.object("model")
        model.string("dir")
        # the model's identity, which every shard's attributes must repeat (check_shard)
        self.identity = {k: model.string(k) for k in ("architecture", "config_sha256",
                                                       "weights_fingerprint")}
        self.num_layers = model.integer("num_hidden_layers", 1, 1 << 20)
        self.hidden_size = model.integer("hidden_size", 1, 1 << 24)
        self.vocab_size = model.integer("vocab_size", 1, KMAX)

        capture = top.object("capture")
        capture.string("request")
        points = capture.array("points")
        if not points:
            raise OutputError(f"{path}: key 'capture.points' is empty (no capture points)")
        self.points = []          # (spec, id, meaning)
        for i, p in enumerate(points):
            pf = _Fields(p, path, f"capture.points[{i}].")
            self.points.append((pf.string("spec"), pf.integer("id", 0, self.num_layers + 1),
                                pf.string_or("meaning", "")))

        self.shards = []          # dicts with file, samples, tokens, first/last sample, bytes (validated)
        seen: dict[str, int] = {}
        previous_last = -1        # manifest order is dataset order: each entry after the one before
        for i, s in enumerate(top.array("shards")):
            sf = _Fields(s, path, f"shards[{i}].")
            name = sf.string("file")
            why = _plain_name_problem(name)
            if why:
                raise OutputError(f"{path}: key 'shards[{i}].file' = {excerpt(name)} {why}: a shard "
                                  "file is a plain file name inside the output directory")
            if name in seen:
                raise OutputError(f"{path}: key 'shards[{i}].file' = {excerpt(name)} repeats "
                                  f"shards[{seen[name]}]")
            seen[name] = i
            sf.string("sha256")
            entry = {"file": name, "samples": sf.integer("samples", 0, KMAX),
                     "tokens": sf.integer("tokens", 0, KMAX),
                     "first_sample": sf.integer("first_sample", -1, KMAX),
                     "last_sample": sf.integer("last_sample", -1, KMAX),
                     "bytes": sf.integer("bytes", 0, KMAX), "key": f"shards[{i}]"}
            if entry["samples"]:
                first, last = entry["first_sample"], entry["last_sample"]
                if not 0 <= first <= last:
                    raise OutputError(f"{path}: key 'shards[{i}]': first_sample {first} and "
                                      f"last_sample {last} do not bound {entry['samples']} samples")
                if first <= previous_last:
                    raise OutputError(f"{path}: key 'shards[{i}].first_sample' = {first} is not after "
                                      f"the previous shards' last sample {previous_last} (manifest "
                                      "order is dataset order; each sample is held once)")
                previous_last = last
            self.shards.append(entry)
        totals = top.object("totals")
        for k in ("samples", "tokens", "bytes"):
            want = sum(s[k] for s in self.shards)
            got = totals.integer(k, 0, KMAX)
            if got != want:
                raise OutputError(f"{path}: key 'totals.{k}' = {got}, but the shards listed sum "
                                  f"to {want}")

        ds = top.object_or_none("dataset")
        self.dataset_path = ds.string_or("path", None) if ds else None
        self.dataset_samples = ds.integer_or("samples", None, 0, KMAX) if ds else None
        self.skipped = self._skipped(top)
        if self.complete:
            self._check_every_sample_accounted(path, sum(s["samples"] for s in self.shards))
        run = top.object_or_none("run")
        self.stopped_by = run.string_or("stopped_by", None) if run else None
        # the backend decides `layertap verify`'s bound, so both readers check it
        backend = run.string_or("backend", "cpu") if run else "cpu"
        if backend not in ("cpu", "cuda"):
            raise OutputError(f"{path}: key 'run.backend' = {excerpt(backend)} is not cpu or cuda")

    @staticmethod
    def _skipped(top: _Fields) -> list[int]:
        """The indices of ``skipped_samples`` (``--on-nonfinite skip``), each checked."""
        if not top.has("skipped_samples"):
            return []
        return [_Fields(e, top.file, f"skipped_samples[{i}].").integer("index", 0, KMAX)
                for i, e in enumerate(top.array("skipped_samples"))]

    def _check_every_sample_accounted(self, path: Path, held: int):
        """A complete run holds or lists as skipped each of the dataset's samples, once
        (output_check.cpp manifest_count_problems)."""
        if self.dataset_samples is None:
            raise OutputError(f"{path}: the run is marked complete but names no 'dataset.samples', "
                              "so whether its shards hold every sample cannot be checked")
        n = self.dataset_samples
        if n == 0:      # extract refuses a dataset without samples
            raise OutputError(f"{path}: the run is marked complete over a dataset of 0 samples, "
                              "which no run produces")
        if held + len(self.skipped) != n:
            raise OutputError(f"{path}: its shards hold {held} samples and it lists "
                              f"{len(self.skipped)} skipped, not the dataset's {n}")
        seen = set()
        for i in sorted(self.skipped):
            if i >= n:
                raise OutputError(f"{path}: skipped_samples lists index {i}, outside the "
                                  f"dataset's {n} samples")
            if i in seen:
                raise OutputError(f"{path}: skipped_samples lists index {i} twice")
            seen.add(i)


def read_manifest(directory: str | os.PathLike) -> Manifest:
    """``<directory>/manifest.json``, checked. IncompleteOutputError when there is none (an
    interrupted run has none until --resume completes it); OutputError for anything malformed."""
    d = Path(directory)
    path = d / "manifest.json"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise IncompleteOutputError(
            f"{d}: no manifest.json; this is not a finished layertap output (an interrupted run "
            "has none until --resume completes it)") from None
    except OSError as e:
        raise OutputError(f"{path}: cannot be read: {e.strerror or e}") from None
    if not _stat.S_ISREG(st.st_mode):
        raise OutputError(f"{path}: is not a regular file")
    if st.st_size > MAX_MANIFEST_BYTES:
        raise OutputError(f"{path}: is {st.st_size} bytes, more than the {MAX_MANIFEST_BYTES} a "
                          "manifest may hold")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as e:
        raise OutputError(f"{path}: cannot be read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OutputError(f"{path}: malformed JSON: not UTF-8 at byte {e.start}") from None
    try:
        raw = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise OutputError(f"{path}: malformed JSON at line {e.lineno} column {e.colno}: "
                          f"{e.msg}") from None
    except RecursionError:
        raise OutputError(f"{path}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:    # NaN/Infinity, integers beyond Python's digit limit
        raise OutputError(f"{path}: malformed JSON: {e}") from None
    if _depth(raw) > MAX_DEPTH:
        raise OutputError(f"{path}: JSON nested deeper than {MAX_DEPTH} levels")
    return Manifest(raw, path, _Fields(raw, path))


def shard_file(directory: Path, shard: dict, manifest_path: Path) -> Path:
    """The path of a manifest's shard entry, confined to ``directory`` and checked as
    output_check.cpp check_shard checks the file: present, a regular file, of the recorded size.
    A name that is a symbolic link must resolve inside the directory."""
    name, key = shard["file"], shard["key"]
    p = directory / name
    base = os.path.realpath(directory)
    real = os.path.realpath(p)
    if real == base or os.path.commonpath([base, real]) != base:
        raise OutputError(f"{manifest_path}: key '{key}.file' = {excerpt(name)} is a symbolic link "
                          f"to {real}, outside the output directory")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise OutputError(f"{p}: missing (listed in manifest.json as {key})") from None
    except OSError as e:
        raise OutputError(f"{p}: cannot be opened ({key} in manifest.json): "
                          f"{e.strerror or e}") from None
    if not _stat.S_ISREG(st.st_mode):
        raise OutputError(f"{p}: is not a regular file ({key} in manifest.json)")
    if st.st_size != shard["bytes"]:
        raise OutputError(f"{p}: file is {st.st_size} bytes, manifest.json key '{key}.bytes' says "
                          f"{shard['bytes']} (truncated or changed after it was written)")
    return p


# ---- HDF5 filters ---------------------------------------------------------------------------
# The filters layertap writes (docs/FORMAT.md, Compression) and what a Python reader needs.
FILTERS = {
    32004: ("lz4", "the HDF5 LZ4 filter (32004)",
            "pip install hdf5plugin (layertap imports it when installed), or Debian's "
            "`apt install hdf5-filter-plugin` (Debian's h5py finds it; other builds with "
            "HDF5_PLUGIN_PATH=/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins)"),
    32015: ("zstd", "the HDF5 Zstandard filter (32015)",
            "pip install hdf5plugin (layertap imports it when installed; in your own h5py code "
            "`import hdf5plugin` before opening a shard)"),
}
CODEC_FILTER = {"lz4": LZ4, "zstd": ZSTD}


def _import_hdf5plugin() -> str | None:
    """Imports hdf5plugin (which registers its filters with h5py); None, or why it failed."""
    try:
        import hdf5plugin  # noqa: F401
    except ImportError:
        return "hdf5plugin is not importable"
    except Exception as e:  # a broken install: say so rather than fail
        return f"import hdf5plugin failed: {one_line(e)}"
    return None


def filter_available(filter_id: int) -> bool:
    """Whether HDF5 can decode the filter (H5Zfilter_avail also loads it from HDF5_PLUGIN_PATH)."""
    import h5py

    try:
        return bool(h5py.h5z.filter_avail(int(filter_id)))
    except Exception:
        return False


def ensure_filter(filter_id: int) -> str | None:
    """None when HDF5 can decode ``filter_id`` (importing hdf5plugin first if needed); else what
    is missing and what to install (filter_problem)."""
    if filter_available(filter_id):
        return None
    why = _import_hdf5plugin()
    if why is None and filter_available(filter_id):
        return None
    return filter_problem(filter_id, why)


def filter_problem(filter_id: int, why: str | None = None) -> str:
    """What is missing and what to install, to follow "needs" ("/hidden_states needs ...")."""
    if filter_id in FILTERS:
        _, name, fix = FILTERS[filter_id]
        return f"{name}, which this h5py cannot decode{f' ({why})' if why else ''}: {fix}"
    return (f"HDF5 filter {filter_id}, which this h5py cannot decode"
            f"{f' ({why})' if why else ''}: pip install hdf5plugin provides most registered filters")


def is_filter_error(e: BaseException) -> bool:
    s = str(e).lower()
    return "filter" in s or "plugin" in s
