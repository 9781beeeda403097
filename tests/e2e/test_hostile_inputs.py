#!/usr/bin/env python3
"""Hostile inputs to `layertap extract`, one row per class: damaged safetensors (each rule of the
header validator), index entries that leave the model directory, config values that would size
allocations or poison the math, hostile dataset lines, pipes, and unusable output paths.

Each row asserts: exit code 1 (an error, not a signal or a hang), the file/key/tensor named in the
message, a message of bounded length, and no manifest.json written. One row runs under mpirun
-np 2 and asserts that the job fails as a whole.
"""
import itertools
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest
from pathlib import Path

from e2e_common import ARGS, ENV, read_safetensors_raw, run_tests

RUNS = itertools.count()  # a fresh --out per run


def write_safetensors(path, header_text, data):
    h = header_text.encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


class Hostile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="layertap-hostile-"))
        cls.fixtures = Path(ARGS.fixtures)
        cls.good_model = cls.fixtures / "models" / "llama"
        cls.good_data = cls.fixtures / "data" / "golden.jsonl"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- building hostile inputs ----

    def model_copy(self, name):
        d = self.tmp / "models" / name
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.good_model, d)
        return d

    def with_header(self, name, edit):
        """A model whose safetensors header is rewritten by edit(header dict, data) -> (text, data)."""
        d = self.model_copy(name)
        header, data = read_safetensors_raw(d / "model.safetensors")
        text, data = edit(header, data)
        write_safetensors(d / "model.safetensors", text, data)
        return d

    def with_config(self, name, **changes):
        d = self.model_copy(name)
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(changes)
        (d / "config.json").write_text(json.dumps(cfg))
        return d

    def data_file(self, name, text):
        p = self.tmp / "data" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p

    # ---- running ----

    def extract(self, model=None, data=None, out=None, extra=(), np_=0, timeout=60):
        out = out or self.tmp / "out" / f"{self.id().split('.')[-1]}-{next(RUNS)}"
        cmd = [ARGS.layertap, "extract", "--model", model or self.good_model, "--data", data or self.good_data,
               "--out", out, "--log-level", "warning", *extra]
        if np_:
            cmd = [ARGS.mpirun, "--oversubscribe", "-np", str(np_), *cmd]
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout, env=ENV)
        return p, Path(out)

    def expect_refused(self, expected, **kw):
        p, out = self.extract(**kw)
        self.assertEqual(p.returncode, 1, f"exit {p.returncode}\n{p.stderr[-3000:]}")
        for part in expected:
            self.assertIn(part, p.stderr, p.stderr[-3000:])
        self.assertLess(len(p.stderr), 4000, "the message quotes too much: " + p.stderr[:500])
        self.assertFalse((out / "manifest.json").exists(), "a manifest was written")

    # ---- safetensors: one row per rule of the header validator ----

    def test_safetensors_header(self):
        def duplicate(h, data):
            text = json.dumps(h)
            name = next(k for k in h if k != "__metadata__")
            entry = json.dumps(h[name])
            return text[:-1] + f', "{name}": {entry}}}', data

        def overlap(h, data):
            # The second tensor moved onto the first one's bytes, its size unchanged.
            a, b = [k for k in h if k != "__metadata__"][:2]
            start, (b0, b1) = h[a]["data_offsets"][0], h[b]["data_offsets"]
            h[b]["data_offsets"] = [start, start + b1 - b0]
            return json.dumps(h), data

        def gap(h, data):
            return json.dumps(h), data + b"\0\0\0\0"

        def overflow(h, data):
            h["huge.weight"] = {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [len(data), len(data)]}
            return json.dumps(h), data

        def unknown_dtype(h, data):
            name = next(k for k in h if k != "__metadata__")
            h[name]["dtype"] = "Q7"
            return json.dumps(h), data

        def size_mismatch(h, data):
            name = next(k for k in h if k != "__metadata__" and h[k]["shape"] and h[k]["shape"][0] > 1)
            h[name]["shape"][0] -= 1
            return json.dumps(h), data

        def past_end(h, data):
            return json.dumps(h), data[:-8]

        def deep(h, data):
            return '{"__metadata__": ' + "[" * 100000, data

        rows = [
            ("duplicate", duplicate, ["model.safetensors", "appears twice in the header"]),
            ("overlap", overlap, ["model.safetensors", "overlaps"]),
            ("gap", gap, ["model.safetensors", "cover"]),
            ("overflow", overflow, ["huge.weight", "overflows 64 bits"]),
            ("dtype", unknown_dtype, ["model.safetensors", "Q7"]),
            ("size", size_mismatch, ["model.safetensors", "its shape and dtype need"]),
            ("past end", past_end, ["model.safetensors", "out of the file"]),
            ("deep", deep, ["model.safetensors"]),
        ]
        for name, edit, expected in rows:
            with self.subTest(name):
                self.expect_refused(expected, model=self.with_header(name.replace(" ", "_"), edit))

        with self.subTest("header length beyond the file"):
            d = self.model_copy("header_len")
            raw = (d / "model.safetensors").read_bytes()
            (d / "model.safetensors").write_bytes(struct.pack("<Q", 2**62) + raw[8:])
            self.expect_refused(["model.safetensors", "header length"], model=d)

    # ---- stored values: the one rule both backends and the pre-read apply (docs/MODELS.md) ----

    def test_weight_values(self):
        tensor = "model.layers.0.mlp.down_proj.weight"  # float32 in the llama fixture

        def poke(value):
            def edit(h, data):
                assert h[tensor]["dtype"] == "F32"
                start = h[tensor]["data_offsets"][0] + 4 * 5  # element [0, 5]
                return json.dumps(h), data[:start] + struct.pack("<f", value) + data[start + 4:]
            return edit

        rows = [("nan", float("nan"), "weights must be finite"),
                ("inf", float("-inf"), "weights must be finite"),
                ("flt_max", 3.4e38, "beyond bfloat16's range")]
        for name, value, why in rows:
            with self.subTest(name):
                self.expect_refused([tensor, "model.safetensors", "[0, 5]", why],
                                    model=self.with_header("value_" + name, poke(value)))

    def test_fifo_weights_do_not_hang(self):
        d = self.model_copy("fifo")
        (d / "model.safetensors").unlink()
        os.mkfifo(d / "model.safetensors")
        self.expect_refused(["model.safetensors", "not a regular file"], model=d, timeout=30)

    def test_index_entries_stay_in_the_model_directory(self):
        for name, target in [("dotdot", "../llama/model.safetensors"), ("absolute", "/etc/passwd"), ("empty", "")]:
            with self.subTest(name):
                d = self.model_copy("index_" + name)
                header, _ = read_safetensors_raw(d / "model.safetensors")
                index = {"weight_map": {k: target for k in header if k != "__metadata__"}}
                (d / "model.safetensors.index.json").write_text(json.dumps(index))
                self.expect_refused(["model.safetensors.index.json", "maps to"], model=d)
        with self.subTest("empty weight_map"):
            d = self.model_copy("index_no_tensors")
            (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {}}))
            self.expect_refused(["model.safetensors.index.json", "empty weight_map"], model=d)

    # ---- config.json: ranges and types, named by key ----

    def test_config_values(self):
        rows = [
            ({"num_hidden_layers": 1000000000}, "key 'num_hidden_layers' = 1000000000 is outside"),
            ({"head_dim": 2**62}, "key 'head_dim' = 4611686018427387904 is outside"),
            ({"rms_norm_eps": -1e-6}, "key 'rms_norm_eps' = -1e-06 is outside"),
            ({"rms_norm_eps": 1e300}, "key 'rms_norm_eps' = 1e+300 is outside"),
            ({"rope_theta": "10000"}, "key 'rope_theta' must be a number"),
            ({"tie_word_embeddings": "no"}, "key 'tie_word_embeddings' must be true or false"),
            ({"torch_dtype": 16}, "key 'torch_dtype' must be a string"),
            ({"architectures": "LlamaForCausalLM"}, "'architectures' must list exactly one"),
            ({"rope_scaling": {"rope_type": "llama3", "factor": 0, "low_freq_factor": 1, "high_freq_factor": 4,
                               "original_max_position_embeddings": 8}}, "key 'factor' = 0 is outside"),
        ]
        for i, (change, expected) in enumerate(rows):
            with self.subTest(change=change):
                self.expect_refused(["config.json", expected], model=self.with_config(f"cfg{i}", **change))
        # Sizes in range whose weights cannot fit: refused with the numbers before anything is read.
        self.expect_refused(["not enough host memory", "float32 weights 576.0 GiB", "at --tp 1"],
                            model=self.with_config("cfg_vocab", vocab_size=2**31))

    def test_config_json_must_be_a_file(self):
        d = self.model_copy("cfgdir")
        (d / "config.json").unlink()
        (d / "config.json").mkdir()
        self.expect_refused(["config.json", "is a directory"], model=d)

    # ---- datasets ----

    def test_dataset_lines(self):
        rows = [
            ("deep", '{"input_ids": ' + "[" * 200000 + "\n", ["line 1", "nested deeper than"]),
            ("huge element", '{"input_ids": ["' + "x" * 5_000_000 + '"]}\n', ["line 1", "input_ids[0]", "bytes)"]),
            ("out of range", '{"input_ids": [1, 2]}\n{"id": "z", "input_ids": [5, 999999]}\n',
             ["line 2", "sample 'z'", "outside the vocabulary"]),
            ("empty", '{"input_ids": []}\n', ["line 1", "is empty"]),
            ("malformed", '{"input_ids": [1, 2\n', ["line 1", "malformed JSON"]),
            ("too long", json.dumps({"id": "long", "input_ids": [1] * 9000}) + "\n",
             ["line 1 (sample 0) has 9000 tokens", "more than the model's max_position_embeddings 512"]),
        ]
        for name, text, expected in rows:
            with self.subTest(name):
                data = self.data_file(name.replace(" ", "_") + ".jsonl", text)
                self.expect_refused([data.name, *expected] if name != "too long" else expected, data=data)

    def test_dataset_through_a_pipe_is_refused(self):
        # No writer: a blocking open would hang here; layertap must refuse the pipe without reading it.
        fifo = self.tmp / "data.fifo"
        os.mkfifo(fifo)
        self.expect_refused(["data.fifo", "not a regular file"], data=fifo, timeout=30)

    # ---- output paths and options ----

    def test_output_paths(self):
        afile = self.tmp / "a-file"
        afile.write_text("x")
        for name, out, expected in [("a file", afile, "exists and is not a directory"),
                                    ("under a file", afile / "sub", "its parent"),
                                    ("a device", Path("/dev/null"), "exists and is not a directory")]:
            with self.subTest(name):
                p, _ = self.extract(out=out)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn(str(out), p.stderr)
                self.assertIn(expected, p.stderr)
        self.assertEqual(afile.read_text(), "x")

    def test_options(self):
        confdir = self.tmp / "conf.d"
        confdir.mkdir(exist_ok=True)
        for name, extra, expected in [
            ("shard size overflow", ["--shard-size-mib", "17592186044417"], "--shard-size-mib must be in [1, "),
            # a positive size under 1 GiB would round to 0 bytes and read as "not given"
            ("tiny gpu memory", ["--gpu-memory", "1e-12"], "--gpu-memory must be 0 (the device's free memory) or in [1, 1e6]"),
            ("config is a directory", ["--config", confdir], "job file"),
        ]:
            with self.subTest(name):
                self.expect_refused([expected], extra=extra)

    def test_out_with_foreign_files(self):
        # Refused unless --overwrite, which writes among them and keeps them.
        out = self.tmp / "foreign"
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        self.expect_refused(["holds 1 file(s) that are not layertap's ('notes.txt')", "--overwrite"], out=out)
        self.assertEqual(sorted(p.name for p in out.iterdir()), ["notes.txt"])
        p, _ = self.extract(out=out, extra=["--overwrite"])
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertEqual((out / "notes.txt").read_text(), "mine")
        self.assertTrue((out / "manifest.json").exists())

    def test_capture_warning_follows_the_checks(self):
        # eagle3 on the 4-layer model repeats point 2; with a missing dataset the error comes alone.
        p, _ = self.extract(data=self.tmp / "missing.jsonl")
        self.assertEqual(p.returncode, 1)
        self.assertIn("missing.jsonl", p.stderr)
        self.assertNotIn("appears 2 times", p.stderr)

    def test_repeated_points_warn_once(self):
        p, out = self.extract(extra=["--capture", ",".join(["2"] * 300)])
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertEqual(p.stderr.count("appears 300 times"), 1, p.stderr[:2000])
        self.assertLess(p.stderr.count("\n"), 10)

    # ---- under MPI: the job fails as a whole ----

    def test_every_rank_stops(self):
        data = self.data_file("mpi_bad.jsonl", '{"input_ids": [1]}\n{"input_ids": [1, 2.5]}\n')
        p, out = self.extract(data=data, np_=2, timeout=120)
        self.assertNotEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertIn("line 2", p.stderr)
        self.assertFalse((out / "manifest.json").exists())

    # ---- resume: a progress record is data too ----

    def test_malformed_progress_record_is_refused(self):
        """A progress record of the wrong shape is refused naming the file and the key (the shards it
        names are never trusted); one that is well-formed but untrue is recomputed (test_resilience)."""
        out = self.tmp / "out" / "progress-record"
        p, _ = self.extract(out=out, extra=["--shard-size-mib", "1"])
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        (out / "manifest.json").unlink()
        rows = [
            ("wrong type", {"closed_shards": [{"file": "shard-00000.h5", "samples": "many"}]},
             ["shard.progress.json closed_shards[0]", "'samples'"]),
            ("not a list", {"closed_shards": {"file": "shard-00000.h5"}}, ["shard.progress.json", "closed_shards"]),
            ("negative", {"closed_shards": [{"file": "shard-00000.h5", "samples": -1, "tokens": 1, "first_sample": 0,
                                              "last_sample": 0, "bytes": 1, "sha256": "0"}]},
             ["shard.progress.json closed_shards[0]", "'samples' = -1 is outside"]),
        ]
        for name, record, expected in rows:
            with self.subTest(name):
                (out / "shard.progress.json").write_text(json.dumps(record))
                self.expect_refused(expected, out=out, extra=["--resume", "--shard-size-mib", "1"])


if __name__ == "__main__":
    run_tests(("layertap", "mpirun", "fixtures"))
