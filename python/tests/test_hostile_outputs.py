"""Hostile and damaged output directories: one corpus, run through both readers of the format.

Each ROWS case is refused by layertap.data (an OutputError whose message is one line naming the
file, the manifest or the shard, and the key or dataset), by layertap-export (`layertap-export:
error: ...`, exit 2, no traceback) and by the C++ checker (`layertap verify --samples 0`: every
shard opened and checked against the manifest, every value read; exit 1 naming the file). ACCEPTED
lists the valid outputs all three read. So the Python reader and the C++ checker give the same
verdict on every case. The outputs are synthetic (layertap.synthetic), tampered per row."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import h5py
import numpy as np
import pytest

import layertap.manifest
from layertap.data import HiddenStatesDataset, OutputError
from layertap.export import main
from layertap.output import Output
from layertap.synthetic import bf16_type, write_output

L, H, POINTS = 8, 8, [2, 4, 5, 8, 9]     # modelopt's defaults for L = 8: aux 2, 4, 5; final 9
LENGTHS = [3, 4, 5, 2, 6]                 # 3 shards: samples (0, 1), (2, 3), (4,)
M, S0, S1 = "manifest.json", "shard-00000.h5", "shard-00001.h5"


# ---- tampering helpers -----------------------------------------------------------------------
def edit_manifest(out: Path, fn):
    m = json.loads((out / M).read_text())
    fn(m)
    (out / M).write_text(json.dumps(m))


def resize_manifest(out: Path):
    """Record the shards' current sizes and checksums (so a row reaches the check it is about,
    not the C++ checker's SHA-256 comparison)."""
    def fix(m):
        for s in m["shards"]:
            p = out / s["file"]
            if p.is_file():
                s["bytes"] = p.stat().st_size
                s["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
        m["totals"]["bytes"] = sum(s["bytes"] for s in m["shards"])
    edit_manifest(out, fix)


def edit_shard(name: str, fn):
    def mutate(out: Path, tmp: Path):
        with h5py.File(out / name, "r+") as f:
            fn(f, tmp)
        resize_manifest(out)
    return mutate


def manifest(fn):
    return lambda out, tmp: edit_manifest(out, fn)


def replace(f, name, data=None, **kw):
    del f[name]
    return f.create_dataset(name, data=data, **kw)


def shard_T(f):
    return int(f["input_ids"].shape[0])


def set_path(m, path: str, value):
    keys = path.split(".")
    d = m
    for k in keys[:-1]:
        d = d[int(k)] if isinstance(d, list) else d[k]
    last = keys[-1]
    if value is DELETE:
        del d[last]
    elif isinstance(d, list):
        d[int(last)] = value
    else:
        d[last] = value


DELETE = object()


def key(path: str, value=DELETE):
    return manifest(lambda m: set_path(m, path, value))


def outside_copy(out: Path, tmp: Path) -> Path:
    p = tmp / "outside.h5"
    shutil.copy(out / S0, p)
    return p


def dotdot(out, tmp):
    shutil.copy(out / S0, out.parent / "x.h5")
    edit_manifest(out, lambda m: set_path(m, "shards.0.file", "../x.h5"))


def absolute(out, tmp):
    p = outside_copy(out, tmp)
    edit_manifest(out, lambda m: set_path(m, "shards.0.file", str(p)))


def symlink_out(out, tmp):
    p = tmp / "elsewhere.h5"
    shutil.move(out / S0, p)
    os.symlink(p, out / S0)


def truncate(update_size: bool):
    def mutate(out, tmp):
        b = (out / S0).read_bytes()
        (out / S0).write_bytes(b[:len(b) // 2])
        if update_size:
            resize_manifest(out)
    return mutate


def deep_json(m):
    v = []
    for _ in range(20):
        v = [v]
    m["run"]["nested"] = v


def totals_plus_one(m):
    m["totals"]["samples"] += 1


def shard_samples_three(m):          # the counts agree with each other, not with the shard
    m["shards"][0]["samples"] = 3
    m["totals"]["samples"] += 1
    m["dataset"]["samples"] += 1


def zstd_dataset(f, name, tid, shape, raw: bytes, shuffle=True):
    """`name` replaced by a dataset whose pipeline is [shuffle,] zstd:1 as layertap writes it,
    its one chunk stored as `raw` (the filter is optional here so that h5py can create it
    without the filter; reading it still needs the filter)."""
    del f[name]
    space = h5py.h5s.create_simple(shape, (h5py.h5s.UNLIMITED,) + shape[1:])
    plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    plist.set_chunk(shape)
    if shuffle:
        plist.set_shuffle()
    plist.set_filter(32015, h5py.h5z.FLAG_OPTIONAL, (1,))
    ds = h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=plist)
    ds.write_direct_chunk((0,) * len(shape), raw, filter_mask=0)


def zstd_hidden(f, tmp):
    T, P = shard_T(f), len(POINTS)
    zstd_dataset(f, "hidden_states", bf16_type(), (T, P, H), bytes(T * P * H * 2))


def zstd_compressed_shard(f, tmp):          # consistent with a manifest saying zstd:1
    zstd_hidden(f, tmp)
    f.attrs["compression"] = "zstd:1"


def zstd_index(f, tmp):
    idx = f["sample_index"][...].astype("<i8")
    zstd_dataset(f, "sample_index", h5py.h5t.STD_I64LE, idx.shape, idx.tobytes(), shuffle=False)


def zstd_output(out, tmp):
    for name in (S0, S1, "shard-00002.h5"):
        edit_shard(name, zstd_compressed_shard)(out, tmp)
    edit_manifest(out, lambda m: m.update(compression="zstd:1"))


def short_index(out, tmp):
    with h5py.File(out / S0, "r+") as f:
        replace(f, "sample_index", np.array([0], dtype=np.int64), maxshape=(None,))
    resize_manifest(out)
    edit_manifest(out, lambda m: (m["shards"][0].update(samples=1),
                                  m["totals"].update(samples=m["totals"]["samples"] - 1),
                                  m["dataset"].update(samples=m["dataset"]["samples"] - 1)))


def ids_outside_vocab(f, tmp):
    ids = f["input_ids"][...]
    ids[1] = 100                     # vocab_size is 100
    f["input_ids"][...] = ids


def external_link(f, tmp):
    other = tmp / "other.h5"
    with h5py.File(other, "w") as g:
        g["input_ids"] = f["input_ids"][...]
    del f["input_ids"]
    f["input_ids"] = h5py.ExternalLink(str(other), "/input_ids")


def external_storage(f, tmp):
    ids = f["input_ids"][...].astype("<i4")
    raw = tmp / "raw.bin"
    raw.write_bytes(ids.tobytes())
    del f["input_ids"]
    f.create_dataset("input_ids", shape=ids.shape, dtype="<i4",
                     external=[(str(raw), 0, ids.nbytes)])


def dup_index_next_shard(f, tmp):      # shard 1 repeats shard 0's sample indices
    f["sample_index"][...] = np.array([0, 1], dtype=np.int64)


def swap_entries(m):                   # sizes, checksums and counts stay consistent
    m["shards"][0], m["shards"][1] = m["shards"][1], m["shards"][0]


def repeat_entry(out, tmp):            # shard 1 replaced by a copy of shard 0, counts consistent
    shutil.copy(out / S0, out / S1)
    edit_manifest(out, lambda m: m["shards"].__setitem__(1, dict(m["shards"][0], file=S1)))
    edit_manifest(out, lambda m: (m["totals"].update(samples=sum(s["samples"] for s in m["shards"]),
                                                     tokens=sum(s["tokens"] for s in m["shards"])),
                                  m["dataset"].update(samples=m["totals"]["samples"])))
    resize_manifest(out)


def tmp_shard(out, tmp):               # the last shard listed under a writer's unfinished name
    (out / "shard-00002.h5").rename(out / "shard-00002.h5.tmp")
    edit_manifest(out, lambda m: set_path(m, "shards.2.file", "shard-00002.h5.tmp"))


def empty_run(m):                      # complete, consistent in itself, and of nothing
    m["shards"], m["totals"], m["dataset"]["samples"] = [], {"samples": 0, "tokens": 0, "bytes": 0}, 0


def routing(layers, k, rows_layers=None):
    """A MoE routing record on a shard: attributes for `layers` and k, and /routed_experts with
    rows_layers (default: as many as `layers`) layers per token."""
    def mutate(f, tmp):
        f.attrs["routed_layers"] = np.array(layers, dtype=np.int64)
        f.attrs["routed_top_k"] = np.int64(k)
        m = len(layers) if rows_layers is None else rows_layers
        f.create_dataset("routed_experts", data=np.zeros((shard_T(f), m, k), dtype="<i2"), maxshape=(None, m, k))
    return mutate


def routing_everywhere(out, tmp):
    for name in (S0, S1, "shard-00002.h5"):
        edit_shard(name, routing([1, 3, 5], 2))(out, tmp)


def manifest_dir(out, tmp):
    (out / M).unlink()
    (out / M).mkdir()


def shard_dir(out, tmp):
    (out / S1).unlink()
    (out / S1).mkdir()


@dataclass
class Row:
    id: str
    mutate: Callable
    file: str                        # the file the message names, relative to the output
    needles: list[str]               # the key or dataset, and what was expected
    tools: tuple = ("dataset", "cli", "verify")
    filters_pretend_available: bool = False
    cpp_file: str | None = None      # the file the C++ checker names, where it finds the fault there


ROWS = [
    # shard paths
    Row("path-dotdot", dotdot, M, ["'shards[0].file'", '"../x.h5"', "through '..'", "plain file name"]),
    Row("path-absolute", absolute, M, ["'shards[0].file'", "absolute path"]),
    Row("path-symlink-out", symlink_out, M, ["'shards[0].file'", "symbolic link", "outside"]),
    Row("path-lone-surrogate", key("shards.0.file", "\ud800.h5"), M,
        ["'shards[0].file' = \"\\ud800.h5\"", "not valid UTF-8"]),
    Row("shard-name-repeated", key("shards.1.file", S0), M, ["'shards[1].file'", "repeats shards[0]"]),
    Row("shard-file-missing", lambda o, t: (o / S1).unlink(), S1, ["missing", "shards[1]"]),
    Row("shard-is-directory", shard_dir, S1, ["not a regular file", "shards[1]"]),
    # the manifest by key and type
    Row("complete-string-false", key("complete", "false"), M,
        ["'complete'", "must be true or false", 'string "false"']),
    Row("complete-missing", key("complete"), M, ["missing key 'complete'"]),
    Row("model-missing", key("model"), M, ["missing key 'model'"]),
    Row("hidden-size-missing", key("model.hidden_size"), M, ["missing key 'model.hidden_size'"]),
    Row("shards-missing", key("shards"), M, ["missing key 'shards'"]),
    Row("shards-object", key("shards", {}), M, ["'shards'", "must be an array"]),
    Row("shard-entry-string", key("shards.1", S1), M, ["'shards[1]'", "must be an object"]),
    Row("file-integer", key("shards.0.file", 5), M, ["'shards[0].file'", "must be a string"]),
    Row("layers-string", key("model.num_hidden_layers", "8"), M,
        ["'model.num_hidden_layers'", "must be an integer"]),
    Row("samples-float", key("shards.0.samples", 2.0), M, ["'shards[0].samples'", "must be an integer"]),
    Row("point-id-bool", key("capture.points.0.id", True), M,
        ["'capture.points[0].id'", "must be an integer"]),
    Row("point-id-range", key("capture.points.0.id", 99), M, ["'capture.points[0].id'", "outside [0, 9]"]),
    Row("points-empty", key("capture.points", []), M, ["'capture.points'", "empty"]),
    Row("format-version", key("format_version", 2), M, ["'format_version'", "knows 1"]),
    Row("storage-dtype", key("storage_dtype", "float16"), M, ["'storage_dtype'", "bfloat16, float32"]),
    Row("dataset-string", key("dataset", "x"), M, ["'dataset'", "must be an object"]),
    Row("compression-unknown", key("compression", "brotli"), M, ["'compression'", "zstd[:level"]),
    Row("malformed-json", lambda o, t: (o / M).write_text('{"format_version": 1,'), M,
        ["malformed JSON", "line 1"]),
    Row("nested-json", manifest(deep_json), M, ["nested deeper than 16"]),
    Row("manifest-directory", manifest_dir, M, ["not a regular file"]),
    # counts: non-negative and consistent
    Row("samples-negative", key("shards.0.samples", -1), M, ["'shards[0].samples' = -1", "outside [0, 2^62]"]),
    Row("tokens-total-negative", key("totals.tokens", -5), M, ["'totals.tokens' = -5", "outside"]),
    Row("totals-inconsistent", manifest(totals_plus_one), M, ["'totals.samples' = 6", "sum to 5"]),
    Row("samples-vs-shard", manifest(shard_samples_three), S0, ["/sample_index", "manifest says 3"]),
    Row("shard-size-differs", truncate(update_size=False), S0, ["'shards[0].bytes'", "truncated"]),
    # shard datasets, before any value is used
    Row("shard-truncated", truncate(update_size=True), S0, ["cannot be read as HDF5", "truncated"]),
    Row("no-sample-index", edit_shard(S0, lambda f, t: f.__delitem__("sample_index")), S0,
        ["/sample_index is missing"]),
    Row("no-hidden-states", edit_shard(S0, lambda f, t: f.__delitem__("hidden_states")), S0,
        ["/hidden_states is missing"]),
    Row("hidden-group", edit_shard(S0, lambda f, t: (f.__delitem__("hidden_states"),
                                                     f.create_group("hidden_states"))), S0,
        ["/hidden_states is a group"]),
    Row("hidden-rank-2", edit_shard(S0, lambda f, t: replace(f, "hidden_states",
                                                             np.zeros((shard_T(f), 5), "f4"))), S0,
        ["/hidden_states has rank 2, expected 3"]),
    Row("hidden-width", edit_shard(S0, lambda f, t: replace(f, "hidden_states",
                                                            np.zeros((shard_T(f), 5, H + 1), "f4"))), S0,
        ["/hidden_states has shape [7, 5, 9]", "expected [T, P, H] = [7, 5, 8]"]),
    Row("hidden-points", edit_shard(S0, lambda f, t: replace(f, "hidden_states",
                                                             np.zeros((shard_T(f), 4, H), "f4"))), S0,
        ["/hidden_states has shape [7, 4, 8]"]),
    Row("hidden-float16", edit_shard(S0, lambda f, t: replace(f, "hidden_states",
                                                              np.zeros((shard_T(f), 5, H), "f2"))), S0,
        ["/hidden_states is stored as float16, expected bfloat16"]),
    Row("ids-float", edit_shard(S0, lambda f, t: replace(f, "input_ids", f["input_ids"][...] * 1.0)), S0,
        ["/input_ids is stored as float64, expected integers"]),
    Row("mask-short", edit_shard(S0, lambda f, t: replace(f, "loss_mask", f["loss_mask"][:-1])), S0,
        ["/loss_mask has 6 entries for the 7 tokens"]),
    Row("offsets-end", edit_shard(S0, lambda f, t: f["sample_offsets"].__setitem__(-1, 6)), S0,
        ["/sample_offsets spans [0, 6], expected [0, 7]"]),
    Row("offsets-not-increasing", edit_shard(S0, lambda f, t: f["sample_offsets"].__setitem__(1, 7)), S0,
        ["/sample_offsets is not increasing at sample 1"]),
    Row("index-shorter-than-offsets", short_index, S0,
        ["/sample_offsets has 3 entries for the 1 samples of /sample_index"]),
    Row("index-negative", edit_shard(S0, lambda f, t: f["sample_index"].__setitem__(0, -1)), S0,
        ["/sample_index holds -1"]),
    Row("index-beyond-dataset", edit_shard(S0, lambda f, t: f["sample_index"].__setitem__(1, 50)), S0,
        ["/sample_index holds 50", "dataset.samples is 5"]),
    # manifest order is dataset order: entries in order, each shard holding its entry's samples
    Row("index-order-across-shards", edit_shard(S1, dup_index_next_shard), S1,
        ["/sample_index runs from 0 to 1, manifest says first_sample 2, last_sample 3"]),
    Row("entries-swapped", manifest(swap_entries), M,
        ["'shards[1].first_sample' = 0", "not after the previous shards' last sample 3"]),
    Row("entry-repeats-samples", repeat_entry, M,
        ["'shards[1].first_sample' = 0", "not after the previous shards' last sample 1"]),
    Row("entry-first-last-vs-shard", key("shards.1.last_sample", 2), S1,
        ["/sample_index runs from 2 to 3, manifest says first_sample 2, last_sample 2"]),
    Row("unfinished-shard-listed", tmp_shard, M, ["'shards[2].file'", "does not end in .h5"]),
    Row("complete-empty-dataset", manifest(empty_run), M, ["complete over a dataset of 0 samples"]),
    # a MoE output's routing record (what verify replays) agrees with its attributes
    Row("routing-shape", edit_shard(S0, routing([1, 3, 5], 2, rows_layers=2)), S0,
        ["/routed_experts has shape [7, 2, 2], expected [T, layers, top-k] = [7, 3, 2]"]),
    Row("routing-attribute-alone", edit_shard(S0, lambda f, t: f.attrs.__setitem__(
        "routed_layers", np.array([1, 3], dtype=np.int64))), S0, ["attribute routed_layers without /routed_experts"]),
    Row("external-link", edit_shard(S0, external_link), S0, ["/input_ids is an external link to", "other.h5"]),
    Row("external-storage", edit_shard(S0, external_storage), S0,
        ["/input_ids keeps its data outside the shard"]),
    Row("attr-point-ids", edit_shard(S0, lambda f, t: f.attrs.__setitem__(
        "capture_point_ids", np.array([1, 4, 5, 8, 9]))), S0,
        ["attribute capture_point_ids = [1, 4, 5, 8, 9], manifest says [2, 4, 5, 8, 9]"]),
    Row("attr-dtype", edit_shard(S0, lambda f, t: f.attrs.__setitem__("dtype", "float32")), S0,
        ["attribute dtype = \"float32\", manifest says bfloat16"]),
    Row("attr-missing", edit_shard(S0, lambda f, t: f.attrs.__delitem__("num_layers")), S0,
        ["attribute num_layers is missing"]),
    Row("ids-outside-vocab", edit_shard(S0, ids_outside_vocab), S0,
        ["/input_ids rows 0..3 hold token id 100, outside [0, 100)"]),
    # compressed outputs without their plugin (hdf5plugin made unimportable in every row)
    Row("zstd-manifest", key("compression", "zstd:1"), M,
        ["'compression' = \"zstd:1\"", "the shards need the HDF5 Zstandard filter (32015)", "hdf5plugin is not importable",
         "pip install hdf5plugin"], cpp_file=S0),
    Row("lz4-manifest", key("compression", "lz4"), M,
        ["'compression' = \"lz4\"", "LZ4 filter (32004)", "pip install hdf5plugin",
         "hdf5-filter-plugin", "HDF5_PLUGIN_PATH"], cpp_file=S0),
    Row("zstd-dataset-in-shard", edit_shard(S0, zstd_index), S0,
        ["/sample_index needs the HDF5 Zstandard filter (32015)", "pip install hdf5plugin"]),
    Row("zstd-h5py-read-error", zstd_output, S0,
        ["reading rows 0..3 of /hidden_states failed", "pip install hdf5plugin"],
        filters_pretend_available=True),
    # the shard's storage against the manifest (output_check.cpp storage_problems)
    Row("pipeline-vs-manifest", edit_shard(S0, zstd_hidden), S0,
        ["/hidden_states is filtered by [shuffle, zstd:1], manifest says compression none ([])"]),
    Row("compression-attr-vs-manifest", edit_shard(S0, lambda f, t: f.attrs.__setitem__(
        "compression", "zstd:3")), S0, ["attribute compression = \"zstd:3\", manifest says none"]),
    # the model's identity and provenance (output_check.cpp check_shard, manifest.cpp)
    Row("attr-identity-missing", edit_shard(S0, lambda f, t: f.attrs.__delitem__("config_sha256")), S0,
        ["attribute config_sha256 is missing"]),
    Row("attr-convention-missing", edit_shard(S0, lambda f, t: f.attrs.__delitem__("capture_convention")),
        S0, ["attribute capture_convention is missing"]),
    Row("attr-other-model", edit_shard(S1, lambda f, t: f.attrs.__setitem__(
        "architecture", "MistralForCausalLM")), S1,
        ["attribute architecture = \"MistralForCausalLM\", manifest says \"LlamaForCausalLM\""]),
    Row("backend-unknown", key("run.backend", "rocm"), M, ["'run.backend' = \"rocm\"", "cpu or cuda"]),
    # a complete run accounts for every sample of the dataset: held once or listed as skipped
    Row("sample-unaccounted", key("dataset.samples", 6), M,
        ["shards hold 5 samples and it lists 0 skipped, not the dataset's 6"]),
    Row("complete-without-dataset-samples", key("dataset.samples"), M, ["names no 'dataset.samples'"]),
    Row("skipped-twice", manifest(lambda m: (m["dataset"].update(samples=7), m.update(
        skipped_samples=[{"index": 5}, {"index": 5}]))), M, ["skipped_samples lists index 5 twice"]),
    Row("skipped-outside", manifest(lambda m: (m["dataset"].update(samples=6), m.update(
        skipped_samples=[{"index": 6}]))), M, ["skipped_samples lists index 6, outside"]),
    Row("skipped-also-held", manifest(lambda m: (m["dataset"].update(samples=6), m.update(
        skipped_samples=[{"index": 3}]))), S1, ["/sample_index holds 3", "lists in skipped_samples"]),
    Row("skipped-without-index", manifest(lambda m: (m["dataset"].update(samples=6), m.update(
        skipped_samples=[{"id": "x"}]))), M, ["missing key 'skipped_samples[0].index'"]),
]

# Valid outputs every reader accepts: the base output, a shard name that is a link inside the
# directory, a complete `--on-nonfinite skip` run (samples 1 and 4 of 7 skipped).
def inner_symlink(out, tmp):
    (out / "real-00000.h5").write_bytes((out / S0).read_bytes())
    (out / S0).unlink()
    os.symlink("real-00000.h5", out / S0)


ACCEPTED = [("base", LENGTHS, (), lambda o, t: None),
            ("routing-record", LENGTHS, (), routing_everywhere),
            ("inner-symlink", LENGTHS, (), inner_symlink),
            ("skipped-samples", LENGTHS, (1, 4), lambda o, t: None)]


@pytest.fixture
def no_hdf5plugin(monkeypatch):
    monkeypatch.setitem(sys.modules, "hdf5plugin", None)
    for fid in (32004, 32015):
        if h5py.h5z.filter_avail(fid):
            pytest.skip(f"HDF5 filter {fid} is already registered in this process")


def make_output(tmp: Path, lengths=LENGTHS, skipped=()) -> Path:
    return write_output(tmp / "out", L, H, POINTS, lengths, samples_per_shard=2, vocab_size=100,
                        skipped=skipped)


def cpp_verify(layertap_bin: Path, out: Path) -> subprocess.CompletedProcess:
    """The C++ checker: every shard against the manifest and every value read, no recomputation."""
    return subprocess.run([str(layertap_bin), "verify", str(out), "--samples", "0"],
                          capture_output=True, text=True, timeout=120)


def check_message(msg: str, out: Path, row: Row):
    assert "\n" not in msg and "\r" not in msg, msg
    assert str(out / row.file) in msg, msg
    for n in row.needles:
        assert n in msg, (n, msg)


CASES = [(row, tool) for row in ROWS for tool in row.tools]


@pytest.mark.parametrize("row, tool", CASES, ids=[f"{r.id}-{t}" for r, t in CASES])
def test_hostile_output(row, tool, tmp_path, monkeypatch, capsys, request):
    """`dataset`: HiddenStatesDataset built and every item read; `cli`: layertap-export's main;
    `verify`: the C++ checker, which has every filter built in (so no hdf5plugin games)."""
    out = make_output(tmp_path)
    row.mutate(out, tmp_path)
    if tool == "verify":
        r = cpp_verify(request.getfixturevalue("layertap_bin"), out)
        text = r.stdout + r.stderr
        assert r.returncode == 1, text
        problems = [ln for ln in text.splitlines() if ln.startswith("PROBLEM ")]
        assert problems and (row.cpp_file or row.file) in problems[0], text
        return
    request.getfixturevalue("no_hdf5plugin")
    if row.filters_pretend_available:     # past the pipeline check, to h5py's own read error
        monkeypatch.setattr(layertap.manifest, "filter_available", lambda fid: True)
    if tool == "dataset":
        with pytest.raises(Exception) as ei:
            ds = HiddenStatesDataset(out)
            for n in range(len(ds)):
                ds[n]
        assert ei.type is OutputError, repr(ei.value)
        check_message(str(ei.value), out, row)
    else:
        rc = main(["--to", "modelopt", str(out), str(tmp_path / "dest"), "--quiet"])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert "Traceback" not in err
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("layertap-export: error: "), err
        check_message(lines[0], out, row)


@pytest.mark.parametrize("name, lengths, skipped, mutate", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_valid_output_accepted_by_every_reader(name, lengths, skipped, mutate, layertap_bin,
                                               tmp_path):
    """Each reader takes the valid outputs whole: every sample, in dataset order less the
    skipped ones; `layertap verify --samples 0` exits 0."""
    out = make_output(tmp_path, lengths, skipped)
    mutate(out, tmp_path)
    held = [i for i in range(len(lengths) + len(skipped)) if i not in skipped]
    ds = HiddenStatesDataset(out)
    assert [ds[n]["sample_index"] for n in range(len(ds))] == held
    assert main(["--to", "modelopt", str(out), str(tmp_path / "dest"), "--quiet"]) == 0
    assert len(list((tmp_path / "dest" / "data").glob("*.pt"))) == len(held)
    r = cpp_verify(layertap_bin, out)
    assert r.returncode == 0, r.stdout + r.stderr


def test_cli_subprocess_zstd_without_plugin(tmp_path):
    """The real process: a zstd shard, hdf5plugin unimportable and no plugin folder: one line on
    stderr naming the package, exit 2, no traceback."""
    out = make_output(tmp_path)
    zstd_output(out, tmp_path)
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    code = ("import sys; sys.modules['hdf5plugin'] = None; from layertap.export import main; "
            "sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "--to", "modelopt", str(out),
                        str(tmp_path / "dest"), "--quiet"], capture_output=True, text=True,
                       env=dict(os.environ, HDF5_PLUGIN_PATH=str(empty)))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"layertap-export: error: {out / M}: key 'compression'")
    assert "pip install hdf5plugin" in lines[0]
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("codec, fid", [("zstd", 32015), ("lz4", 32004), ("gzip", 1)])
def test_real_compressed_output(codec, fid, layertap_bin, tmp_path, monkeypatch):
    """What `layertap extract --compress` writes: its shards agree with its manifest (attributes
    and filter pipeline) and read exactly when this Python has the filter (hdf5plugin imported
    by the reader; gzip is HDF5's own), else refused naming the package to install."""
    from conftest import DEMO_DATA, TINY_MODEL, extract

    data = tmp_path / "three.jsonl"
    data.write_text("".join(DEMO_DATA.read_text().splitlines(keepends=True)[:3]))
    out = extract(layertap_bin, TINY_MODEL, data, tmp_path / "out", "1,2,3,last,final",
                  extra=["--compress", codec])
    assert json.loads((out / M).read_text())["compression"].split(":")[0] == codec
    problem = layertap.manifest.ensure_filter(fid)
    if problem is None:
        ds = HiddenStatesDataset(out)
        with h5py.File(out / S0, "r") as f:
            off = f["sample_offsets"][...]
            want = f["hidden_states"][off[0]:off[1]]
        assert np.array_equal(ds[0]["hidden_states"].float().numpy(), want)
        return
    with pytest.raises(OutputError) as ei:
        HiddenStatesDataset(out)
    msg = str(ei.value)
    assert "\n" not in msg and str(out / M) in msg and "'compression'" in msg
    assert "pip install hdf5plugin" in msg
    with pytest.raises(OutputError, match="pip install hdf5plugin"):
        Output(out)
    # past the availability checks: the shard's pipeline agrees with the manifest, and h5py's
    # own error for the missing filter comes back as one line naming the shard and the package
    monkeypatch.setattr(layertap.manifest, "filter_available", lambda f: True)
    ds = HiddenStatesDataset(out)
    with pytest.raises(OutputError) as ei:
        ds[0]
    msg = str(ei.value)
    assert "\n" not in msg and str(out / S0) in msg, msg
    assert "of /hidden_states failed" in msg and "pip install hdf5plugin" in msg, msg
