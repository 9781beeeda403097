#!/usr/bin/env python3
"""End-to-end tests of `layertap extract` and `layertap inspect`, as a user runs them.

Reads the output with Debian's h5py (bf16 comes back as float32 with no custom code), h5ls and
h5dump, and checks tokens, masks, offsets, sample order and states against the input and the
Hugging Face reference of tests/fixtures. Bad input must fail with a clear message, a non-zero
exit and no manifest.
"""
import hashlib
import json
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import h5py
import numpy as np

from e2e_common import ARGS, read_safetensors, run_tests


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def rel_err(got, want):
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


class Extract(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="layertap-e2e-"))
        self.fix = Path(ARGS.fixtures)
        self.golden = self.fix / "data" / "golden.jsonl"

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_layertap(self, *args, ok=True):
        p = subprocess.run([ARGS.layertap, *map(str, args)], capture_output=True, text=True, timeout=300)
        if ok:
            self.assertEqual(p.returncode, 0, f"layertap {' '.join(map(str, args))} failed:\n{p.stderr}")
        return p

    def extract(self, model, data, out, *extra, ok=True):
        return self.run_layertap("extract", "--model", self.fix / "models" / model, "--data", data,
                                 "--out", out, *extra, ok=ok)

    def shards(self, out):
        manifest = json.loads((out / "manifest.json").read_text())
        return manifest, [out / s["file"] for s in manifest["shards"]]

    def check_against_reference(self, model, out, point_ids, tol):
        """Every sample of golden.jsonl: tokens, mask, order, and states at each point."""
        samples = read_jsonl(self.golden)
        ref = read_safetensors(self.fix / "models" / model / "reference.safetensors")
        manifest, files = self.shards(out)
        got = []  # (sample_index, ids, mask, states) in manifest order
        for f in files:
            with h5py.File(f, "r") as h:
                self.assertEqual(h["hidden_states"].dtype, np.float32)  # bf16 converted by h5py
                off = h["sample_offsets"][:]
                self.assertEqual(off[0], 0)
                self.assertEqual(off[-1], h["input_ids"].shape[0])
                self.assertEqual(list(h.attrs["capture_point_ids"]), point_ids)
                for s, idx in enumerate(h["sample_index"][:]):
                    a, b = off[s], off[s + 1]
                    got.append((int(idx), h["input_ids"][a:b], h["loss_mask"][a:b], h["hidden_states"][a:b]))
        self.assertEqual([g[0] for g in got], list(range(len(samples))), "sample order must be input order")
        worst = 0.0
        for i, (idx, ids, mask, states) in enumerate(got):
            sample = samples[idx]
            np.testing.assert_array_equal(ids, sample["input_ids"])
            np.testing.assert_array_equal(mask, sample.get("loss_mask", [1] * len(sample["input_ids"])))
            want = ref[f"sample{idx}.states"]  # [L+2, T, H]
            self.assertEqual(states.shape, (len(ids), len(point_ids), want.shape[2]))
            for p, pid in enumerate(point_ids):
                err = rel_err(states[:, p, :], want[pid])
                worst = max(worst, err)
                self.assertLessEqual(err, tol, f"sample {idx} point id {pid}")
        self.assertEqual(manifest["totals"]["samples"], len(samples))
        return worst

    def test_bf16_output_matches_reference_and_input(self):
        out = self.tmp / "out"
        self.extract("llama", self.golden, out, "--capture", "0,2,last,final", "--max-batch-tokens", "64")
        # bf16 keeps 8 significant bits: each element within 2^-9 relative, so the norm too.
        worst = self.check_against_reference("llama", out, [0, 2, 4, 5], tol=2.0 ** -8)
        print(f"[e2e] bf16 worst relative error vs HF: {worst:.3g}")
        manifest, files = self.shards(out)
        self.assertTrue(manifest["complete"])
        self.assertEqual([p["spec"] for p in manifest["capture"]["points"]], ["0", "2", "4", "final"])
        self.assertEqual(manifest["storage_dtype"], "bfloat16")
        for s, f in zip(manifest["shards"], files):
            self.assertEqual(hashlib.sha256(f.read_bytes()).hexdigest(), s["sha256"])
            self.assertEqual(f.stat().st_size, s["bytes"])
        self.assertEqual(list(out.glob("*.tmp")), [])
        h5ls = subprocess.run(["h5ls", "-v", f"{files[0]}/hidden_states"], capture_output=True, text=True)
        self.assertIn("16-bit little-endian floating-point", h5ls.stdout)
        h5dump = subprocess.run(["h5dump", "-H", str(files[0])], capture_output=True, text=True)
        self.assertEqual(h5dump.returncode, 0)
        for name in ("hidden_states", "input_ids", "loss_mask", "sample_offsets", "sample_index"):
            self.assertIn(f'DATASET "{name}"', h5dump.stdout)
        inspect = self.run_layertap("inspect", out)
        self.assertIn("LlamaForCausalLM", inspect.stdout)
        self.assertIn("final", inspect.stdout)

    def test_float32_output_is_exact_to_reference_for_every_model(self):
        for model in ("llama", "llama3_rope", "mistral", "qwen2", "qwen3"):
            with self.subTest(model=model):
                out = self.tmp / model
                cfg = json.loads((self.fix / "models" / model / "config.json").read_text())
                L = cfg["num_hidden_layers"]
                self.extract(model, self.golden, out, "--capture", "eagle3", "--store-dtype", "float32")
                worst = self.check_against_reference(model, out, [2, L // 2, L - 3, L + 1], tol=1e-5)
                print(f"[e2e] {model} float32 worst relative error vs HF: {worst:.3g}")

    def test_samples_longer_than_a_batch_run_in_chunks(self):
        # golden.jsonl holds samples of 19, 1, 61, 7 and 33 tokens: batches of 16 tokens run three
        # of them in chunks (chunked prefill), the CPU backend keeping each one's keys and values.
        for model in ("mistral", "kimi_k2", "qwen3_moe"):
            with self.subTest(model=model):
                out = self.tmp / f"chunked-{model}"
                cfg = json.loads((self.fix / "models" / model / "config.json").read_text())
                L = cfg["num_hidden_layers"]
                p = self.extract(model, self.golden, out, "--capture", "eagle3", "--store-dtype", "float32",
                                 "--max-batch-tokens", "16", "--backend", "cpu", "--log-level", "info")
                self.assertIn("in chunks", p.stderr)
                worst = self.check_against_reference(model, out, [2, L // 2, L - 3, L + 1], tol=1e-5)
                print(f"[e2e] {model} in chunks of 16 tokens: worst relative error vs HF {worst:.3g}")
                # verify recomputes every sample whole and compares
                self.run_layertap("verify", out, "--samples", "-1")

    def test_shards_rotate_and_concatenate_in_input_order(self):
        out = self.tmp / "out"
        data = self.fix / "data" / "demo.jsonl"
        self.extract("llama", data, out, "--capture", "final", "--shard-size-mib", "1", "--max-batch-tokens", "1024")
        manifest, files = self.shards(out)
        self.assertGreater(len(files), 1)
        samples = read_jsonl(data)
        order, ids = [], []
        for f in files:
            with h5py.File(f, "r") as h:
                order += list(h["sample_index"][:])
                ids.append(h["input_ids"][:])
        self.assertEqual(order, list(range(len(samples))))
        np.testing.assert_array_equal(np.concatenate(ids), np.concatenate([s["input_ids"] for s in samples]))
        self.assertEqual(sum(s["samples"] for s in manifest["shards"]), len(samples))

    def test_job_file_with_command_line_override(self):
        out = self.tmp / "out"
        job = self.tmp / "job.conf"
        job.write_text(f"model = {self.fix / 'models' / 'qwen2'}\ndata = {self.golden}\nout = {out}\n"
                       "capture = 1,final\nstore-dtype = float32\n")
        self.run_layertap("extract", "--config", job, "--capture", "2,final")
        manifest, _ = self.shards(out)
        self.assertEqual([p["id"] for p in manifest["capture"]["points"]], [2, 5])
        self.assertEqual(manifest["storage_dtype"], "float32")

    def test_cuda_backend_without_a_gpu_is_a_clear_error(self):
        p = self.expect_failure("--backend cuda", "--backend", "cuda")
        self.assertRegex(p.stderr, "no GPU|no CUDA")

    def test_help_and_version(self):
        self.assertIn("--max-batch-tokens", self.run_layertap("extract", "--help").stdout)
        self.assertIn("layertap", self.run_layertap("--version").stdout)

    # --- bad input: clear message, non-zero exit, no manifest, no complete-looking shard ---
    def expect_failure(self, message, *args, model="llama", data=None, out=None):
        out = out or self.tmp / "bad-out"
        p = self.extract(model, data or self.golden, out, *args, ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(message, p.stderr)
        self.assertFalse((out / "manifest.json").exists())
        if out.exists():
            self.assertEqual(list(out.glob("shard-*.h5")), [])
        return p

    def bad_data(self, lines):
        path = self.tmp / "bad.jsonl"
        path.write_text("\n".join(lines) + "\n")
        return path

    def test_malformed_json_line(self):
        data = self.bad_data(['{"input_ids": [1, 2]}', '{"input_ids": [1, 2'])
        self.expect_failure("line 2", data=data)

    def test_token_id_out_of_vocabulary(self):
        data = self.bad_data(['{"id": "ok", "input_ids": [1, 2]}', '{"id": "too-big", "input_ids": [1, 160]}'])
        p = self.expect_failure("too-big", data=data)
        self.assertIn("160", p.stderr)

    def test_empty_sample(self):
        self.expect_failure("empty-one", data=self.bad_data(['{"id": "empty-one", "input_ids": []}']))

    def test_unknown_capture_point(self):
        self.expect_failure("'middle'", "--capture", "2,middle")
        self.expect_failure("outside 0..4", "--capture", "7")

    def test_missing_model_files(self):
        model = self.tmp / "model"
        shutil.copytree(self.fix / "models" / "llama", model)
        (model / "model.safetensors").unlink()
        p = self.extract(model, self.golden, self.tmp / "o1", ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("model.safetensors", p.stderr)
        self.assertFalse((self.tmp / "o1" / "manifest.json").exists())
        (model / "config.json").unlink()
        p = self.extract(model, self.golden, self.tmp / "o2", ok=False)
        self.assertIn("config.json", p.stderr)

    def test_missing_tensor_is_named(self):
        model = self.tmp / "model"
        shutil.copytree(self.fix / "models" / "qwen3", model)
        index = json.loads((model / "model.safetensors.index.json").read_text())
        victim = "model.layers.3.mlp.down_proj.weight"
        shard = index["weight_map"][victim]
        keep = [f for f in set(index["weight_map"].values()) if f != shard]
        (model / shard).unlink()  # drop one shard file: its tensors are missing
        index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v in keep}
        (model / "model.safetensors.index.json").write_text(json.dumps(index))
        p = self.extract(model, self.golden, self.tmp / "o", ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertRegex(p.stderr, r"tensor 'model\.[a-z0-9_.]+' is missing")

    def test_dry_run_plans_and_writes_nothing(self):
        out = self.tmp / "dry"
        demo = self.fix / "data" / "demo.jsonl"
        p = self.extract("llama", demo, out, "--capture", "0,2,last,final", "--max-batch-tokens", "4096",
                         "--dry-run", "--calibrate-batches", "1")
        self.assertFalse(out.exists(), "a dry run wrote to --out")
        samples = read_jsonl(demo)
        tokens = sum(len(s["input_ids"]) for s in samples)
        self.assertIn(f"{len(samples)} samples, {tokens} tokens", p.stdout)
        self.assertIn("4 points x hidden 72 x bfloat16", p.stdout)
        self.assertIn("free space", p.stdout)
        self.assertIn("(enough)", p.stdout)
        self.assertRegex(p.stdout, r"estimate +about \d+ s for the run")
        self.assertIn("verdict     a real run would start", p.stdout)  # and exit code 0 (extract checks it)
        # Batches per group: packed in input order up to 4096 tokens, as the real run packs them.
        batches, used = 0, None
        for s in samples:
            n = len(s["input_ids"])
            if used is None or used + n > 4096:
                batches, used = batches + 1, 0
            used += n
        self.assertIn(f"{tokens} tokens, {batches} batches", p.stdout)

    def test_run_refuses_to_start_without_the_space_its_output_needs(self):
        mnt = self.tmp / "small-fs"
        mnt.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)]).returncode != 0:
            self.skipTest("this machine does not let the test mount a small tmpfs")
        try:
            out = mnt / "out"
            demo = self.fix / "data" / "demo.jsonl"  # about 15 MiB of output
            p = self.expect_failure("the output will take about", data=demo, out=out)
            self.assertIn("are free at", p.stderr)
            self.assertIn("--ignore-free-space", p.stderr)
            self.assertFalse(out.exists(), "--out was created before the refusal")
            # The dry run prints the whole plan, then exits 3: a real run would refuse.
            p = self.extract("llama", demo, out, "--dry-run", "--calibrate-batches", "0", ok=False)
            self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
            self.assertIn("NOT enough: a real run would refuse to start", p.stdout)
            self.assertIn("memory      per rank", p.stdout)
            self.assertIn("verdict     a real run would refuse to start: not enough free space at --out (exit code 3)",
                          p.stdout)
            self.assertFalse(out.exists(), "a dry run wrote to --out")
            # --ignore-free-space: a real run would start, so the dry run exits 0.
            p = self.extract("llama", demo, out, "--dry-run", "--calibrate-batches", "0", "--ignore-free-space")
            self.assertIn("--ignore-free-space: a real run would start anyway", p.stdout)
            self.assertIn("verdict     a real run would start", p.stdout)
        finally:
            subprocess.run(["umount", str(mnt)])

    def test_dry_run_exits_3_when_host_memory_would_refuse(self):
        """Weights that cannot fit the host: a real run refuses (exit 1) before reading any; the dry
        run prints the whole plan with the reason and exits 3, skipping what would need them."""
        model = self.tmp / "huge-vocab"
        shutil.copytree(self.fix / "models" / "llama", model)
        config = json.loads((model / "config.json").read_text())
        config["vocab_size"] = 2**31
        (model / "config.json").write_text(json.dumps(config))
        out = self.tmp / "never"
        p = self.run_layertap("extract", "--model", model, "--data", self.golden, "--out", out, ok=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("not enough host memory", p.stderr)
        p = self.run_layertap("extract", "--model", model, "--data", self.golden, "--out", out, "--dry-run",
                              "--read-weights", ok=False)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("host memory NOT enough: a real run would refuse to start: not enough host memory", p.stdout)
        self.assertIn("read        skipped (--read-weights)", p.stdout)
        self.assertIn("free space", p.stdout)
        self.assertIn("verdict     a real run would refuse to start: not enough host memory (exit code 3)", p.stdout)
        self.assertFalse(out.exists(), "a dry run wrote to --out")

    def test_existing_output_needs_overwrite_and_unwritable_output_fails(self):
        out = self.tmp / "out"
        self.extract("llama", self.golden, out, "--capture", "final")
        p = self.extract("llama", self.golden, out, "--capture", "final", ok=False)
        self.assertIn("--overwrite", p.stderr)
        self.assertTrue((out / "manifest.json").exists())  # the earlier run is untouched
        self.extract("llama", self.golden, out, "--capture", "final", "--overwrite")
        blocker = self.tmp / "file"
        blocker.write_text("x")
        self.expect_failure("exists and is not a directory", out=blocker / "sub")


if __name__ == "__main__":
    run_tests(("layertap", "fixtures"))
