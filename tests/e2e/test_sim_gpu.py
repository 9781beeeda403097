#!/usr/bin/env python3
"""`layertap extract --backend cuda` under mpirun on the simulated GPU (LAYERTAP_CUDA_SIM builds):
every rank runs the real CUDA backend (kernels, cuBLASLt, NCCL all-reduces across the rank
processes) on its own simulated device, and the output is checked as a user would:

- dense (llama_tp, np 4 = 2 groups of tp 2): `layertap verify` recomputes every sample with the
  float32 CPU backend and accepts it (the cuda backend's bound, 5e-2 per sample and point);
  the same samples, tokens and masks as the CPU backend's output of the same job, in input order;
- MoE, FP8 and INT4 checkpoints at tp 1 and 2, both expert splits, chunked and not: every state
  is finite and `verify` recomputes every sample and accepts it, replaying the routing the output
  records (/routed_experts: the bf16 forward flips near-ties of deepseek_v3's and kimi's random
  fixtures against the float32 choice); a recorded expert no bf16 forward would choose, an id out
  of range or twice in a token, and swapped points are each caught;
- GPU binding: one GPU per task (each rank its own CUDA_VISIBLE_DEVICES, as Slurm's
  --gpus-per-task=1 sets it) runs; two tasks bound to one GPU, or more ranks than GPUs, are
  refused on every rank naming both local ranks and the GPU's PCI bus id.
"""
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import h5py
import numpy as np

import e2e_common
from e2e_common import ARGS, read_output, run_tests

ENV = dict(e2e_common.ENV, LAYERTAP_SIM_DEVICES="4")


def extract(out, model, np_, *extra, env=ENV, log_level="warning"):
    cmd = [ARGS.mpirun, "--oversubscribe", "-np", str(np_), ARGS.layertap, "extract", "--model",
           Path(ARGS.fixtures) / "models" / model, "--data", Path(ARGS.fixtures) / "data" / "golden.jsonl",
           "--out", out, "--capture", "eagle3", "--log-level", log_level, *extra]
    return subprocess.run(list(map(str, cmd)), env=env, capture_output=True, text=True, timeout=600)


def verify(out, samples):
    return subprocess.run([ARGS.layertap, "verify", str(out), "--samples", str(samples)], env=ENV,
                          capture_output=True, text=True, timeout=600)


class SimulatedGpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="layertap-sim-gpu-"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_ok(self, out, model, np_, *extra, log_level="warning"):
        r = extract(out, model, np_, *extra, log_level=log_level)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def test_dense_tp2_dp2_verifies(self):
        out, ref = self.tmp / "llama_tp", self.tmp / "llama_tp_cpu"
        self.run_ok(out, "llama_tp", 4, "--backend", "cuda", "--tp", "2")
        self.run_ok(ref, "llama_tp", 1, "--backend", "cpu")
        manifest, got = read_output(out)
        self.assertEqual(manifest["run"]["backend"], "cuda")
        self.assertEqual((manifest["run"]["tp"], manifest["run"]["dp"]), (2, 2))
        _, want = read_output(ref)
        self.assertEqual([g[0] for g in got], [w[0] for w in want])
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g[1], w[1])
            np.testing.assert_array_equal(g[2], w[2])
            self.assertTrue(np.isfinite(g[3]).all())
        r = verify(out, -1)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("cuda backend", r.stdout)

    def test_moe_quantized_and_new_families_tp2(self):
        for model, split in [("deepseek_v3_fp8", "experts"), ("kimi_k25_int4", "intermediate"),
                             ("kimi_k25_int4", "experts"), ("qwen3_moe", "experts"), ("qwen3_moe", "intermediate"),
                             ("mixtral_swa", "experts"), ("glm4_moe", "intermediate"), ("gemma3", "experts"),
                             ("gpt_oss", "intermediate"), ("llama4", "intermediate")]:
            with self.subTest(model=model, split=split):
                out = self.tmp / f"{model}-{split}"
                self.run_ok(out, model, 2, "--backend", "cuda", "--tp", "2", "--moe-split", split)
                _, got = read_output(out)
                self.assertEqual(sorted(g[0] for g in got), list(range(5)))
                for g in got:
                    self.assertTrue(np.isfinite(g[3]).all(), f"sample {g[0]}")
                r = verify(out, -1)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_moe_tp1_replays_recorded_routing(self):
        """One GPU: the output records each token's experts; verify replays them, accepts the
        output, and still refuses damage to the record or to the states."""
        for model in ("deepseek_v3_fp8", "kimi_k2", "kimi_k25_int4"):
            with self.subTest(model=model):
                out = self.tmp / f"tp1-{model}"
                self.run_ok(out, model, 1, "--backend", "cuda")
                r = verify(out, -1)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("5 sample(s) recomputed", r.stdout + r.stderr)
        good = self.tmp / "tp1-deepseek_v3_fp8"

        def damaged(name, edit):
            bad = self.tmp / f"bad-routing-{name}"
            shutil.rmtree(bad, ignore_errors=True)
            shutil.copytree(good, bad)
            if edit is not None:
                with h5py.File(bad / "shard-00000.h5", "r+") as f:
                    r = f["routed_experts"]
                    a = r[...]
                    edit(a)
                    r[...] = a
                subprocess.run([sys.executable, ARGS.corrupt, bad, "manifest", "complete", "true", "--rechecksum"],
                               check=True)
            return bad

        def set_choice(token, layer, j, expert):
            return lambda a: a.__setitem__((token, layer, j), expert)

        cases = [
            # sample 2, token 5, the second MoE layer: its group is outranked beyond the bf16 noise
            ("far-expert", set_choice(25, 1, 1, 0), "recorded routing at layer 2, token 5: expert 0 is in group 0"),
            ("out-of-range", set_choice(0, 0, 0, 99), "expert 99 is outside [0, 8)"),
            ("twice", lambda a: a.__setitem__((3, 0, 1), a[3, 0, 0]), "is chosen twice"),
        ]
        for name, edit, expected in cases:
            with self.subTest(damage=name):
                r = verify(damaged(name, edit), -1)
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn(expected, r.stdout + r.stderr)
        with self.subTest(damage="swapped points"):  # replaying the routing hides no damage to the states
            bad = damaged("swap", None)
            subprocess.run([sys.executable, ARGS.corrupt, bad, "swap-points", "1", "3", "--rechecksum"], check=True)
            r = verify(bad, -1)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("recomputed states differ", r.stdout + r.stderr)

    def mpmd(self, out, visible, *extra, var="CUDA_VISIBLE_DEVICES"):
        """np = len(visible) ranks, rank i with var=visible[i] (CUDA_VISIBLE_DEVICES: Slurm's per-task binding)."""
        cmd = [ARGS.mpirun, "--oversubscribe"]
        for i, v in enumerate(visible):
            cmd += [":"] if i else []
            cmd += ["-np", "1", "-x", f"{var}={v}", ARGS.layertap, "extract", "--model",
                    Path(ARGS.fixtures) / "models" / "llama_tp", "--data", Path(ARGS.fixtures) / "data" / "golden.jsonl",
                    "--out", out, "--capture", "eagle3", "--log-level", "warning", "--backend", "cuda", "--tp", "2",
                    *extra]
        return subprocess.run(list(map(str, cmd)), env=ENV, capture_output=True, text=True, timeout=600)

    def test_dry_run_across_gpu_and_gpuless_ranks(self):
        # One rank sees GPUs, the other none (a GPU node beside a login node): the plan's node
        # split is collective, so both must reach it; this hung before. NCCL cannot connect across
        # them, so both plan its 1 GiB allowance out of --gpu-memory.
        r = self.mpmd(self.tmp / "mixed-dry", ["4", "0"], "--dry-run", "--gpu-memory", "2", var="LAYERTAP_SIM_DEVICES")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("a real run would start", r.stdout)
        self.assertEqual(r.stdout.count("NCCL       1.00 GiB allowed for its buffers (not measured"), 2, r.stdout)

    def test_dry_run_connects_nccl_before_measuring(self):
        # Every rank of the TP group has a GPU: the dry run connects NCCL as a real run does (the
        # simulated NCCL, like NCCL 2.22+, takes 64 MiB when it connects, lazily unless
        # NCCL_RUNTIME_CONNECT=0) and measures the free memory after it: 16 GiB - 64 MiB.
        r = extract(self.tmp / "nccl-dry", "llama_tp", 2, "--backend", "cuda", "--tp", "2", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.count("NCCL       0.06 GiB taken when it connected (measured"), 2, r.stdout)
        self.assertEqual(len(re.findall(r"device +[0-9.]+ GiB of 15\.94 GiB: fits", r.stdout)), 2, r.stdout)
        # The real run checks its plan after NCCL connected, and says what NCCL took.
        out = self.tmp / "nccl-run"
        r = extract(out, "llama_tp", 2, "--backend", "cuda", "--tp", "2", log_level="info")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("NCCL connected: 64.0 MiB of device memory, taken before the memory plan was checked", r.stderr)

    def test_dry_run_offers_no_batch_beyond_the_option_bound(self):
        # A tiny model on an 80 GiB card would fit far more tokens than --max-batch-tokens takes.
        r = extract(self.tmp / "cap-dry", "llama_tp", 1, "--backend", "cuda", "--dry-run", "--gpu-memory", "80",
                    env=dict(ENV, LAYERTAP_SIM_DEVICES="0"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("(16777216 tokens per batch, the most --max-batch-tokens allows, would fit)", r.stdout)
        # --max-batch-tokens auto (the default): the largest batch the plan fits, at most 65536.
        self.assertIn("batches of up to 65536 tokens (--max-batch-tokens auto)", r.stdout)


    def test_samples_longer_than_a_batch_run_in_chunks(self):
        # golden.jsonl holds samples of 19, 1, 61, 7 and 33 tokens: batches of 16 tokens run three
        # of them in chunks, each GPU keeping the keys and values (GQA) or latents (MLA) of their
        # earlier chunks; verify recomputes every sample whole on the CPU and compares (kimi_k2's
        # routing, which flips a near tie against the CPU's on sample 2, replayed from the record,
        # whose chunks are joined per sample like the states).
        for model in ("llama_tp", "qwen3_moe", "kimi_k2"):
            with self.subTest(model=model):
                out = self.tmp / f"chunked-{model}"
                r = self.run_ok(out, model, 2, "--backend", "cuda", "--tp", "2", "--max-batch-tokens", "16",
                                log_level="info")
                self.assertIn("longer than a batch run in chunks (the longest: 61 tokens)", r.stderr)
                self.assertIn("keys and values kept for samples of up to 61 tokens", r.stderr)
                _, got = read_output(out)
                self.assertEqual([g[0] for g in got], list(range(5)))
                for g in got:
                    self.assertTrue(np.isfinite(g[3]).all(), f"sample {g[0]}")
                r = verify(out, -1)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_one_gpu_per_task_runs(self):
        out = self.tmp / "per-task"
        r = self.mpmd(out, ["1", "2"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(verify(out, -1).returncode, 0)

    def test_two_tasks_on_one_gpu_are_refused(self):
        out = self.tmp / "shared-gpu"
        r = self.mpmd(out, ["3", "3"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("local ranks 0 and 1 would share the GPU at 0000:13:00.0", r.stdout + r.stderr)
        self.assertFalse((out / "manifest.json").exists())

    def test_more_ranks_than_gpus_is_refused(self):
        env = dict(ENV, LAYERTAP_SIM_DEVICES="2")
        r = extract(self.tmp / "too-many", "llama_tp", 4, "--backend", "cuda", "--tp", "2", env=env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("local ranks 0 and 2 would share the GPU", r.stdout + r.stderr)
        self.assertFalse((self.tmp / "too-many" / "manifest.json").exists())


if __name__ == "__main__":
    run_tests(("layertap", "mpirun", "fixtures", "corrupt"))
