#!/usr/bin/env python3
"""One job per output directory: the lock on --out/.layertap.lock, with real jobs side by side.

- A second job on the --out of a running one (a double submission, a requeued job that starts
  while the first still runs, here with --resume) is refused within seconds on every rank, naming
  the holder (host, pid, Slurm job id); the first job completes and its output verifies.
- inspect and verify are refused while a job holds the lock, naming it; --dry-run reports the
  holder and exits 3 (a real run would refuse) on every rank.
- kill -9 of the holder releases the lock with the process: a new --resume run takes it and
  completes, and the output verifies. A leftover lock file is neither an earlier run nor a foreign
  file (a fresh run into a directory holding only it needs no --overwrite), and --overwrite keeps it.
All runs are seeded and bounded in time; the holding job is slowed in its batch loop by a delaying
failpoint (forward:1:delay=250: a quarter second per batch, about 30 s in all), so that it still
runs while the others are tried whatever the machine's speed.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

import e2e_common
from e2e_common import ARGS, run_tests, write_dataset

ENV = dict(e2e_common.ENV)
ENV.pop("SLURM_JOB_ID", None)  # the lock records of these runs name no Slurm job
COMMON = ["--store-dtype", "float32", "--max-batch-tokens", "512", "--shard-size-mib", "1", "--capture", "0,2,final",
          "--log-level", "warning"]


class ConcurrentJobs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="layertap-concurrent-"))
        cls.model = Path(ARGS.fixtures) / "models" / "llama_tp"
        cls.data = cls.tmp / "data.jsonl"
        write_dataset(cls.data, 400, seed=11)  # over 100 batches of 512 tokens

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def command(self, np_, out, *extra, per_rank=False):
        """mpirun ... layertap extract; with per_rank, every rank prints 'rank R exit C' on stdout."""
        wrap = ["sh", "-c", '"$0" "$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?"'] if per_rank else []
        return [ARGS.mpirun, "--oversubscribe", "-np", str(np_), "-x", "LAYERTAP_FAILPOINT", *wrap, ARGS.layertap,
                "extract", "--model", str(self.model), "--data", str(self.data), "--out", str(out), *COMMON,
                *extra]

    def start(self, np_, out, *extra, failpoint=""):
        return subprocess.Popen(self.command(np_, out, *extra), env=dict(ENV, LAYERTAP_FAILPOINT=failpoint),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    SLOW = "forward:1:delay=250"

    def run_job(self, np_, out, *extra, per_rank=False, timeout=300):
        return subprocess.run(self.command(np_, out, *extra, per_rank=per_rank), env=dict(ENV, LAYERTAP_FAILPOINT=""),
                              capture_output=True, text=True, timeout=timeout)

    def tool(self, *args, timeout=300):
        return subprocess.run([ARGS.layertap, *map(str, args)], capture_output=True, text=True, timeout=timeout)

    def wait_for_holder(self, job, out, until=None):
        """The lock record of the job that holds --out (once it has taken the lock and, with
        `until`, once `until(out)` holds)."""
        lock = out / ".layertap.lock"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if job.poll() is not None:
                self.fail(f"the first job ended early: {job.communicate()[1][-3000:]}")
            if lock.exists() and lock.stat().st_size > 0 and (until is None or until(out)):
                return json.loads(lock.read_text())
            time.sleep(0.05)
        self.fail("the first job did not take the lock within 120 s")

    def assert_refused_naming(self, p, holder, per_rank_of=0):
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("is in use by another layertap job", p.stderr)
        self.assertIn(f"host {holder['host']}, pid {holder['pid']}", p.stderr)
        self.assertIn("no Slurm job", p.stderr)
        self.assertIn(".layertap.lock", p.stderr)
        for rank in range(per_rank_of):  # every rank reports the refusal
            self.assertIn(f"[layertap rank {rank}] error: --out", p.stderr)

    def assert_verifies(self, out):
        i = self.tool("inspect", out)
        self.assertEqual(i.returncode, 0, i.stdout + i.stderr)
        v = self.tool("verify", out, "--samples", "3")
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_second_job_is_refused_and_the_first_completes(self):
        out = self.tmp / "side-by-side"
        first = self.start(1, out, failpoint=self.SLOW)
        try:
            # The first job is in its batch loop once it has closed a shard.
            holder = self.wait_for_holder(first, out, until=lambda o: any(o.glob("shard-*.h5")))
            self.assertEqual(sorted(holder), ["host", "pid", "slurm_job_id", "started"])
            t0 = time.monotonic()
            second = self.run_job(2, out, "--resume")
            took = time.monotonic() - t0
            self.assert_refused_naming(second, holder, per_rank_of=2)
            self.assertLess(took, 60, "the second job was not refused within seconds")
            # Readers are refused while the job writes, naming it.
            i = self.tool("inspect", out)
            self.assertEqual(i.returncode, 1, i.stdout)
            self.assertIn(f"is being written by a layertap job (host {holder['host']}, pid {holder['pid']}", i.stdout)
            v = self.tool("verify", out, "--samples", "1")
            self.assertEqual(v.returncode, 1, v.stdout)
            self.assertIn("is being written by a layertap job", v.stdout)
            self.assertIsNone(first.poll(), "the first job ended before the checks: the test needs a longer run")
        finally:
            stdout, stderr = first.communicate(timeout=600)
        self.assertEqual(first.returncode, 0, stderr[-3000:])
        manifest = json.loads((out / "manifest.json").read_text())
        self.assertTrue(manifest["complete"])
        self.assertEqual(manifest["totals"]["samples"], 400)
        self.assertEqual(list(out.glob("*.tmp")), [])
        self.assert_verifies(out)
        print(f"[concurrent] second job refused in {took:.1f} s naming pid {holder['pid']}; the first verifies")

    def test_kill_9_releases_the_lock(self):
        out = self.tmp / "killed"
        first = self.start(2, out, failpoint=self.SLOW)
        try:
            holder = self.wait_for_holder(first, out, until=lambda o: any(o.glob("*.progress.json")))
            # --dry-run names the holder and exits 3 on every rank: a real run would refuse.
            dry = self.run_job(2, out, "--resume", "--dry-run", "--calibrate-batches", "0", per_rank=True)
            self.assertIn(f"pid {holder['pid']}", dry.stdout)
            self.assertIn("a real run would refuse to start: --out is in use by another job", dry.stdout)
            self.assertEqual(sorted(l for l in dry.stdout.splitlines() if l.startswith("rank ")),
                             ["rank 0 exit 3", "rank 1 exit 3"], dry.stdout + dry.stderr[-2000:])
            second = self.run_job(2, out, "--resume")
            self.assert_refused_naming(second, holder, per_rank_of=2)
            os.kill(int(holder["pid"]), signal.SIGKILL)  # the holder, world rank 0, as a node failure would
            first.communicate(timeout=120)
        finally:
            if first.poll() is None:
                first.kill()
                first.communicate()
        self.assertNotEqual(first.returncode, 0)
        self.assertFalse((out / "manifest.json").exists())
        # The kernel dropped the lock with the process: a resume takes it and completes.
        p = self.run_job(2, out, "--resume")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertTrue(json.loads((out / "manifest.json").read_text())["complete"])
        self.assertNotEqual(json.loads((out / ".layertap.lock").read_text())["pid"], holder["pid"])
        self.assert_verifies(out)
        # The lock file is layertap's own: --overwrite keeps it and the run still verifies.
        p = self.run_job(2, out, "--overwrite")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertTrue((out / ".layertap.lock").exists())
        print(f"[concurrent] kill -9 of pid {holder['pid']}: the resume took the lock and verifies")

    def test_leftover_lock_file_is_no_foreign_file(self):
        out = self.tmp / "leftover"
        out.mkdir()
        (out / ".layertap.lock").write_text('{"host": "gone", "pid": 1, "slurm_job_id": "", "started": "then"}\n')
        small = self.tmp / "small.jsonl"
        write_dataset(small, 20, seed=3)
        p = subprocess.run([ARGS.layertap, "extract", "--model", str(self.model), "--data", str(small), "--out",
                            str(out), *COMMON], capture_output=True, text=True, env=ENV, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assert_verifies(out)


if __name__ == "__main__":
    run_tests(("layertap", "mpirun", "fixtures"))
