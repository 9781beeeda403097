#!/usr/bin/env python3
"""`layertap verify` passes a clean output and catches every corruption made by
tools/corrupt_output.py: swapped points, a point shifted by one layer, `last` stored for
`final`, a sample shifted by one token, two samples exchanged (these with the manifest's
checksums updated, so only recomputation can tell), a truncated shard and a flipped byte; storage
that disagrees with the manifest (filters, dtype and compression attributes) and hostile compressed
chunks (short, long, a 32 KB chunk declaring 1 GiB), each named by shard, dataset and chunk."""
import collections
import hashlib
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import zlib
from pathlib import Path

import h5py
import numpy as np

from e2e_common import ARGS, read_safetensors, run_tests

CAPTURE = "0,2,last,final"  # point ids 0, 2, 4, 5 on the 4-layer fixture


class Verify(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="layertap-verify-"))
        fix = Path(ARGS.fixtures)
        cls.model = fix / "models" / "llama"
        data = fix / "data" / "golden.jsonl"

        def extract(out, capture):
            subprocess.run([ARGS.layertap, "extract", "--model", cls.model, "--data", data, "--out", out,
                            "--capture", capture, "--log-level", "warning"], check=True)
        cls.good = cls.tmp / "good"
        extract(cls.good, CAPTURE)
        cls.shifted = cls.tmp / "shifted"  # every point one layer later: 1, 3, final, final
        extract(cls.shifted, "1,3,final,final")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def verify(self, out):
        return subprocess.run([ARGS.layertap, "verify", out, "--samples", "-1"], capture_output=True, text=True,
                              timeout=120)

    def corrupted(self, *edit, rechecksum=True):
        out = self.tmp / ("bad-" + "-".join(map(str, edit)).replace("/", "_").replace('"', "")[:80])
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(self.good, out)
        cmd = [sys.executable, ARGS.corrupt, out, *map(str, edit)] + (["--rechecksum"] if rechecksum else [])
        subprocess.run(cmd, check=True)
        return out

    def expect_caught(self, message, *edit, rechecksum=True):
        p = self.verify(self.corrupted(*edit, rechecksum=rechecksum))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn(message, p.stdout)
        self.assertIn("FAILED", p.stdout)

    def test_clean_output_passes(self):
        p = self.verify(self.good)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("OK: 0 problem(s), 5 sample(s) recomputed", p.stdout)

    def test_capture_points_swapped(self):
        self.expect_caught("recomputed states differ", "swap-points", 1, 2)

    def test_point_shifted_by_one_layer(self):
        self.expect_caught("recomputed states differ at point 2", "replace-point", 1, self.shifted, 1)

    def test_last_stored_where_final_was_asked(self):
        self.expect_caught("recomputed states differ at point final", "replace-point", 3, self.good, 2)

    def test_sample_shifted_by_one_token(self):
        self.expect_caught("sample 2 ", "shift-tokens", 2)

    def test_two_samples_exchanged(self):
        self.expect_caught("sample 3 ", "exchange-samples", 3, 4)

    def test_truncated_shard(self):
        self.expect_caught("shard-00000.h5", "truncate", 1000, rechecksum=False)

    def test_flipped_byte_in_a_chunk(self):
        self.expect_caught("SHA-256 differs", "flip-byte", rechecksum=False)

    def test_tampered_outputs_fail_cleanly(self):
        """Shards that disagree with the manifest, and manifests that point outside the output, are
        reported by verify and inspect alike, which end with their FAILED line and exit 1 (no crash,
        no read past a buffer, no file outside the directory opened)."""
        cases = [  # (edit, rechecksum, expected in both outputs)
            (("resize", "hidden_states", 48), True, "/hidden_states has shape [121, 4, 48]"),
            (("resize", "sample_index", 9), True, "/sample_offsets has 6 entries for 9 samples"),
            (("resize", "input_ids", 7), True, "/loss_mask has 121 entries for 7 tokens"),
            (("resize", "sample_offsets", 3), True, "/sample_offsets has 3 entries for 5 samples"),
            (("declare-huge", "sample_offsets"), True, "more than a file of"),
            (("declare-huge", "input_ids"), True, "more than a file of"),
            (("set-attr", "capture_point_ids", "[0, 2, 4, 99]"), True, "capture point id 99 is outside [0, 5]"),
            (("set-attr", "capture_point_ids", "[0, 2, 4, 5, 1]"), True, "capture point ids [0, 2, 4, 5, 1]"),
            (("set-attr", "config_sha256", '"0000"'), True, "another model's output"),
            (("manifest", "shards.0.file", '"../good/shard-00000.h5"'), False, "not a plain file name"),
            (("manifest", "shards.0.file", '"/etc/passwd"'), False, "not a plain file name"),
            (("manifest", "shards.0.tokens", '"20"'), False, "key 'tokens' must be an integer"),
            (("manifest", "model.hidden_size", "1e400"), False, "manifest.json"),
            (("manifest", "capture.points", "[]"), False, "no capture points"),
        ]
        for edit, rechecksum, expected in cases:
            with self.subTest(edit=edit):
                out = self.corrupted(*edit, rechecksum=rechecksum)
                for cmd in (["verify", out, "--samples", "-1"], ["inspect", out]):
                    p = subprocess.run([ARGS.layertap, *map(str, cmd)], capture_output=True, text=True, timeout=120)
                    self.assertEqual(p.returncode, 1, f"{cmd[0]}: {p.stdout}{p.stderr}")
                    self.assertIn(expected, p.stdout, f"{cmd[0]}: {p.stdout}")
                    self.assertTrue(p.stdout.splitlines()[-1].startswith("FAILED"), f"{cmd[0]}: {p.stdout}")

    def test_garbage_manifest_ends_with_the_summary(self):
        out = self.corrupted("swap-points", 0, 0)
        (out / "manifest.json").write_text('{"format_version": 1, "complete": tru')
        for cmd in (["verify", out], ["inspect", out]):
            p = subprocess.run([ARGS.layertap, *map(str, cmd)], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("malformed JSON", p.stdout)
            self.assertTrue(p.stdout.splitlines()[-1].startswith("FAILED"), p.stdout)

    def test_lm_head_and_token_statistics_match_numpy(self):
        """verify --lm-head scores stored `final` states (or `last` through the final norm) through the
        checkpoint's LM head; its figures equal a numpy computation from the shards and weights."""
        last_only = self.tmp / "last-only"
        if not last_only.exists():
            subprocess.run([ARGS.layertap, "extract", "--model", self.model, "--data",
                            Path(ARGS.fixtures) / "data" / "golden.jsonl", "--out", last_only, "--capture", "last",
                            "--log-level", "warning"], check=True)
        weights = read_safetensors(self.model / "model.safetensors")
        cfg = json.loads((self.model / "config.json").read_text())
        head = weights["lm_head.weight"].astype(np.float64)  # [V, H]
        norm = weights["model.norm.weight"].astype(np.float64)

        def expected(out, point, through_norm):
            hits = count = 0
            nll = 0.0
            manifest = json.loads((out / "manifest.json").read_text())
            for shard in manifest["shards"]:
                with h5py.File(out / shard["file"], "r") as h:
                    off, ids, mask = h["sample_offsets"][:], h["input_ids"][:], h["loss_mask"][:]
                    hs = h["hidden_states"][:, point].astype(np.float64)  # [T, H]
                for s in range(len(off) - 1):
                    for t in range(off[s], off[s + 1] - 1):
                        if not mask[t + 1]:
                            continue
                        x = hs[t]
                        if through_norm:
                            x = norm * x.astype(np.float32) / np.sqrt(np.mean(x.astype(np.float32) ** 2) + cfg["rms_norm_eps"])
                        logits = head @ x
                        top = logits.max()
                        nll += np.log(np.exp(logits - top).sum()) + top - logits[ids[t + 1]]
                        hits += int(np.argmax(logits) == ids[t + 1])
                        count += 1
            return hits, count, np.exp(nll / count)

        for out, point, through_norm in [(self.good, 3, False), (last_only, 0, True)]:
            with self.subTest(out=out.name):
                p = subprocess.run([ARGS.layertap, "verify", out, "--samples", "0", "--lm-head", "-1"],
                                   capture_output=True, text=True, timeout=120)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                hits, count, ppl = expected(out, point, through_norm)
                m = re.search(r"(\d+) loss-masked next tokens .* top-1 agreement ([\d.]+)%, perplexity ([\d.]+)", p.stdout)
                self.assertIsNotNone(m, p.stdout)
                self.assertEqual(int(m.group(1)), count)
                self.assertAlmostEqual(float(m.group(2)), 100 * hits / count, delta=100 / count + 0.01)
                self.assertAlmostEqual(float(m.group(3)) / ppl, 1.0, delta=1e-3)
        # --lm-head alone scores 64 samples (or all there are); a count after it is taken as its value.
        p = subprocess.run([ARGS.layertap, "verify", self.good, "--lm-head", "--samples", "0"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        n = sum(s["samples"] for s in json.loads((self.good / "manifest.json").read_text())["shards"])
        self.assertIn(f"lm head: {min(64, n)} sample(s)", p.stdout)
        # A demand the output cannot meet fails the verification.
        p = subprocess.run([ARGS.layertap, "verify", self.good, "--samples", "0", "--lm-head", "2", "--min-top1", "0.9"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("below --min-top1 90.00%", p.stdout)

        p = subprocess.run([ARGS.layertap, "verify", self.good, "--samples", "0", "--token-stats"],
                           capture_output=True, text=True, timeout=120)
        ids = []
        manifest = json.loads((self.good / "manifest.json").read_text())
        for shard in manifest["shards"]:
            with h5py.File(self.good / shard["file"], "r") as h:
                ids += [int(i) for i, m in zip(h["input_ids"][:], h["loss_mask"][:]) if m]
        counts = collections.Counter(ids)
        self.assertIn(f"tokens: {len(ids)} loss-masked, {len(counts)} distinct", p.stdout)
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        self.assertIn("most frequent (id x count): " + " ".join(f"{i}x{n}" for i, n in top), p.stdout)

    def test_storage_options_verify_and_record_their_fidelity(self):
        """float8 storage and each compression filter: verify recomputes every sample within the
        storage's step, inspect agrees, the manifest names the filter and (float8) each point's error
        against bf16; a corrupted float8 output still fails."""
        sizes = {}
        for opts in (["--store-dtype", "float8_e4m3", "--compress", "zstd"], ["--compress", "lz4"],
                     ["--store-dtype", "float8_e4m3"], ["--compress", "gzip"]):
            with self.subTest(opts=opts):
                out = self.tmp / ("storage-" + "-".join(opts).replace("--", ""))
                shutil.rmtree(out, ignore_errors=True)
                subprocess.run([ARGS.layertap, "extract", "--model", self.model, "--data",
                                Path(ARGS.fixtures) / "data" / "demo.jsonl", "--out", out, "--capture", CAPTURE,
                                "--log-level", "warning", *opts], check=True)
                p = self.verify(out)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                p = subprocess.run([ARGS.layertap, "inspect", out], capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stdout)
                manifest = json.loads((out / "manifest.json").read_text())
                codec = opts[opts.index("--compress") + 1] if "--compress" in opts else "none"
                self.assertTrue(manifest["compression"].startswith(codec), manifest["compression"])
                sizes[tuple(opts)] = sum(s["bytes"] for s in manifest["shards"])
                if "float8_e4m3" in opts:
                    self.assertEqual(manifest["storage_dtype"], "float8_e4m3fn")
                    fidelity = manifest["float8_fidelity"]
                    self.assertEqual([f["spec"] for f in fidelity], [p["spec"] for p in manifest["capture"]["points"]])
                    for f in fidelity:  # e4m3 keeps 3 mantissa bits: a few percent of each row
                        self.assertLess(f["error_vs_bfloat16"]["rel_rms_error"], 0.05)
                        self.assertGreater(f["error_vs_bfloat16"]["rel_rms_error"], 0.001)
        # float8 halves bf16; compression shrinks it further.
        self.assertLess(sizes[("--store-dtype", "float8_e4m3")], sizes[("--compress", "lz4")])
        self.assertLess(sizes[("--store-dtype", "float8_e4m3", "--compress", "zstd")],
                        sizes[("--store-dtype", "float8_e4m3")])
        bad = self.tmp / "storage-bad"
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(self.tmp / "storage-store-dtype-float8_e4m3", bad)
        subprocess.run([sys.executable, ARGS.corrupt, bad, "swap-points", "1", "3", "--rechecksum"], check=True)
        p = self.verify(bad)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("recomputed states differ", p.stdout)

    # ---- storage: the shard's real filters, dtype and attributes against the manifest, hostile chunks ----

    def storage_output(self, compress):
        out = self.tmp / f"compressed-{compress}"
        if not out.exists():
            subprocess.run([ARGS.layertap, "extract", "--model", self.model, "--data",
                            Path(ARGS.fixtures) / "data" / "golden.jsonl", "--out", out, "--capture", CAPTURE,
                            "--log-level", "warning", "--compress", compress], check=True)
        return out

    @staticmethod
    def rechecksum(out):
        """The manifest's bytes and sha256 made to match the shards again (so only the check under
        test can tell)."""
        manifest = json.loads((out / "manifest.json").read_text())
        for s in manifest["shards"]:
            raw = (out / s["file"]).read_bytes()
            s["bytes"], s["sha256"] = len(raw), hashlib.sha256(raw).hexdigest()
        manifest["totals"]["bytes"] = sum(s["bytes"] for s in manifest["shards"])
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2))

    def copy_of(self, src, name):
        out = self.tmp / name
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(src, out)
        return out

    def test_storage_disagreeing_with_the_manifest_is_reported(self):
        """inspect and verify compare each shard's actual filter pipeline (H5Pget_filter), its dtype
        and compression attributes with the manifest, and report every disagreement."""
        def manifest_key(key, value):
            def edit(out):
                m = json.loads((out / "manifest.json").read_text())
                m[key] = value
                (out / "manifest.json").write_text(json.dumps(m))
            return edit

        def shard_attr(key, value):
            def edit(out):
                with h5py.File(out / "shard-00000.h5", "r+") as h:
                    h.attrs[key] = value
                self.rechecksum(out)
            return edit

        rows = [  # (output, edit, expected in both outputs)
            ("lz4", manifest_key("compression", "zstd:1"),
             ["/hidden_states is filtered by [shuffle, lz4], manifest says compression zstd:1 ([shuffle, zstd:1])",
              "compression attribute 'lz4', manifest says zstd:1"]),
            ("zstd", manifest_key("compression", "zstd:5"),
             ["/hidden_states is filtered by [shuffle, zstd:1], manifest says compression zstd:5"]),
            ("none", manifest_key("compression", "gzip:1"),
             ["/hidden_states is filtered by [], manifest says compression gzip:1 ([shuffle, deflate:1])"]),
            ("lz4", manifest_key("compression", "brotli"), ["compression 'brotli'", "unknown compression"]),
            ("gzip", shard_attr("compression", "none"),
             ["shard-00000.h5: compression attribute 'none', manifest says gzip:1"]),
            ("lz4", shard_attr("dtype", "float32"), ["shard-00000.h5: dtype attribute 'float32', manifest says bfloat16"]),
            ("lz4", manifest_key("storage_dtype", "float32"),
             ["/hidden_states is stored as bfloat16, manifest says float32",
              "dtype attribute 'bfloat16', manifest says float32"]),
        ]
        for i, (compress, edit, expected) in enumerate(rows):
            with self.subTest(compress=compress, row=i):
                out = self.copy_of(self.good if compress == "none" else self.storage_output(compress), f"storage-row-{i}")
                edit(out)
                for cmd in (["verify", out, "--samples", "0"], ["inspect", out]):
                    p = subprocess.run([ARGS.layertap, *map(str, cmd)], capture_output=True, text=True, timeout=120)
                    self.assertEqual(p.returncode, 1, f"{cmd[0]}: {p.stdout}{p.stderr}")
                    for part in expected:
                        self.assertIn(part, p.stdout, f"{cmd[0]}: {p.stdout}")
                    self.assertTrue(p.stdout.splitlines()[-1].startswith("FAILED"), f"{cmd[0]}: {p.stdout}")

    def test_hostile_chunks_are_refused_naming_shard_dataset_and_chunk(self):
        """A stored chunk that decodes short, decodes long or declares 1 GiB (a 32 KB bomb) is a
        problem naming the shard, /hidden_states and the chunk, found in seconds and without
        allocating what it declares; verify reads every other shard as before."""
        def be(v, n):
            return v.to_bytes(n, "big")

        def lz4_literals(n):  # one LZ4 block of n literals: decodes to exactly n bytes
            extra, rest = divmod(n - 15, 255)
            return bytes([0xF0]) + b"\xff" * extra + bytes([rest]) + bytes(n)

        def zstd_rle(total, declare):  # RLE blocks of 128 KiB: 1 GiB in 32 KB
            head = b"\x28\xb5\x2f\xfd" + (b"\xe0" + total.to_bytes(8, "little") if declare else b"\x00\x38")
            blocks, size = total // (128 << 10), 128 << 10
            return head + b"".join(((1 if b + 1 == blocks else 0) | 2 | (size << 3)).to_bytes(3, "little") + b"\0"
                                   for b in range(blocks))

        gib = 1 << 30
        rows = [  # (compression, stored chunk from its decoded size, expected in verify's output)
            ("lz4", lambda n: be(gib, 8) + be(gib, 4) + be(32768, 4) + bytes(32768), "declares 1073741824 decoded bytes"),
            ("lz4", lambda n: be(n, 8) + be(n, 4) + be(len(lz4_literals(n - 100)), 4) + lz4_literals(n - 100), "(short)"),
            ("lz4", lambda n: be(n, 8) + be(n, 4) + be(len(lz4_literals(n + 100)), 4) + lz4_literals(n + 100),
             "decodes to more than"),
            ("zstd", lambda n: zstd_rle(gib, True), "declares 1073741824 decoded bytes"),
            ("zstd", lambda n: zstd_rle(gib, False), "decodes to more than"),
            ("zstd", lambda n: zstd_rle((n // (128 << 10) - 1) * (128 << 10), False), "(short)"),
            ("gzip", lambda n: zlib.compress(bytes(n - 100)), "(short)"),
            ("gzip", lambda n: zlib.compress(bytes(64 << 20), 9), "decodes to more than"),
            ("gzip", lambda n: zlib.compress(bytes(n))[: n // 2000], "truncated"),
        ]
        for compress, chunk, expected in rows:
            with self.subTest(compress=compress, expected=expected):
                out = self.copy_of(self.storage_output(compress), f"chunk-{compress}-{expected[:12].strip('()')}")
                with h5py.File(out / "shard-00000.h5", "r+") as h:
                    ds = h["hidden_states"]
                    n = ds.chunks[0] * ds.chunks[1] * ds.chunks[2] * ds.id.get_type().get_size()
                    ds.id.write_direct_chunk((0, 0, 0), chunk(n))
                self.rechecksum(out)
                t0 = time.monotonic()
                p = subprocess.run([ARGS.layertap, "verify", out, "--samples", "-1"], capture_output=True, text=True,
                                   timeout=120)
                seconds = time.monotonic() - t0
                self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
                line = next((l for l in p.stdout.splitlines() if "chunk 0" in l), "")
                for part in ("PROBLEM shard-00000.h5", "/hidden_states chunk 0 (rows 0..", "shard-00000.h5' cannot be decoded",
                             expected):
                    self.assertIn(part, line, p.stdout)
                self.assertEqual(p.stdout.count("chunk 0 (rows"), 1, p.stdout)  # each chunk is read once
                self.assertLess(seconds, 60, p.stdout)
                self.assertTrue(p.stdout.splitlines()[-1].startswith("FAILED"), p.stdout)
        # Whatever the chunks declared, no verify process came near the 1 GiB they claimed.
        self.assertLess(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, 1 << 20)

    def test_missing_manifest(self):
        out = self.corrupted("swap-points", 0, 0)
        (out / "manifest.json").unlink()
        p = self.verify(out)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("manifest.json", p.stdout)
        self.assertTrue(p.stdout.splitlines()[-1].startswith("FAILED"), p.stdout)


if __name__ == "__main__":
    run_tests(("layertap", "fixtures", "corrupt"))
