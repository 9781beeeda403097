#!/usr/bin/env python3
"""`layertap extract` under mpirun: every world layout gives the same output, and layout errors
fail every rank quickly with a clear message.

Layouts (np, tp): (1,1) is the reference; (2,2) tensor parallel, (2,1) data parallel,
(4,2) both, (4,4) tensor parallel with replicated key/value heads. Compared: sample order,
tokens and masks exactly; hidden states within float32 tolerance (relative Frobenius 1e-5
per sample and point).
"""
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import numpy as np

from e2e_common import ARGS, ENV, read_output, run_tests


class Distributed(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="layertap-mpi-"))
        self.fix = Path(ARGS.fixtures)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def mpirun(self, np_, *args, model="llama_tp", out=None, data="demo.jsonl", timeout=120):
        out = out or self.tmp / f"out-np{np_}"
        cmd = [ARGS.mpirun, "--oversubscribe", "-np", str(np_), ARGS.layertap, "extract",
               "--model", str(self.fix / "models" / model), "--data", str(self.fix / "data" / data),
               "--out", str(out), *map(str, args)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)
        return p, out

    def test_every_layout_gives_the_same_output(self):
        common = ["--capture", "0,2,last,final", "--store-dtype", "float32", "--max-batch-tokens", "2048"]
        p, ref_out = self.mpirun(1, *common, out=self.tmp / "ref")
        self.assertEqual(p.returncode, 0, p.stderr)
        _, ref = read_output(ref_out)
        self.assertEqual([s[0] for s in ref], list(range(200)))
        for np_, tp in ((2, 2), (2, 1), (4, 2), (4, 4)):
            with self.subTest(np=np_, tp=tp):
                p, out = self.mpirun(np_, *common, "--tp", tp, out=self.tmp / f"np{np_}-tp{tp}")
                self.assertEqual(p.returncode, 0, p.stderr)
                manifest, got = self.read_and_check_manifest(out, np_, tp)
                self.assertEqual([s[0] for s in got], [s[0] for s in ref])
                worst = 0.0
                for (idx, ids, mask, hs), (_, rids, rmask, rhs) in zip(got, ref):
                    np.testing.assert_array_equal(ids, rids)
                    np.testing.assert_array_equal(mask, rmask)
                    for p_ in range(hs.shape[1]):
                        a, b = hs[:, p_].astype(np.float64), rhs[:, p_].astype(np.float64)
                        err = np.linalg.norm(a - b) / np.linalg.norm(b)
                        worst = max(worst, err)
                        self.assertLessEqual(err, 1e-5, f"sample {idx} point {p_}")
                print(f"[mpi] np {np_} tp {tp}: {len(manifest['shards'])} shards, worst relative "
                      f"difference to np 1: {worst:.3g}")

    def read_and_check_manifest(self, out, np_, tp):
        manifest, samples = read_output(out)
        self.assertEqual((manifest["run"]["world_size"], manifest["run"]["tp"], manifest["run"]["dp"]),
                         (np_, tp, np_ // tp))
        self.assertEqual(manifest["totals"]["samples"], 200)
        # one writer per data-parallel group
        self.assertEqual(len({s["file"].rsplit("-", 1)[0] for s in manifest["shards"]}), np_ // tp)
        return manifest, samples

    def expect_failure(self, np_, message, *args, model="llama_tp"):
        p, out = self.mpirun(np_, *args, model=model, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(message, p.stderr)
        self.assertFalse((out / "manifest.json").exists())

    def test_tp_must_divide_the_world(self):
        self.expect_failure(2, "--tp 4 does not divide the number of ranks 2", "--tp", "4")

    def test_tp_must_divide_the_heads(self):
        self.expect_failure(4, "does not divide num_attention_heads 6", "--tp", "4", model="llama")

    def test_ranks_with_different_options_are_refused(self):
        out = self.tmp / "mixed"
        base = [ARGS.layertap, "extract", "--data", str(self.fix / "data" / "golden.jsonl"), "--out", str(out)]
        cmd = [ARGS.mpirun, "--oversubscribe",
               "-np", "1", *base, "--model", str(self.fix / "models" / "llama_tp"), "--capture", "final", ":",
               "-np", "1", *base, "--model", str(self.fix / "models" / "llama_tp"), "--capture", "0", ":",
               "-np", "1", *base, "--model", str(self.fix / "models" / "llama"), "--capture", "final"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ranks disagree on the options", p.stderr)
        self.assertFalse((out / "manifest.json").exists())

    def test_ranks_with_different_models_at_the_same_path_are_refused(self):
        # Same options on every rank, but each rank's working directory holds a different model
        # under the same name (as nodes with different local copies would): the fingerprint tells.
        for name, model in (("a", "llama_tp"), ("b", "llama")):
            d = self.tmp / name
            shutil.copytree(self.fix / "models" / model, d / "model")
            shutil.copy(self.fix / "data" / "golden.jsonl", d / "data.jsonl")
        out = self.tmp / "mixed-models"
        app = [ARGS.layertap, "extract", "--model", "model", "--data", "data.jsonl", "--out", str(out)]
        cmd = [ARGS.mpirun, "--oversubscribe", "-np", "1", "-wdir", str(self.tmp / "a"), *app, ":",
               "-np", "1", "-wdir", str(self.tmp / "b"), *app]
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ranks disagree on the model weights", p.stderr)
        self.assertFalse((out / "manifest.json").exists())


if __name__ == "__main__":
    run_tests(("layertap", "mpirun", "fixtures"))
