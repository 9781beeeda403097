#!/usr/bin/env python3
"""Crashes, signals and bad states: layertap loses nothing and says what it holds.

- kill: SIGKILL (failpoints) on one rank or all, during a forward, during a shard write and
  before the manifest; `--resume` must then give the same samples, tokens and states (float32
  tolerance) as an uninterrupted run, with no sample lost or duplicated.
- signals: SIGTERM, SIGUSR1 and SIGINT sent to one rank mid-run: exit code 75, an incomplete
  manifest, and a resume that completes; Ctrl-C once (graceful) and twice (at once) without
  mpirun, and to mpirun.
- a resume with different settings is refused naming what differs; a fresh run into a used
  directory is refused.
- NaN/Inf states: the job fails naming the sample, or skips and lists it (--on-nonfinite skip).
- disk full (size-limited tmpfs): a clear error, complete shards kept, resumable once space is freed.
- resume trusts only what checks out: lying progress records, entries outside the output directory,
  complete runs whose shards were truncated or deleted are recomputed, never listed as done.
All runs are seeded and bounded in time.

The tests run in two parts, two ctest entries side by side (tests/e2e/CMakeLists.txt: --part resume,
--part signals); without --part, all of them run.
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

import h5py
import numpy as np

from e2e_common import ARGS, ENV, read_output, run_tests, write_dataset

COMMON = ["--store-dtype", "float32", "--max-batch-tokens", "512", "--shard-size-mib", "1"]

# Every test is in exactly one part (load_tests checks it, so a new test cannot go unrun).
PARTS = {
    "resume": ["test_kill_and_resume", "test_resume_keeps_only_what_checks_out",
               "test_disk_full_keeps_complete_shards_and_resumes"],
    "signals": ["test_sigterm_and_sigusr1_stop_gracefully_and_resume", "test_ctrl_c",
                "test_resume_with_different_settings_is_refused", "test_nonfinite_states_fail_or_are_skipped"],
}


class Resilience(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="layertap-resilience-"))
        cls.fix = Path(ARGS.fixtures)
        cls.model = cls.fix / "models" / "llama_tp"
        cls.data = cls.tmp / "data.jsonl"
        write_dataset(cls.data, 400, seed=5)
        cls.reference = cls.tmp / "reference"
        cls.ref = None  # the uninterrupted run of cls.data, made by the first test that needs it

    @classmethod
    def reference_samples(cls):
        if cls.ref is None:
            p = cls.run_job(1, cls.reference, [])
            assert p.returncode == 0, p.stderr
            _, cls.ref = read_output(cls.reference)
        return cls.ref

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def command(cls, np_, out, extra, tp=1, data=None, model=None, capture="0,2,final", log_level="warning"):
        return [ARGS.mpirun, "--oversubscribe", "-np", str(np_), "-x", "LAYERTAP_FAILPOINT", ARGS.layertap,
                "extract", "--model", str(model or cls.model), "--data", str(data or cls.data), "--out", str(out),
                "--tp", str(tp), "--capture", capture, "--log-level", log_level, *COMMON, *extra]

    @classmethod
    def run_job(cls, np_, out, extra, failpoint="", timeout=180, **kw):
        env = dict(ENV, LAYERTAP_FAILPOINT=failpoint)
        return subprocess.run(cls.command(np_, out, extra, **kw), capture_output=True, text=True, env=env,
                              timeout=timeout)

    def assert_same_as_reference(self, out):
        ref = self.reference_samples()
        manifest, got = read_output(out)
        self.assertTrue(manifest["complete"])
        self.assertEqual([g[0] for g in got], [r[0] for r in ref], "samples lost, duplicated or reordered")
        for (idx, ids, mask, hs), (_, rids, rmask, rhs) in zip(got, ref):
            np.testing.assert_array_equal(ids, rids)
            np.testing.assert_array_equal(mask, rmask)
            err = np.linalg.norm(hs.astype(np.float64) - rhs) / np.linalg.norm(rhs)
            self.assertLessEqual(err, 1e-5, f"sample {idx}")
        self.assertEqual(list(out.glob("*.tmp")), [])

    def test_kill_and_resume(self):
        cases = [("forward:7", 4, 2), ("forward:5@2", 4, 2), ("shard-write:6", 2, 1), ("shard-write:4@1", 2, 1),
                 ("manifest:1", 2, 2)]
        for failpoint, np_, tp in cases:
            with self.subTest(failpoint=failpoint, np=np_, tp=tp):
                out = self.tmp / f"kill-{failpoint.replace(':', '-').replace('@', '-r')}"
                t0 = time.monotonic()
                p = self.run_job(np_, out, [], tp=tp, failpoint=failpoint)
                self.assertNotEqual(p.returncode, 0, "the failpoint did not fire")
                self.assertFalse((out / "manifest.json").exists())
                p = self.run_job(np_, out, ["--resume"], tp=tp)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assert_same_as_reference(out)
                print(f"[resilience] SIGKILL at {failpoint} (np {np_}, tp {tp}): resumed and identical "
                      f"in {time.monotonic() - t0:.1f} s")

    def stop_with_signal(self, sig, out, rank_to_signal):
        """Starts a run slowed to 250 ms a batch (a delay failpoint: about 60 batches per rank, so at
        least 15 s however fast the machine), sends `sig` to one rank once it makes progress; returns
        the exit code."""
        data = self.data
        cmd = self.command(2, out, ["--progress-seconds", "0.1", "--threads", "1"], data=data, log_level="info")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(ENV, LAYERTAP_FAILPOINT="forward:1:delay=250"))
        log = []
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            log.append(line)
            if "progress" in line:
                break
            self.assertLess(time.monotonic(), deadline, "no progress line")
        ranks = subprocess.run(["pgrep", "-f", f"^{ARGS.layertap} extract .*{out}"], capture_output=True,
                               text=True).stdout.split()
        self.assertEqual(len(ranks), 2, "expected two rank processes; log so far:\n" + "".join(log))
        os.kill(int(sorted(ranks, key=int)[rank_to_signal]), sig)
        sent = time.monotonic()
        rest, _ = proc.communicate(timeout=120)
        log.append(rest)
        return proc.returncode, time.monotonic() - sent, "".join(log), data

    def test_sigterm_and_sigusr1_stop_gracefully_and_resume(self):
        for sig, rank in ((signal.SIGTERM, 1), (signal.SIGUSR1, 0), (signal.SIGINT, 1)):
            with self.subTest(signal=sig.name):
                out = self.tmp / f"signal-{sig.name}"
                code, seconds, log, data = self.stop_with_signal(sig, out, rank)
                self.assertEqual(code, 75, log[-3000:])
                manifest = json.loads((out / "manifest.json").read_text())
                self.assertFalse(manifest["complete"])
                self.assertLess(manifest["totals"]["samples"], 400)
                print(f"[resilience] {sig.name} to rank {rank}: exit 75 after {seconds:.2f} s, "
                      f"{manifest['totals']['samples']} samples kept")
                p = self.run_job(2, out, ["--resume"], data=data)
                self.assertEqual(p.returncode, 0, p.stderr)
                final, samples = read_output(out)
                self.assertTrue(final["complete"])
                self.assertEqual([s[0] for s in samples], list(range(400)))

    def test_ctrl_c(self):
        """Ctrl-C (SIGINT to the process group, as a terminal sends it): the first stops after the
        batch in flight (exit 75, an incomplete manifest, resumable); a second one, or a SIGTERM after
        it, ends the process at once (killed by that signal, nothing that looks complete). Under
        mpirun the ranks never see SIGINT: Open MPI 4 sends them SIGCONT, SIGTERM
        odls_base_sigkill_timeout (1) s later and SIGKILL as long again after that, and exits 1
        whatever they return; raising the timeout gives the ranks' graceful stop the time it needs.
        The runs are the reference's 400 samples (about 120 batches), each stopped run slowed by a
        delay failpoint so that it outlasts the signals however fast the machine."""
        data = self.data

        def start(cmd, failpoint=""):
            # A session of its own: killpg reaches layertap and any helper it started, as Ctrl-C would.
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env=dict(ENV, LAYERTAP_FAILPOINT=failpoint), start_new_session=True)
            log = []
            for line in proc.stdout:
                log.append(line)
                if "progress" in line:
                    return proc, log
            self.fail("no progress line:\n" + "".join(log))

        def wait_taken(pid, sig):
            """Until no `sig` is pending for the process: its handler has taken it. Two signals of
            one kind sent before the first is taken merge into one (a busy machine can leave the
            process unscheduled for longer than the test waits between them)."""
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    with open(f"/proc/{pid}/status") as f:
                        pending = next(int(l.split()[1], 16) for l in f if l.startswith("ShdPnd:"))
                except FileNotFoundError:
                    return  # already ended
                if not pending & (1 << (sig - 1)):
                    return
                time.sleep(0.005)
            self.fail(f"{sig.name} still pending after 30 s")

        def finish(proc, log):
            rest, _ = proc.communicate(timeout=120)
            return "".join(log) + rest

        def resume_and_verify(np_, out):
            p = self.run_job(np_, out, ["--resume", "--threads", "1"], data=data)
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
            final, samples = read_output(out)
            self.assertTrue(final["complete"])
            self.assertEqual([s[0] for s in samples], list(range(400)))
            v = subprocess.run([ARGS.layertap, "verify", out, "--samples", "3"], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

        single = [a for a in self.command(1, "OUT", ["--progress-seconds", "0.1", "--threads", "1"], data=data,
                                          log_level="info")][6:]  # without mpirun and its options
        self.assertEqual(single[0], ARGS.layertap)
        cases = (("once", [signal.SIGINT], 75),
                 ("twice", [signal.SIGINT, signal.SIGINT], -signal.SIGINT),
                 ("then SIGTERM", [signal.SIGINT, signal.SIGTERM], -signal.SIGTERM),
                 # a graceful stop already under way: this Ctrl-C is the first one, not a second
                 ("after SIGUSR1", [signal.SIGUSR1, signal.SIGINT], 75))
        for name, signals, expected in cases:
            with self.subTest(ctrl_c=name):
                out = self.tmp / f"ctrl-c-{name.replace(' ', '-')}"
                # Once: batches of 250 ms (a delay failpoint), 30 s in all. Twice: batches of two
                # seconds; both signals come well inside the batch after the progress line, the
                # second once the first has been taken, so the second surely finds the first one's
                # stop waiting for the batch in flight.
                proc, log = start([str(out) if a == "OUT" else a for a in single],
                                  "forward:1:delay=250" if len(signals) == 1 else "forward:1:delay=2000")
                if len(signals) > 1:
                    time.sleep(0.2)
                sent = time.monotonic()
                for i, sig in enumerate(signals):
                    if i:
                        wait_taken(proc.pid, signals[i - 1])
                        time.sleep(0.05)
                    os.killpg(proc.pid, sig)
                log = finish(proc, log)
                seconds = time.monotonic() - sent
                self.assertEqual(proc.returncode, expected, log[-3000:])
                if expected == 75:
                    self.assertIn(f"stop requested ({signals[0].name})", log)
                    manifest = json.loads((out / "manifest.json").read_text())
                    self.assertFalse(manifest["complete"])
                    self.assertEqual(manifest["run"]["stopped_by"], signals[0].name)
                    self.assertLess(manifest["totals"]["samples"], 400)
                else:
                    # Killed in the batch in flight: no manifest, only the shards closed before.
                    self.assertLess(seconds, 10, "the second signal did not end the process at once")
                    self.assertNotIn("stopped, resumable", log)
                    self.assertFalse((out / "manifest.json").exists())
                print(f"[resilience] Ctrl-C {name}: exit {proc.returncode} after {seconds:.2f} s")
                resume_and_verify(1, out)

        # Under mpirun: Ctrl-C reaches mpirun alone (each rank has a process group of its own).
        for timeout in (None, 5):
            with self.subTest(mpirun=f"odls_base_sigkill_timeout {timeout or 'default (1)'}"):
                out = self.tmp / f"ctrl-c-mpirun-{timeout}"
                cmd = self.command(2, out, ["--progress-seconds", "0.1", "--threads", "1"], data=data,
                                   log_level="info")
                if timeout:
                    cmd[1:1] = ["--mca", "odls_base_sigkill_timeout", str(timeout)]
                # Batches slowed to 250 ms (a delay failpoint; about 60 per rank, 15 s): the run
                # outlasts mpirun's forwarding of the stop, SIGTERM 5 s after Ctrl-C included, however
                # fast the machine (unslowed, a quiet one finished the whole job first).
                proc, log = start(cmd, "forward:1:delay=250")
                sent = time.monotonic()
                os.killpg(proc.pid, signal.SIGINT)
                log = finish(proc, log)
                seconds = time.monotonic() - sent
                self.assertEqual(proc.returncode, 1, log[-3000:])  # mpirun's, whatever the ranks return
                manifest = out / "manifest.json"
                if timeout:  # seconds enough for the graceful stop, which SIGTERM started
                    self.assertIn("stop requested (SIGTERM)", log)
                    self.assertEqual(json.loads(manifest.read_text())["run"]["stopped_by"], "SIGTERM")
                # With the default second, SIGKILL may come before the manifest (a loaded machine).
                if manifest.exists():
                    self.assertFalse(json.loads(manifest.read_text())["complete"])
                print(f"[resilience] Ctrl-C to mpirun (sigkill timeout {timeout or 1} s): exit 1 after "
                      f"{seconds:.2f} s, manifest {'written' if manifest.exists() else 'not written'}")
                resume_and_verify(2, out)

    def test_resume_with_different_settings_is_refused(self):
        out = self.tmp / "refuse"
        p = self.run_job(2, out, [], tp=1, failpoint="forward:4")
        self.assertNotEqual(p.returncode, 0)
        other_data = self.tmp / "other.jsonl"
        write_dataset(other_data, 50, seed=99)
        for kw, what in (({"capture": "0,final"}, "capture_point_ids"),
                         ({"data": other_data}, "dataset_sha256"),
                         ({"model": self.fix / "models" / "llama"}, "model_config_sha256"),
                         ({"tp": 2}, "tp")):
            with self.subTest(what=what):
                p = self.run_job(2, out, ["--resume"], **kw)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn("cannot resume", p.stderr)
                self.assertIn(what, p.stderr)
        p = self.run_job(2, out, [])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--resume", p.stderr)

    def test_nonfinite_states_fail_or_are_skipped(self):
        # The states of sample 7 become NaN by a failpoint: the weights must be finite (both backends
        # refuse a NaN weight), so the states of a real run turn non-finite only in the arithmetic.
        model = self.model
        poison = "state:7:nan"
        data = self.tmp / "poisoned.jsonl"
        write_dataset(data, 12, seed=3)

        out = self.tmp / "nan-fail"
        p = self.run_job(1, out, [], data=data, model=model, failpoint=poison)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("sample 's7' (index 7) has NaN/Inf states", p.stderr)
        self.assertFalse((out / "manifest.json").exists())

        out = self.tmp / "nan-skip"
        p = self.run_job(2, out, ["--on-nonfinite", "skip"], data=data, model=model, failpoint=poison)
        self.assertEqual(p.returncode, 0, p.stderr)
        manifest, samples = read_output(out)
        self.assertEqual([s["index"] for s in manifest["skipped_samples"]], [7])
        self.assertEqual([s[0] for s in samples], [i for i in range(12) if i != 7])
        self.assertTrue(all(np.isfinite(s[3]).all() for s in samples))
        v = subprocess.run([ARGS.layertap, "verify", out, "--samples", "-1", "--model", model], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # inspect, verify and --resume apply one rule: the dataset's 12 = 11 held + 1 skipped.
        i = subprocess.run([ARGS.layertap, "inspect", out], capture_output=True, text=True, timeout=120)
        self.assertEqual(i.returncode, 0, i.stdout + i.stderr)
        self.assertIn("1 sample(s) skipped", i.stdout)
        before = {f.name: (f.stat().st_mtime_ns, f.stat().st_ino) for f in out.glob("shard-*.h5")}
        p = self.run_job(2, out, ["--on-nonfinite", "skip", "--resume"], data=data, model=model, log_level="info",
                         failpoint=poison)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("already complete; nothing to do", p.stderr + p.stdout)
        self.assertEqual({f.name: (f.stat().st_mtime_ns, f.stat().st_ino) for f in out.glob("shard-*.h5")}, before)

        # An interrupted skip run: the shard that holds the skipped sample's gap is kept by --resume
        # (not recomputed), the resumed manifest lists the sample as skipped, and every tool accepts it.
        data = self.tmp / "poisoned-long.jsonl"
        write_dataset(data, 60, seed=3)
        out = self.tmp / "nan-skip-resumed"
        p = self.run_job(1, out, ["--on-nonfinite", "skip"], data=data, model=model, failpoint="state:3:nan,forward:12")
        self.assertNotEqual(p.returncode, 0, "the failpoint did not fire")
        records = json.loads((out / "shard.progress.json").read_text())["closed_shards"]
        self.assertGreaterEqual(len(records), 2, "the case needs closed shards")
        gap = records[0]
        self.assertEqual((gap["first_sample"], gap["samples"]), (0, gap["last_sample"]), "shard 0 holds the gap")
        before = (out / gap["file"]).stat()
        p = self.run_job(1, out, ["--on-nonfinite", "skip", "--resume"], data=data, model=model, log_level="info",
                         failpoint="state:3:nan")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertNotIn("is not kept", p.stderr)
        self.assertIn(f"({records[-1]['last_sample'] + 1} kept from the interrupted run)", p.stderr)
        after = (out / gap["file"]).stat()
        self.assertEqual((after.st_ino, after.st_mtime_ns), (before.st_ino, before.st_mtime_ns), "shard 0 rewritten")
        manifest, samples = read_output(out)
        self.assertTrue(manifest["complete"])
        self.assertEqual([s["index"] for s in manifest["skipped_samples"]], [3])
        self.assertEqual([s[0] for s in samples], [i for i in range(60) if i != 3])
        for tool in (["inspect", out], ["verify", out, "--samples", "4", "--model", model]):
            r = subprocess.run([ARGS.layertap, *tool], capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        print(f"[resilience] skip run resumed: {gap['file']} (with the gap at sample 3) kept; inspect and verify agree")

    def test_resume_keeps_only_what_checks_out(self):
        """--resume trusts no record it did not check: a progress record that lies about its last
        sample, an entry naming ../x.h5 with a matching checksum, a complete run whose shard was
        truncated or deleted, and a complete manifest emptied (no shards, a dataset of 0 samples)
        or with two shard entries swapped are each recomputed (a warning names the shard), never listed as done;
        the final output equals the reference and verifies. An intact complete run is left alone."""
        def progress(out):
            return json.loads((out / "shard.progress.json").read_text())

        def lie_about_last_sample(out):
            p = progress(out)
            last = p["closed_shards"][-1]
            last["last_sample"] += 150
            last["samples"] += 150
            (out / "shard.progress.json").write_text(json.dumps(p))
            return last["file"], "holds"

        def outside_entry(out):
            p = progress(out)
            outside = out.parent / f"{out.name}-x.h5"
            shutil.copy(out / p["closed_shards"][0]["file"], outside)  # same bytes: the checksum matches
            p["closed_shards"][0]["file"] = f"../{outside.name}"
            (out / "shard.progress.json").write_text(json.dumps(p))
            return f"../{outside.name}", "names"

        def truncate(out):
            f = sorted(out.glob("shard-*.h5"))[1]
            os.truncate(f, f.stat().st_size // 2)
            return f.name, "bytes"

        def delete(out):
            f = sorted(out.glob("shard-*.h5"))[0]
            f.unlink()
            return f.name, "missing"

        def empty_manifest(out):  # complete, no shards, a dataset of 0 samples: consistent in itself
            m = json.loads((out / "manifest.json").read_text())
            m["shards"], m["totals"] = [], {"samples": 0, "tokens": 0, "bytes": 0}
            m["dataset"]["samples"] = 0
            (out / "manifest.json").write_text(json.dumps(m))
            return "manifest.json", "dataset of 0 samples"

        def swapped_entries(out):  # sizes, SHA-256s and counts still consistent
            m = json.loads((out / "manifest.json").read_text())
            m["shards"][0], m["shards"][1] = m["shards"][1], m["shards"][0]
            (out / "manifest.json").write_text(json.dumps(m))
            return "manifest.json", "is not after the previous shards' last sample"

        cases = [("lying progress record", "forward:20", lie_about_last_sample),
                 ("../x.h5 in the progress record", "manifest:1", outside_entry),
                 ("complete run, truncated shard", "", truncate),
                 ("complete run, deleted shard", "", delete),
                 ("complete run, emptied manifest", "", empty_manifest),
                 ("complete run, shard entries swapped", "", swapped_entries)]
        for name, failpoint, tamper in cases:
            with self.subTest(name):
                out = self.tmp / ("trust-" + name.replace(" ", "-").replace("/", "").replace(".", ""))
                p = self.run_job(1, out, [], failpoint=failpoint)
                self.assertEqual(p.returncode != 0, bool(failpoint), p.stderr[-2000:])
                self.assertGreaterEqual(len(progress(out)["closed_shards"]), 2, "the case needs closed shards")
                outside = out.parent / f"{out.name}-x.h5"
                shard, why = tamper(out)
                p = self.run_job(1, out, ["--resume"], log_level="info")
                self.assertEqual(p.returncode, 0, p.stderr[-3000:])
                self.assertNotIn("nothing to do", p.stderr + p.stdout)
                self.assertIn(shard, p.stderr)
                self.assertIn(why, p.stderr)
                self.assertIn("recomputed", p.stderr)
                self.assert_same_as_reference(out)
                manifest = json.loads((out / "manifest.json").read_text())
                self.assertTrue(all("/" not in s["file"] for s in manifest["shards"]), manifest["shards"])
                if outside.exists():  # the file outside the output directory is neither listed nor touched
                    self.assertEqual(outside.read_bytes(), (self.reference / "shard-00000.h5").read_bytes())
                v = subprocess.run([ARGS.layertap, "verify", out, "--samples", "3"], capture_output=True, text=True,
                                   timeout=300)
                self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
                print(f"[resilience] {name}: {shard} recomputed; the output verifies")
        # An intact complete run is checked and left as it is.
        p = self.run_job(1, out, ["--resume"], log_level="info")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("already complete; nothing to do", p.stderr + p.stdout)

    def test_disk_full_keeps_complete_shards_and_resumes(self):
        mnt = self.tmp / "small-disk"
        mnt.mkdir()
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True)
        if mounted.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
        try:
            out = mnt / "out"
            # The projection refuses this run before it starts; the disk filling up mid-run (another
            # writer, a quota) is what is tested here, so the check is overridden.
            p = self.run_job(2, out, [])
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("are free at", p.stderr)
            self.assertFalse(out.exists() and any(out.iterdir()), "nothing is written before the refusal")
            p = self.run_job(2, out, ["--ignore-free-space"])
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("the disk is full; complete shards are kept", p.stderr)
            self.assertIn("No space left on device", p.stderr)
            self.assertFalse((out / "manifest.json").exists())
            kept = sorted(out.glob("shard-g*-*.h5"))
            self.assertGreater(len(kept), 0, "complete shards must survive")
            for f in kept:
                with h5py.File(f, "r") as h:  # each kept shard is complete and readable
                    self.assertEqual(h["sample_offsets"][-1], h["input_ids"].shape[0])
            subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
            p = self.run_job(2, out, ["--resume"])
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assert_same_as_reference(out)
            print(f"[resilience] disk full: {len(kept)} complete shards kept, resumed after remount")
        finally:
            subprocess.run(["umount", "-l", str(mnt)])


def load_tests(loader, tests, pattern):
    names = loader.getTestCaseNames(Resilience)
    in_parts = sorted(n for part in PARTS.values() for n in part)
    assert in_parts == sorted(names), f"each test must be in exactly one of PARTS: {in_parts} vs {sorted(names)}"
    return unittest.TestSuite(map(Resilience, PARTS[ARGS.part] if ARGS.part else names))


if __name__ == "__main__":
    run_tests(("layertap", "mpirun", "fixtures", "part"), defaults={"part": ""})
