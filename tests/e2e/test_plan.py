#!/usr/bin/env python3
"""Planning and pre-reading a job without a GPU, as users run it on a login node (a CUDA build):

    mpirun -np 8 layertap extract ... --tp 8 --backend cuda --dry-run --gpu-memory 141 [--read-weights]

on full-size shape-only checkpoints (tools/make_shape_checkpoint.py: real names, shapes and dtypes,
data as sparse holes). Checks: every rank's device plan fits 141 GiB for Kimi-K2.5 and DeepSeek-V3
and not 40 GiB (with the largest batch that would fit), nothing is written; --read-weights at TP 8 on
a full-width Kimi-K2.5 with few layers keeps each rank's peak anonymous memory under 2 GiB; a wrong
weight_shape, a NaN FP8 scale and a truncated shard are refused by name on every rank, before any
GPU would be used; --backend cuda without --gpu-memory on a machine without a GPU says what to pass;
a plan that does not fit exits 3 on every rank (0 when it fits).
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from e2e_common import ARGS, ENV, read_safetensors_header, run_tests

GIB = 1 << 30


def tensor_offset(path, name):
    """(file offset, dtype) of tensor `name` in one safetensors file."""
    n, _, header = read_safetensors_header(path)
    return 8 + n + header[name]["data_offsets"][0], header[name]["dtype"]


def file_of(model, name):
    index = json.loads((model / "model.safetensors.index.json").read_text())
    return model / index["weight_map"][name]


class Plan(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="layertap-plan-"))
        self.data = self.tmp / "d.jsonl"
        self.data.write_text("".join(json.dumps({"input_ids": list(range(1, 9 + i % 5))}) + "\n" for i in range(16)))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def checkpoint(self, name, *args):
        out = self.tmp / name
        subprocess.run([sys.executable, ARGS.tool, "--out", str(out), *args], check=True, stdout=subprocess.DEVNULL)
        return out

    def extract(self, model, *args, np_=8, tp=8, capture="eagle3", per_rank=False):
        """The dry run; with per_rank, every rank also prints 'rank exit C' (its own exit code)."""
        out = self.tmp / "out"
        wrap = ["sh", "-c", '"$0" "$@"; echo "rank exit $?"'] if per_rank else []
        cmd = [ARGS.mpirun, "--oversubscribe", "-np", str(np_), *wrap, ARGS.layertap, "extract", "--model", str(model),
               "--data", str(self.data), "--out", str(out), "--tp", str(tp), "--capture", capture,
               "--backend", "cuda", "--dry-run", *args]
        r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)
        self.assertFalse(out.exists() and any(out.iterdir()), "a dry run wrote into --out")
        return r

    def device_lines(self, text):
        return re.findall(r"device +([0-9.]+) GiB of ([0-9.]+) GiB: (fits|does NOT fit)(.*)", text)

    def test_full_size_layouts_fit_141_gib(self):
        for arch in ("kimi-k2.5", "deepseek-v3", "glm-4.5"):
            with self.subTest(arch=arch):
                model = self.checkpoint(arch, "--arch", arch)
                r = self.extract(model, "--gpu-memory", "141")
                self.assertEqual(r.returncode, 0, r.stderr[-3000:])
                lines = self.device_lines(r.stdout)
                self.assertEqual(len(lines), 8, r.stdout)
                # Without a GPU to connect NCCL on, its buffers are a 1 GiB allowance out of --gpu-memory.
                self.assertEqual(r.stdout.count("NCCL       1.00 GiB allowed for its buffers (not measured"), 8, r.stdout)
                for need, have, verdict, _ in lines:
                    self.assertEqual(verdict, "fits")
                    self.assertEqual(float(have), 140.0)
                    self.assertLess(float(need), 140.0)
                    self.assertGreater(float(need), 60.0)  # the weights of a 1/8 share are real sizes
                self.assertIn("no weights", r.stdout)       # the cuda host plan holds none
                self.assertIn("calibration skipped: no GPU", r.stdout)
                print(f"     {arch} tp 8: device {lines[0][0]} GiB on rank 0 of 141")
                self.assertIn("verdict     a real run would start", r.stdout)
                # A card too small: every rank says so, with the batch that would fit or that none does,
                # and every rank exits 3 after the whole plan (a real run would refuse to start).
                small = self.extract(model, "--gpu-memory", "40", "--calibrate-batches", "0", per_rank=True)
                self.assertIn("NOT enough device memory", small.stdout)
                self.assertEqual([v for _, _, v, _ in self.device_lines(small.stdout)], ["does NOT fit"] * 8)
                self.assertIn("a real run would refuse to start: not enough device memory (exit code 3)", small.stdout)
                self.assertEqual(sorted(l for l in small.stdout.splitlines() if l.startswith("rank exit ")),
                                 ["rank exit 3"] * 8, small.stdout[-3000:] + small.stderr[-3000:])
                shutil.rmtree(model)

    def test_gpt_oss_120b_plans_on_80_gib_cards(self):
        # Its MXFP4 experts stay packed: an eighth of the 65 GB checkpoint per rank, and the bf16
        # expansion of one group of experts at a time; refused where even that does not fit.
        model = self.checkpoint("gpt-oss-120b", "--arch", "gpt-oss-120b")
        r = self.extract(model, "--gpu-memory", "80")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        lines = self.device_lines(r.stdout)
        self.assertEqual([v for _, _, v, _ in lines], ["fits"] * 8, r.stdout)
        for need, _, _, _ in lines:
            self.assertTrue(8.0 < float(need) < 40.0, need)
        self.assertIn("packed FP8/INT4/MXFP4 with scales", r.stdout)
        print(f"     gpt-oss-120b tp 8: device {lines[0][0]} GiB on rank 0 of 80")
        small = self.extract(model, "--gpu-memory", "8", "--calibrate-batches", "0")
        self.assertEqual(small.returncode, 3, small.stdout[-3000:] + small.stderr[-3000:])
        self.assertIn("NOT enough device memory", small.stdout)
        shutil.rmtree(model)

    def test_gemma_3_plans(self):
        # The text-only gemma-3-1b as published (one kv head, replicated at TP 2; tied embeddings).
        model = self.checkpoint("gemma-3-1b", "--arch", "gemma-3-1b")
        for tp in (1, 2):
            with self.subTest(tp=tp):
                r = self.extract(model, "--gpu-memory", "24", "--calibrate-batches", "0", np_=tp, tp=tp)
                self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
                lines = self.device_lines(r.stdout)
                self.assertEqual([v for _, _, v, _ in lines], ["fits"] * tp, r.stdout)
                self.assertIn("verdict     a real run would start", r.stdout)
        shutil.rmtree(model)
        # gemma-3-27b-it as published (the multimodal wrapper; its text_config leaves most keys to
        # Gemma3TextConfig's defaults): 62 layers, vocab 262208, fits 80 GiB cards at TP 2 (26.5 GiB
        # of weights per rank), refused on 24 GiB cards.
        model = self.checkpoint("gemma-3-27b", "--arch", "gemma-3-27b")
        r = self.extract(model, "--gpu-memory", "80", "--calibrate-batches", "0", np_=2, tp=2)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertEqual([v for _, _, v, _ in self.device_lines(r.stdout)], ["fits"] * 2, r.stdout)
        self.assertEqual(r.stdout.count("weights    26.47 GiB resident (26.47 GiB bf16)"), 2, r.stdout)
        small = self.extract(model, "--gpu-memory", "24", "--calibrate-batches", "0", np_=2, tp=2)
        self.assertEqual(small.returncode, 3, small.stdout[-3000:] + small.stderr[-3000:])
        self.assertIn("NOT enough device memory", small.stdout)
        shutil.rmtree(model)

    def test_a_32k_sample_is_planned_in_chunks_on_80_gb_cards(self):
        # Kimi-K2.5 at full width, 4 layers: one sample of 32768 tokens beside short ones runs in
        # chunks of 4096; each rank's plan counts the kept latents and rope keys of the sample in
        # flight (all 4 layers) and says how long a sample would still fit.
        model = self.checkpoint("kimi-4", "--arch", "kimi-k2.5", "--layers", "4")
        self.data.write_text(json.dumps({"input_ids": [1 + i % 1000 for i in range(32768)]}) + "\n" +
                             "".join(json.dumps({"input_ids": list(range(1, 100))}) + "\n" for _ in range(8)))
        r = self.extract(model, "--gpu-memory", "79", "--max-batch-tokens", "4096", "--calibrate-batches", "0")
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertIn("1 sample longer than a batch run in chunks (the longest: 32768 tokens)", r.stdout)
        self.assertEqual(r.stdout.count("kept K/V   for samples of up to 32768 tokens, run in chunks of 4096"), 8)
        self.assertEqual([v for _, _, v, _ in self.device_lines(r.stdout)], ["fits"] * 8)
        # Per kept position (32767 of them): 4 layers x (kv_lora 512 + rope 64) bf16, and the key
        # side's longer rows: latent 512, kv_b output 8 heads x (128 + 128), keys 8 x 192, values 8 x 128.
        per_position = 4 * 576 * 2 + (512 + 8 * 256 + 8 * 192 + 8 * 128) * 2
        want = f"{32767 * per_position / 2**30:.2f}"
        self.assertEqual(re.findall(r"and kept K/V ([0-9.]+) GiB", r.stdout), [want] * 8, r.stdout)
        longest = [int(n) for n in re.findall(r"longest +sample that fits beside batches of 4096 tokens: (\d+)", r.stdout)]
        self.assertEqual(len(longest), 8, r.stdout)
        self.assertTrue(all(n >= 32768 for n in longest), longest)
        # --max-sample-tokens plans for longer samples than this dataset holds, up to the model's positions.
        r = self.extract(model, "--gpu-memory", "79", "--max-batch-tokens", "4096", "--calibrate-batches", "0",
                         "--max-sample-tokens", "65536")
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertEqual(r.stdout.count("kept K/V   for samples of up to 65536 tokens"), 8, r.stdout)
        self.assertEqual(re.findall(r"and kept K/V ([0-9.]+) GiB", r.stdout),
                         [f"{65535 * per_position / 2**30:.2f}"] * 8, r.stdout)
        # --max-batch-tokens auto (the default) on a 20 GiB card: the largest batch every rank's plan
        # fits beside the weights and the kept latents, below the cap of 65536, and it fits.
        r = self.extract(model, "--gpu-memory", "20", "--calibrate-batches", "0")
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        got = re.search(r"batches of up to ([0-9]+) tokens \(--max-batch-tokens auto\)", r.stdout)
        self.assertIsNotNone(got, r.stdout[-3000:])
        self.assertTrue(4096 < int(got.group(1)) < 65536, got.group(0))
        self.assertEqual([v for _, _, v, _ in self.device_lines(r.stdout)], ["fits"] * 8)
        r = self.extract(model, "--gpu-memory", "79", "--max-sample-tokens", "300000")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--max-sample-tokens 300000 is more than the model's max_position_embeddings 262144", r.stderr)

    def test_no_gpu_needs_gpu_memory(self):
        model = self.checkpoint("llama", "--arch", "llama-3.1-70b", "--layers", "2", "--vocab", "1024")
        r = self.extract(model, np_=1, tp=1, capture="0,1,final")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--gpu-memory", r.stderr)

    def test_read_weights_bounded_memory_and_damage_named(self):
        model = self.checkpoint("kimi", "--arch", "kimi-k2.5", "--layers", "2", "--vocab", "4096",
                                "--fill-scales", "0.01")
        r = self.extract(model, "--gpu-memory", "96", "--read-weights", capture="0,1,final")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        reads = re.findall(r"rank (\d+): read ([0-9.]+) (\w+) .* in ([0-9.]+) s, ([0-9.]+) GB/s, "
                           r"peak anonymous memory ([0-9.]+) (\w+)", r.stdout)
        self.assertEqual(len(reads), 8, r.stdout)
        for rank, size, unit, secs, gbs, peak, peak_unit in reads:
            self.assertEqual(unit, "GiB")
            self.assertGreater(float(size), 1.0)  # 48 experts x 3 INT4 matrices + attention + embedding
            peak_bytes = float(peak) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": GIB}[peak_unit]
            self.assertLess(peak_bytes, 2 * GIB, f"rank {rank} peaked at {peak} {peak_unit}")
        print(f"     kimi-k2.5 2 layers tp 8: each rank read {reads[0][1]} GiB at {reads[0][4]} GB/s, "
              f"peak anonymous memory {max(float(p[5]) for p in reads)} {reads[0][6]}")

        damaged = [
            ("language_model.model.layers.1.mlp.experts.9.gate_proj.weight_shape", struct.pack("<q", 777), 8,
             "records shape"),
            ("language_model.model.layers.1.mlp.experts.40.down_proj.weight_scale", struct.pack("<H", 0x7fc0), 0,
             "finite and positive"),
        ]
        for name, value, at, message in damaged:
            with self.subTest(tensor=name):
                path = file_of(model, name)
                offset, _ = tensor_offset(path, name)
                with open(path, "r+b") as f:
                    f.seek(offset + at)
                    old = f.read(len(value))
                    f.seek(offset + at)
                    f.write(value)
                r = self.extract(model, "--gpu-memory", "96", "--read-weights", capture="0,1,final")
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(name, r.stderr)
                self.assertIn(message, r.stderr)
                self.assertIn(path.name, r.stderr)
                with open(path, "r+b") as f:
                    f.seek(offset + at)
                    f.write(old)

    def test_fp8_nan_scale_and_truncated_shard(self):
        model = self.checkpoint("ds", "--arch", "deepseek-v3", "--layers", "2", "--vocab", "4096",
                                "--fill-scales", "0.01")
        name = "model.layers.1.mlp.experts.3.up_proj.weight_scale_inv"
        path = file_of(model, name)
        offset, dtype = tensor_offset(path, name)
        self.assertEqual(dtype, "F32")
        with open(path, "r+b") as f:
            f.seek(offset + 4 * 5)
            f.write(struct.pack("<f", float("nan")))
        r = self.extract(model, "--gpu-memory", "141", "--read-weights", capture="0,1,final")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(name, r.stderr)
        self.assertIn("nan", r.stderr)
        self.assertIn(path.name, r.stderr)

        index = json.loads((model / "model.safetensors.index.json").read_text())
        shard = model / sorted(set(index["weight_map"].values()))[-1]
        os.truncate(shard, shard.stat().st_size - 4096)
        r = self.extract(model, "--gpu-memory", "141", capture="0,1,final")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(shard.name, r.stderr)


if __name__ == "__main__":
    run_tests(("layertap", "mpirun", "tool"))
