#!/usr/bin/env python3
"""`layertap extract` on the MoE/MLA fixtures, as users run it under mpirun: the states in the
shards equal Hugging Face's reference (tests/fixtures/models/<name>/reference.safetensors) under
tensor and expert parallelism, and bad layouts or inputs fail every rank with a clear message and
no manifest. Prints each run's peak resident memory per rank (a figure, not a check).
"""
import json
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

import numpy as np

from e2e_common import ARGS, ENV, read_output, read_safetensors, run_tests


def read_reference(path):
    """The fixture's reference states: {sample index: float32 [L+2, T, H]}."""
    return {int(name[len("sample"):-len(".states")]): a for name, a in read_safetensors(path).items()
            if name.endswith(".states")}


class Moe(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="layertap-moe-"))
        self.fix = Path(ARGS.fixtures)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def mpirun(self, np_, model, *args, data=None, out=None):
        out = out or self.tmp / "out"
        cmd = [ARGS.mpirun, "--oversubscribe", "-np", str(np_), ARGS.layertap, "extract",
               "--model", str(self.fix / "models" / model),
               "--data", str(data or self.fix / "data" / "golden.jsonl"), "--out", str(out), *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120), out

    def test_states_match_transformers_under_every_layout(self):
        for model, layouts in (("kimi_k25_int4", ((1, "experts"), (2, "experts"), (4, "experts"), (2, "intermediate"))),
                               ("deepseek_v3_fp8", ((2, "experts"), (2, "intermediate"))),
                               ("deepseek_v3", ((4, "experts"), (4, "intermediate"))),
                               ("qwen3_moe", ((2, "experts"),))):
            config = json.loads((self.fix / "models" / model / "config.json").read_text())
            L = config.get("text_config", config)["num_hidden_layers"]
            ref = read_reference(self.fix / "models" / model / "reference.safetensors")
            for tp, split in layouts:
                with self.subTest(model=model, tp=tp, split=split):
                    p, out = self.mpirun(tp, model, "--tp", tp, "--moe-split", split, "--capture", "0,2,last,final",
                                         "--store-dtype", "float32", out=self.tmp / f"{model}-{tp}-{split}")
                    self.assertEqual(p.returncode, 0, p.stderr)
                    manifest, samples = read_output(out)
                    got = {s.index: s.states for s in samples}
                    self.assertEqual(manifest["run"]["moe_split"], split)
                    self.assertEqual(sorted(got), sorted(ref))
                    worst = 0.0
                    for idx, hs in got.items():
                        for p_, point in enumerate((0, 2, L, L + 1)):
                            want = ref[idx][point].astype(np.float64)
                            err = np.linalg.norm(hs[:, p_] - want) / np.linalg.norm(want)
                            worst = max(worst, err)
                            self.assertLessEqual(err, 1e-5, f"sample {idx} point {point}")
                    print(f"[moe] {model} tp {tp} --moe-split {split}: worst relative error {worst:.3g}, "
                          f"quantization '{manifest['model']['quantization']}', peak RSS per rank "
                          f"{manifest['run']['peak_rss_mib_max']} MiB")

    def test_kimi_k25_media_placeholder_is_refused(self):
        data = self.tmp / "media.jsonl"
        data.write_text('{"id": "text", "input_ids": [5, 6, 7]}\n{"id": "image-1", "input_ids": [5, 158, 7]}\n')
        p, out = self.mpirun(2, "kimi_k25_int4", "--tp", "2", data=data)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("sample 1 (id 'image-1') holds the media placeholder token 158 at position 1", p.stderr)
        self.assertFalse((out / "manifest.json").exists())

    def test_layouts_that_cut_quantization_blocks_are_refused(self):
        p, out = self.mpirun(4, "deepseek_v3_fp8", "--tp", "4")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("do not align with the FP8 block rows (16)", p.stderr)
        self.assertFalse((out / "manifest.json").exists())
        p, out = self.mpirun(4, "kimi_k25_int4", "--tp", "4", "--moe-split", "intermediate")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("do not align with its INT4 groups of 32", p.stderr)

    def test_unknown_moe_split_is_refused(self):
        p, _ = self.mpirun(1, "deepseek_v3", "--moe-split", "rows")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--moe-split must be 'experts' or 'intermediate', got 'rows'", p.stderr)

    def test_unsupported_quantization_is_refused(self):
        model = self.tmp / "awq"
        shutil.copytree(self.fix / "models" / "deepseek_v3", model)
        config = json.loads((model / "config.json").read_text())
        config["quantization_config"] = {"quant_method": "awq", "bits": 4}
        (model / "config.json").write_text(json.dumps(config))
        cmd = [ARGS.mpirun, "--oversubscribe", "-np", "2", ARGS.layertap, "extract", "--model", str(model),
               "--data", str(self.fix / "data" / "golden.jsonl"), "--out", str(self.tmp / "out"), "--tp", "2"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("quant_method 'awq' is not supported", p.stderr)


if __name__ == "__main__":
    run_tests(("layertap", "mpirun", "fixtures"))
