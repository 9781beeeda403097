#!/usr/bin/env python3
"""Stop signals before the batch loop: SIGTERM or SIGUSR1 (Slurm's preemption, scancel, --signal)
while a rank indexes the dataset, opens the checkpoint, loads its weights, or waits in a collective
for a slower rank ends the whole job within seconds with exit code 75, naming the phase, leaving no
shard or manifest; `--resume` then completes the run. Each phase is held open with a pausing
failpoint (LAYERTAP_FAILPOINT=<point>:<n>:pause[@rank]) so the signal lands in it deterministically.
Also: the real pre-read of a large sparse checkpoint (`--dry-run --read-weights`) stops on SIGTERM.
"""
import json
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from e2e_common import ARGS, ENV, run_tests


class StopAtStart(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="layertap-stop-"))
        self.model = Path(ARGS.fixtures) / "models" / "llama"
        self.data = Path(ARGS.fixtures) / "data" / "demo.jsonl"

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, np_, out, failpoint, extra=(), model=None):
        cmd = [ARGS.mpirun, "--oversubscribe", "-np", str(np_), ARGS.layertap, "extract", "--model",
               str(model or self.model), "--data", str(self.data), "--out", str(out), "--capture", "0,2,final",
               "--threads", "1", *extra]
        env = dict(ENV, LAYERTAP_FAILPOINT=failpoint)
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

    def wait_for(self, proc, texts, log):
        """Reads the run's output until every one of texts has appeared in a line."""
        deadline, missing = time.monotonic() + 120, set(texts)
        for line in proc.stdout:
            log.append(line)
            missing -= {t for t in missing if t in line}
            if not missing:
                return
            self.assertLess(time.monotonic(), deadline, f"no {sorted(missing)} line")
        self.fail(f"the run ended before {sorted(missing)}:\n" + "".join(log))

    def rank_pids(self, out):
        pids = subprocess.run(["pgrep", "-f", f"^{ARGS.layertap} extract .*{out}"], capture_output=True,
                              text=True).stdout.split()
        return sorted(map(int, pids))

    def stop(self, np_, failpoint, phase, sig, signal_rank, extra=(), model=None, reached=()):
        """reached: lines to wait for besides the failpoint's (a rank's debug line naming the
        phase it has entered), so the signal lands in that phase on any machine."""
        out = self.tmp / f"out-{failpoint.split(':')[0]}-{sig.name}"
        log = []
        proc = self.start(np_, out, failpoint, extra, model)
        self.wait_for(proc, ["paused", *reached], log)
        if np_ > 1:
            time.sleep(2)  # let the other ranks reach their own wait (the tiny model loads in milliseconds)
        pids = self.rank_pids(out)
        self.assertEqual(len(pids), np_, "".join(log))
        os.kill(pids[signal_rank], sig)
        sent = time.monotonic()
        rest, _ = proc.communicate(timeout=60)
        seconds = time.monotonic() - sent
        log.append(rest)
        text = "".join(log)
        self.assertEqual(proc.returncode, 75, text[-3000:])
        self.assertIn(f"stopped by {sig.name} while {phase}", text)
        # Not a speed check: a rank that ignored the signal would sit until the failpoint's 120 s limit.
        self.assertLess(seconds, 60, f"took {seconds:.1f} s to stop")
        self.assertFalse((out / "manifest.json").exists())
        self.assertEqual(sorted(out.glob("shard*.h5")) if out.exists() else [], [])
        print(f"     {sig.name} to rank {signal_rank} of {np_} while {phase}: exit 75 after {seconds:.2f} s")
        return out

    def test_while_indexing_the_dataset(self):
        out = self.stop(1, "index:1:pause", "indexing the dataset", signal.SIGTERM, 0)
        # Nothing half-done is left in the way: the same command with --resume completes the run.
        p = subprocess.run([ARGS.mpirun, "-np", "1", ARGS.layertap, "extract", "--model", str(self.model), "--data",
                            str(self.data), "--out", str(out), "--capture", "0,2,final", "--resume"],
                           env=ENV, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertTrue(json.loads((out / "manifest.json").read_text())["complete"])

    def test_while_opening_the_checkpoint(self):
        self.stop(2, "checkpoint-open:1:pause@0", "opening the checkpoint", signal.SIGUSR1, 0, ["--tp", "2"])

    def test_while_loading_the_weights(self):
        self.stop(1, "load-layer:2:pause", "loading the weights", signal.SIGTERM, 0)

    def test_while_waiting_for_a_slower_rank(self):
        # Rank 0 is held loading its weights; rank 1 has loaded its own and waits in a collective:
        # the signal to rank 1 alone ends the job.
        phase = "waiting for the other ranks to load their weights"
        self.stop(2, "load-layer:2:pause@0", phase, signal.SIGTERM, 1, ["--log-level", "debug"],
                  reached=[f"[layertap rank 1] debug: start-up: {phase}"])

    def test_pre_read_of_a_large_checkpoint(self):
        if not ARGS.cuda:
            self.skipTest("--read-weights through the CUDA load plan needs a CUDA build")
        model = self.tmp / "kimi"
        subprocess.run([sys.executable, ARGS.tool, "--arch", "kimi-k2.5", "--layers", "2", "--vocab", "4096",
                        "--fill-scales", "0.01", "--out", str(model)], check=True, stdout=subprocess.DEVNULL)
        out = self.tmp / "out-preread"
        cmd = [ARGS.mpirun, "-np", "1", ARGS.layertap, "extract", "--model", str(model), "--data", str(self.data),
               "--out", str(out), "--capture", "0,1,final", "--backend", "cuda", "--dry-run", "--gpu-memory", "141",
               "--read-weights"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
        time.sleep(3)  # planning takes well under a second; the pre-read of 11 GB of holes takes far longer
        self.assertIsNone(proc.poll(), "the pre-read ended before the signal")
        os.kill(self.rank_pids(out)[0], signal.SIGTERM)
        sent = time.monotonic()
        text, _ = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 75, text[-3000:])
        self.assertIn("stopped by SIGTERM while loading the weights", text)
        print(f"     SIGTERM during --read-weights: exit 75 after {time.monotonic() - sent:.2f} s")


if __name__ == "__main__":
    run_tests(("layertap", "mpirun", "fixtures", "tool", "cuda"), defaults={"cuda": 0})
