#!/usr/bin/env python3
"""tools/make_shape_checkpoint.py: full-size shape-only checkpoints. Each built-in layout, at a few
layers and at full depth, read back with a reader of its own: the safetensors layout (padded header,
__metadata__, contiguous data_offsets in safetensors' dtype-then-name order, file size = 8 + header
+ data), the index, the real tensor names, shapes and dtypes, the full-size totals (Kimi-K2.5 about
595 GB, DeepSeek-V3 with MTP about 689 GB, Llama-3.1-70B about 141 GB, Mixtral-8x7B about 93.4 GB,
GLM-4.5 with MTP about 717 GB, GLM-4.5-Air with MTP about 221 GB) at a few MB of disk, the
weight_shape values, holes by default and --fill-scales values; and the layouts generated from the
committed fixtures' config.json equal the fixtures' own tensor lists.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

from e2e_common import ARGS, read_safetensors_header, run_tests

DTYPE_SIZE = {"U8": 1, "F8_E4M3": 1, "F16": 2, "BF16": 2, "I32": 4, "F32": 4, "I64": 8}
# safetensors' Dtype enum order (it writes tensors by dtype, descending, then by name)
DTYPE_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64",
               "I64", "U64"]


def cdiv(a, b):
    return -(-a // b)


def read_bytes(path, offset, size):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def bf16_to_f32(raw):
    return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)


class Checkpoint:
    """A written directory read back and checked as a safetensors checkpoint: .tensors maps
    name -> (file, dtype, shape), .where name -> (file offset, bytes)."""

    def __init__(self, test, d):
        self.dir = Path(d)
        self.config = json.loads((self.dir / "config.json").read_text())
        index = json.loads((self.dir / "model.safetensors.index.json").read_text())
        self.tensors = {}
        self.where = {}
        self.logical = 0
        self.disk = 0
        shards = sorted(self.dir.glob("*.safetensors"))
        test.assertEqual(sorted(set(index["weight_map"].values())), [p.name for p in shards])
        for i, p in enumerate(shards):
            test.assertEqual(p.name, f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors")
            n, raw, h = read_safetensors_header(p)
            test.assertEqual(n % 8, 0, p)
            test.assertTrue(raw.rstrip(b" ").endswith(b"}") and len(raw) - len(raw.rstrip(b" ")) < 8, p)  # space padding
            test.assertEqual(h.pop("__metadata__"), {"format": "pt"}, p)
            entries = sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0])
            order = [(-DTYPE_ORDER.index(v["dtype"]), k) for k, v in entries]
            test.assertEqual(order, sorted(order), f"{p}: not in safetensors' dtype/name order")
            end = 0
            for name, v in entries:
                a, b = v["data_offsets"]
                test.assertEqual(a, end, f"{p}: {name} leaves a gap or overlaps")
                size = DTYPE_SIZE[v["dtype"]]
                for dim in v["shape"]:
                    size *= dim
                test.assertEqual(b - a, size, f"{p}: {name}")
                end = b
                test.assertNotIn(name, self.tensors)
                test.assertEqual(index["weight_map"][name], p.name)
                self.tensors[name] = (p, v["dtype"], v["shape"])
                self.where[name] = (8 + n + a, b - a)
            st = os.stat(p)
            test.assertEqual(st.st_size, 8 + n + end, p)
            self.logical += end
            self.disk += st.st_blocks * 512
        test.assertEqual(set(index["weight_map"]), set(self.tensors))
        test.assertEqual(index["metadata"]["total_size"], self.logical)
        self.disk += sum(os.stat(self.dir / f).st_blocks * 512 for f in ("config.json", "model.safetensors.index.json"))

    def shape(self, name):
        return self.tensors[name][2]

    def dtype(self, name):
        return self.tensors[name][1]

    def data(self, name):
        return read_bytes(self.tensors[name][0], *self.where[name])


class ShapeCheckpoint(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="layertap-shapes-"))
        cls.runs = 0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def tool(self, *args, ok=True):
        p = subprocess.run([sys.executable, ARGS.tool, *map(str, args)], capture_output=True, text=True, timeout=600)
        if ok:
            self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def make(self, *args):
        ShapeCheckpoint.runs += 1
        out = self.tmp / f"run{self.runs}"
        p = self.tool(*args, "--out", out)
        print(f"\n  {' '.join(map(str, args))}: {p.stdout.strip()}", file=sys.stderr)
        ck = Checkpoint(self, out)
        self.assertIn(f"{len(ck.tensors)} tensors", p.stdout)
        return ck

    def drop(self, ck):
        shutil.rmtree(ck.dir)

    # ---- few-layer variants: names, shapes, dtypes at full width ----

    def test_kimi_k25_three_layers(self):
        ck = self.make("--arch", "kimi-k2.5", "--layers", 3, "--shards", 4)
        self.assertEqual(len(list(ck.dir.glob("*.safetensors"))), 4)
        self.assertEqual(ck.config["architectures"], ["KimiK25ForConditionalGeneration"])
        tc = ck.config["text_config"]
        self.assertEqual((tc["num_hidden_layers"], tc["first_k_dense_replace"], tc["hidden_size"]), (3, 1, 7168))
        self.assertEqual(tc["quantization_config"]["quant_method"], "compressed-tensors")
        p = "language_model.model."
        self.assertEqual(ck.shape(p + "embed_tokens.weight"), [163840, 7168])
        self.assertEqual(ck.shape("language_model.lm_head.weight"), [163840, 7168])
        self.assertEqual(ck.shape(p + "norm.weight"), [7168])
        self.assertEqual(ck.shape(p + "layers.0.mlp.gate_proj.weight"), [18432, 7168])
        self.assertEqual(ck.shape(p + "layers.0.mlp.down_proj.weight"), [7168, 18432])
        for i in range(3):
            a = f"{p}layers.{i}.self_attn."
            self.assertEqual(ck.shape(a + "q_a_proj.weight"), [1536, 7168])
            self.assertEqual(ck.shape(a + "q_b_proj.weight"), [64 * 192, 1536])
            self.assertEqual(ck.shape(a + "kv_a_proj_with_mqa.weight"), [576, 7168])
            self.assertEqual(ck.shape(a + "kv_b_proj.weight"), [64 * 256, 512])
            self.assertEqual(ck.shape(a + "o_proj.weight"), [7168, 64 * 128])
            self.assertEqual(ck.dtype(a + "o_proj.weight"), "BF16")
        for i in (1, 2):
            m = f"{p}layers.{i}.mlp."
            self.assertEqual((ck.dtype(m + "gate.weight"), ck.shape(m + "gate.weight")), ("BF16", [384, 7168]))
            self.assertEqual((ck.dtype(m + "gate.e_score_correction_bias"), ck.shape(m + "gate.e_score_correction_bias")),
                             ("F32", [384]))
            self.assertEqual(ck.shape(m + "shared_experts.down_proj.weight"), [7168, 2048])
            self.assertEqual(ck.shape(m + "experts.383.down_proj.weight_packed"), [7168, 256])
            self.assertEqual(ck.shape(m + "experts.383.down_proj.weight_scale"), [7168, 64])
            self.assertEqual(ck.shape(m + "experts.0.gate_proj.weight_packed"), [2048, 896])
            self.assertEqual(ck.shape(m + "experts.0.gate_proj.weight_scale"), [2048, 224])
            self.assertNotIn(m + "experts.384.up_proj.weight_packed", ck.tensors)
        self.assertNotIn(p + "layers.3.input_layernorm.weight", ck.tensors)
        # only routed experts are packed; the vision tower and projector exist, plain bf16
        for name, (_, dtype, _) in ck.tensors.items():
            if name.endswith(("weight_packed", "weight_scale", "weight_shape")):
                self.assertIn(".mlp.experts.", name)
        vision = [n for n in ck.tensors if n.startswith(("vision_tower.", "mm_projector."))]
        self.assertGreater(len(vision), 100)
        self.assertTrue(all(ck.dtype(n) == "BF16" for n in vision))
        vision_bytes = sum(np.prod(ck.shape(n)) * 2 for n in vision)
        self.assertTrue(0.2e9 < vision_bytes < 1.5e9, vision_bytes)
        self.check_weight_shapes(ck, group=32)
        self.assertLess(ck.disk, 16e6)
        # holes by default: scales, norms, router bias all read zero
        for name in (p + "layers.1.mlp.experts.5.up_proj.weight_scale", p + "layers.1.input_layernorm.weight",
                     p + "layers.2.mlp.gate.e_score_correction_bias"):
            self.assertEqual(ck.data(name).count(0), len(ck.data(name)), name)
        self.drop(ck)

    def test_deepseek_v3_three_layers(self):
        ck = self.make("--arch", "deepseek-v3", "--layers", 3)
        c = ck.config
        self.assertEqual((c["num_hidden_layers"], c["first_k_dense_replace"], c["num_nextn_predict_layers"]), (3, 2, 1))
        for i in range(4):  # 0, 1 dense; 2 MoE; 3 the MTP layer
            a = f"model.layers.{i}.self_attn."
            self.assertEqual((ck.dtype(a + "q_b_proj.weight"), ck.shape(a + "q_b_proj.weight")), ("F8_E4M3", [24576, 1536]))
            self.assertEqual((ck.dtype(a + "q_b_proj.weight_scale_inv"), ck.shape(a + "q_b_proj.weight_scale_inv")),
                             ("F32", [192, 12]))
            self.assertEqual(ck.shape(a + "kv_a_proj_with_mqa.weight_scale_inv"), [5, 56])  # 576 rows: a partial block
            self.assertEqual(ck.shape(a + "o_proj.weight"), [7168, 16384])
            self.assertEqual(ck.dtype(a + "q_a_layernorm.weight"), "BF16")
        self.assertEqual(ck.dtype("model.layers.1.mlp.down_proj.weight"), "F8_E4M3")
        self.assertEqual(ck.shape("model.layers.1.mlp.down_proj.weight_scale_inv"), [56, 144])
        self.assertNotIn("model.layers.1.mlp.gate.weight", ck.tensors)
        for i in (2, 3):
            m = f"model.layers.{i}.mlp."
            self.assertEqual((ck.dtype(m + "gate.weight"), ck.shape(m + "gate.weight")), ("BF16", [256, 7168]))
            self.assertEqual(ck.dtype(m + "gate.e_score_correction_bias"), "F32")
            self.assertEqual(ck.dtype(m + "experts.255.down_proj.weight"), "F8_E4M3")
            self.assertEqual(ck.shape(m + "experts.255.down_proj.weight_scale_inv"), [56, 16])
            self.assertEqual(ck.dtype(m + "shared_experts.up_proj.weight"), "F8_E4M3")
        mtp = "model.layers.3."
        self.assertEqual((ck.dtype(mtp + "eh_proj.weight"), ck.shape(mtp + "eh_proj.weight")), ("BF16", [7168, 14336]))
        for name in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
            self.assertEqual(ck.shape(mtp + name), [7168])
        self.assertEqual(ck.shape(mtp + "shared_head.head.weight"), [129280, 7168])
        self.assertEqual(ck.shape(mtp + "embed_tokens.weight"), [129280, 7168])
        self.assertEqual(ck.dtype("lm_head.weight"), "BF16")
        self.assertFalse(any(n.startswith("model.layers.4.") for n in ck.tensors))
        scale = ck.data("model.layers.2.mlp.experts.7.gate_proj.weight_scale_inv")  # holes by default
        self.assertEqual((len(scale), scale.count(0)), (16 * 56 * 4, 16 * 56 * 4))
        self.assertLess(ck.disk, 16e6)
        self.drop(ck)

    def test_llama_31_70b_three_layers(self):
        ck = self.make("--arch", "llama-3.1-70b", "--layers", 3, "--vocab", 1000)
        self.assertEqual(ck.config["rope_scaling"]["rope_type"], "llama3")
        self.assertEqual(ck.shape("model.embed_tokens.weight"), [1000, 8192])
        self.assertEqual(ck.shape("lm_head.weight"), [1000, 8192])
        self.assertEqual(ck.shape("model.layers.2.self_attn.q_proj.weight"), [8192, 8192])
        self.assertEqual(ck.shape("model.layers.2.self_attn.k_proj.weight"), [1024, 8192])
        self.assertEqual(ck.shape("model.layers.2.self_attn.v_proj.weight"), [1024, 8192])
        self.assertEqual(ck.shape("model.layers.2.mlp.down_proj.weight"), [8192, 28672])
        self.assertEqual(len(ck.tensors), 3 + 3 * 9)
        self.assertTrue(all(dt == "BF16" for _, dt, _ in ck.tensors.values()))
        self.drop(ck)

    def test_mixtral_8x7b_two_layers(self):
        ck = self.make("--arch", "mixtral-8x7b", "--layers", 2)
        self.assertEqual(ck.config["num_local_experts"], 8)
        p = "model.layers.1."
        self.assertEqual(ck.shape(p + "block_sparse_moe.gate.weight"), [8, 4096])
        self.assertEqual(ck.shape(p + "block_sparse_moe.experts.7.w1.weight"), [14336, 4096])  # gate
        self.assertEqual(ck.shape(p + "block_sparse_moe.experts.7.w2.weight"), [4096, 14336])  # down
        self.assertEqual(ck.shape(p + "block_sparse_moe.experts.7.w3.weight"), [14336, 4096])  # up
        self.assertEqual(ck.shape(p + "self_attn.q_proj.weight"), [4096, 4096])
        self.assertEqual(ck.shape(p + "self_attn.k_proj.weight"), [1024, 4096])
        self.assertEqual(ck.shape("lm_head.weight"), [32000, 4096])
        self.assertFalse(any(".mlp." in n or n.endswith(".bias") for n in ck.tensors))
        self.assertEqual(len(ck.tensors), 3 + 2 * (4 + 2 + 1 + 8 * 3))
        self.assertTrue(all(dt == "BF16" for _, dt, _ in ck.tensors.values()))
        self.drop(ck)

    def test_glm_45_four_layers(self):
        ck = self.make("--arch", "glm-4.5", "--layers", 4, "--fill-scales", 0.01)
        self.assertEqual((ck.config["num_hidden_layers"], ck.config["first_k_dense_replace"]), (4, 3))
        for i in range(3):  # dense
            self.assertEqual(ck.shape(f"model.layers.{i}.mlp.gate_proj.weight"), [12288, 5120])
            self.assertNotIn(f"model.layers.{i}.mlp.gate.weight", ck.tensors)
        for p in ("model.layers.3.", "model.layers.4."):  # MoE; 4 is the MTP layer
            self.assertEqual(ck.shape(p + "self_attn.q_proj.weight"), [12288, 5120])
            self.assertEqual(ck.shape(p + "self_attn.q_proj.bias"), [12288])
            self.assertEqual(ck.shape(p + "self_attn.k_proj.bias"), [1024])
            self.assertEqual(ck.shape(p + "self_attn.v_proj.bias"), [1024])
            self.assertEqual(ck.shape(p + "self_attn.o_proj.weight"), [5120, 12288])
            self.assertNotIn(p + "self_attn.o_proj.bias", ck.tensors)
            self.assertEqual(ck.shape(p + "self_attn.q_norm.weight"), [128])
            self.assertEqual(ck.shape(p + "self_attn.k_norm.weight"), [128])
            self.assertEqual((ck.dtype(p + "mlp.gate.weight"), ck.shape(p + "mlp.gate.weight")), ("BF16", [160, 5120]))
            self.assertEqual((ck.dtype(p + "mlp.gate.e_score_correction_bias"),
                              ck.shape(p + "mlp.gate.e_score_correction_bias")), ("F32", [160]))
            self.assertEqual(ck.shape(p + "mlp.experts.159.gate_proj.weight"), [1536, 5120])
            self.assertEqual(ck.shape(p + "mlp.experts.159.down_proj.weight"), [5120, 1536])
            self.assertEqual(ck.shape(p + "mlp.shared_experts.up_proj.weight"), [1536, 5120])
            self.assertTrue(np.all(np.frombuffer(ck.data(p + "mlp.gate.e_score_correction_bias"), np.float32) == 0.0))
        mtp = "model.layers.4."
        self.assertEqual(ck.shape(mtp + "eh_proj.weight"), [5120, 10240])
        self.assertEqual(ck.shape(mtp + "embed_tokens.weight"), [151552, 5120])
        self.assertEqual(ck.shape(mtp + "shared_head.head.weight"), [151552, 5120])
        for name in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
            self.assertEqual(ck.shape(mtp + name), [5120])
        self.assertFalse(any(n.startswith("model.layers.5.") for n in ck.tensors))
        norms = [n for n in ck.tensors if n.endswith("norm.weight")]
        self.assertEqual(len(norms), 1 + 5 * 4 + 3)  # final; 2 + q/k per layer; enorm, hnorm, shared_head.norm
        for name in norms:
            self.assertTrue(np.all(bf16_to_f32(ck.data(name)) == 1.0), name)
        self.assertEqual(ck.data("model.layers.3.mlp.gate.weight")[:4096], bytes(4096))  # weights: holes
        self.assertEqual(len(ck.tensors), 3 + 3 * 14 + 496 + 502)
        self.drop(ck)

    def test_glm_45_air_two_layers(self):
        ck = self.make("--arch", "glm-4.5-air", "--layers", 2)
        self.assertEqual((ck.config["num_hidden_layers"], ck.config["first_k_dense_replace"]), (2, 1))
        self.assertEqual(ck.shape("model.layers.0.mlp.down_proj.weight"), [4096, 10944])
        for p in ("model.layers.1.", "model.layers.2."):
            self.assertEqual(ck.shape(p + "self_attn.q_proj.weight"), [12288, 4096])
            self.assertEqual(ck.shape(p + "self_attn.k_proj.bias"), [1024])
            self.assertNotIn(p + "self_attn.q_norm.weight", ck.tensors)  # use_qk_norm false
            self.assertEqual((ck.dtype(p + "mlp.gate.weight"), ck.shape(p + "mlp.gate.weight")), ("BF16", [128, 4096]))
            self.assertEqual(ck.shape(p + "mlp.experts.127.up_proj.weight"), [1408, 4096])
            self.assertEqual(ck.shape(p + "mlp.shared_experts.down_proj.weight"), [4096, 1408])
        self.assertEqual(ck.shape("model.layers.2.eh_proj.weight"), [4096, 8192])
        self.assertEqual(len(ck.tensors), 3 + 12 + 398 + 404)
        self.drop(ck)

    def check_weight_shapes(self, ck, group):
        """Every weight_shape holds [out, in] of its packed weight, in int64."""
        seen = 0
        for name, (_, dtype, shape) in ck.tensors.items():
            if not name.endswith(".weight_shape"):
                continue
            self.assertEqual((dtype, shape), ("I64", [2]), name)
            out, inp = struct.unpack("<2q", ck.data(name))
            packed = ck.shape(name[:-len("shape")] + "packed")
            scale = ck.shape(name[:-len("shape")] + "scale")
            self.assertEqual(packed, [out, cdiv(inp, 8)], name)
            self.assertEqual(scale, [out, cdiv(inp, group)], name)
            seen += 1
        self.assertGreater(seen, 0)
        return seen

    # ---- full size: the real totals, sparse ----

    def test_full_size_totals(self):
        for arch, lo, hi, tensors in (("kimi-k2.5", 550e9, 640e9, 208550), ("deepseek-v3", 650e9, 720e9, 91991),
                                      ("llama-3.1-70b", 135e9, 147e9, 723), ("mixtral-8x7b", 92e9, 95e9, 995),
                                      ("glm-4.5", 705e9, 725e9, 44691), ("glm-4.5-air", 215e9, 226e9, 18329),
                                      ("gpt-oss-120b", 64e9, 66e9, 687), ("gpt-oss-20b", 13.5e9, 14e9, 459),
                                      ("llama-4-scout", 214e9, 217e9, 579), ("llama-4-maverick", 795e9, 805e9, 507),
                                      ("gemma-3-1b", 1.9e9, 2.1e9, 340), ("gemma-3-27b", 54e9, 56e9, 1247)):
            with self.subTest(arch=arch):
                ck = self.make("--arch", arch)
                print(f"  {arch}: {ck.logical} bytes = {ck.logical / 1e9:.2f} GB logical, "
                      f"{ck.disk / 1e6:.1f} MB on disk, {len(ck.tensors)} tensors", file=sys.stderr)
                self.assertTrue(lo < ck.logical < hi, ck.logical)
                self.assertEqual(len(ck.tensors), tensors)
                self.assertLess(ck.disk, 100e6)  # headers, index and weight_shape values only
                sizes = [os.stat(p).st_size for p in ck.dir.glob("*.safetensors")]
                largest = max(size for _, size in ck.where.values())
                if largest < 1e9:
                    self.assertEqual(len(sizes), max(1, round(ck.logical / 5e9)))
                    self.assertLess(max(sizes), 7e9)  # about 5 GB each
                else:  # Llama-4's stacked experts (2.7 GB in Scout, 21.5 GB in Maverick): a shard may hold one
                    self.assertLess(max(sizes), largest + 5e9)
                    self.assertGreater(len(sizes), ck.logical / (largest + 5e9))
                if arch == "kimi-k2.5":
                    self.assertEqual(self.check_weight_shapes(ck, group=32), 60 * 384 * 3)
                if arch == "deepseek-v3":
                    self.assertIn("model.layers.61.eh_proj.weight", ck.tensors)
                    self.assertIn("model.layers.61.mlp.experts.255.down_proj.weight_scale_inv", ck.tensors)
                if arch == "glm-4.5":
                    self.assertIn("model.layers.92.eh_proj.weight", ck.tensors)
                    self.assertIn("model.layers.92.mlp.experts.159.down_proj.weight", ck.tensors)
                    self.assertIn("model.layers.91.self_attn.k_norm.weight", ck.tensors)
                if arch == "gpt-oss-120b":  # the experts stacked in MXFP4, one tensor per projection and part
                    self.assertEqual(ck.tensors["model.layers.35.mlp.experts.gate_up_proj_blocks"][1:],
                                     ("U8", [128, 5760, 90, 16]))
                    self.assertEqual(ck.tensors["model.layers.0.mlp.experts.down_proj_scales"][1:],
                                     ("U8", [128, 2880, 90]))
                    self.assertIn("model.layers.0.self_attn.sinks", ck.tensors)
                if arch == "llama-4-maverick":  # MoE on odd layers, dense feed_forward between
                    self.assertEqual(ck.tensors["language_model.model.layers.1.feed_forward.experts.gate_up_proj"][1:],
                                     ("BF16", [128, 5120, 16384]))
                    self.assertIn("language_model.model.layers.0.feed_forward.gate_proj.weight", ck.tensors)
                if arch == "glm-4.5-air":
                    self.assertIn("model.layers.46.shared_head.head.weight", ck.tensors)
                    self.assertNotIn("model.layers.47.input_layernorm.weight", ck.tensors)
                self.drop(ck)

    # ---- --fill-scales ----

    def test_fill_scales_fp8(self):
        ck = self.make("--arch", "deepseek-v3", "--layers", 2, "--fill-scales", 0.01)
        scales = [n for n in ck.tensors if n.endswith(".weight_scale_inv")]
        self.assertEqual(len(scales), (5 + 3) + 2 * (5 + 256 * 3 + 3))  # layer 0 dense; 1 and the MTP layer 2 MoE
        for name in scales:
            v = np.frombuffer(ck.data(name), np.float32)
            self.assertTrue(np.all(v == np.float32(0.01)), name)
        norms = [n for n in ck.tensors if n.endswith("norm.weight")]
        self.assertEqual(len(norms), 1 + 3 * 4 + 3)  # final; 4 per layer; enorm, hnorm, shared_head.norm
        for name in norms:
            self.assertTrue(np.all(bf16_to_f32(ck.data(name)) == 1.0), name)
        for name in ("model.layers.1.mlp.gate.e_score_correction_bias", "model.layers.2.mlp.gate.e_score_correction_bias"):
            self.assertTrue(np.all(np.frombuffer(ck.data(name), np.float32) == 0.0))
        self.assertEqual(ck.data("model.layers.1.mlp.experts.3.up_proj.weight")[:4096], bytes(4096))  # weights: holes
        self.drop(ck)

    def test_fill_scales_int4(self):
        cfg = Path(ARGS.fixtures) / "models" / "kimi_k25_int4" / "config.json"
        ck = self.make("--config", cfg, "--fill-scales", 0.01)
        scales = [n for n in ck.tensors if n.endswith(".weight_scale")]
        self.assertEqual(len(scales), 3 * 8 * 3)
        for name in scales:
            self.assertEqual(ck.dtype(name), "BF16")
            v = bf16_to_f32(ck.data(name))
            self.assertTrue(np.all(np.abs(v - 0.01) < 0.01 * 2 ** -8), name)
            self.assertEqual(len(set(ck.data(name)[i:i + 2] for i in range(0, len(ck.data(name)), 2))), 1)
        self.check_weight_shapes(ck, group=32)
        for name in [n for n in ck.tensors if n.endswith("norm.weight")]:
            self.assertTrue(np.all(bf16_to_f32(ck.data(name)) == 1.0), name)
        self.drop(ck)

    # ---- --config: the committed fixtures' layouts ----

    def test_fixture_configs_give_fixture_layouts(self):
        models = Path(ARGS.fixtures) / "models"
        for d in sorted(p for p in models.iterdir() if (p / "config.json").exists()):
            with self.subTest(model=d.name):
                want = {}
                for f in d.glob("*.safetensors"):
                    if f.name == "reference.safetensors":
                        continue
                    _, _, h = read_safetensors_header(f)
                    h.pop("__metadata__", None)
                    want.update({k: (v["dtype"], v["shape"]) for k, v in h.items()})
                ck = self.make("--config", d / "config.json")
                got = {k: (dt, s) for k, (_, dt, s) in ck.tensors.items()}
                vision = ("vision_tower.", "mm_projector.")  # plausible names, not the fixture's
                self.assertEqual({k: v for k, v in got.items() if not k.startswith(vision)},
                                 {k: v for k, v in want.items() if not k.startswith(vision)})
                self.assertEqual(any(k.startswith(vision) for k in got), any(k.startswith(vision) for k in want))
                self.assertEqual(ck.config, json.loads((d / "config.json").read_text()))
                self.drop(ck)

    # ---- the command line ----

    def test_refuses_a_non_empty_out(self):
        out = self.tmp / "busy"
        out.mkdir()
        (out / "keep.txt").write_text("x")
        p = self.tool("--arch", "llama-3.1-70b", "--layers", 1, "--out", out, ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("not empty", p.stderr)
        self.tool("--arch", "llama-3.1-70b", "--layers", 1, "--shards", 3, "--out", out, "--force")
        self.tool("--arch", "llama-3.1-70b", "--layers", 1, "--out", out, "--force")  # fewer shards: old ones removed
        ck = Checkpoint(self, out)
        self.assertTrue((out / "keep.txt").exists())
        self.assertEqual(ck.config["num_hidden_layers"], 1)

    def test_dry_run_and_unsupported(self):
        p = self.tool("--arch", "kimi-k2.5", "--dry-run")
        self.assertIn("208550 tensors, 119 shards, 595.15 GB", p.stdout)
        bad = self.tmp / "bad.json"
        bad.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
        p = self.tool("--config", bad, "--dry-run", ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("not supported", p.stderr)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    run_tests(("tool", "fixtures"), defaults={"tool": str(here.parent.parent / "tools" / "make_shape_checkpoint.py"),
                                              "fixtures": str(here.parent / "fixtures")})
