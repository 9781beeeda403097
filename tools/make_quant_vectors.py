#!/usr/bin/env python3
"""Generate the reference vectors of layertap's quantized-weight decoders (src/model/quant_formats.*).

Every expected value comes from the reference library itself:
  fp8_codes.safetensors  all 256 float8_e4m3fn codes and torch's float32 value of each;
  fp8_block.safetensors  DeepSeek FP8 block matrices (shapes not a multiple of the block) and their
                         float32 dequantization computed in torch (w.float() * scale_inv per block);
  int4_group.safetensors compressed-tensors `pack-quantized` symmetric int4 group matrices, packed by
                         its PackedQuantizationCompressor.compress and decoded by its .decompress.

Run:  /opt/fixvenv/bin/python tools/make_quant_vectors.py
Deterministic (fixed seeds, one CPU thread); overwrites tests/fixtures/quant/*.safetensors and README.md.
"""

import argparse
import math
import platform
from pathlib import Path

import compressed_tensors
import safetensors
import torch
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from compressed_tensors.quantization.utils import calculate_qparams
from safetensors.torch import save_file

SEED = 4321

# name -> (out, in, block_rows, block_cols); neither dim a multiple of its block.
FP8_BLOCK_CASES = {
    "small": (37, 45, 16, 8),
    "edge128": (130, 160, 128, 128),  # the DeepSeek block with partial edge blocks in both dims
}

# name -> (out, in, group_size, dtype of weight and scale)
INT4_CASES = {
    "bf16_g32": (24, 96, 32, torch.bfloat16),  # the Kimi-K2 format
    "f16_g32": (24, 96, 32, torch.float16),
    "f32_g32": (24, 96, 32, torch.float32),
    "bf16_g20_in60": (10, 60, 20, torch.bfloat16),  # in not a multiple of 8: groups start mid-word
}
F16_TINY_ROWS = (3, 17)  # rows of f16_g32 scaled by 1e-5 so their scales are float16 subnormals


def fp8_codes():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    return {"codes": codes, "values": codes.float()}


def fp8_block(seed):
    tensors = {}
    for n, (name, (rows, cols, bo, bi)) in enumerate(FP8_BLOCK_CASES.items()):
        g = torch.Generator().manual_seed(seed + n)
        # Every code except the two NaNs (real checkpoints have none), subnormals and -0 included.
        bits = torch.randint(0, 256, (rows, cols), generator=g, dtype=torch.int32)
        bits[(bits & 0x7F) == 0x7F] -= 1
        w = bits.to(torch.uint8).view(torch.float8_e4m3fn)
        scale_inv = torch.rand(math.ceil(rows / bo), math.ceil(cols / bi), generator=g) * 2e-3 + 1e-4
        # Expand each scale over its block, then crop the partial edge blocks.
        per_element = scale_inv.repeat_interleave(bo, 0).repeat_interleave(bi, 1)[:rows, :cols]
        tensors[f"{name}.weight"] = w
        tensors[f"{name}.weight_scale_inv"] = scale_inv
        tensors[f"{name}.block_size"] = torch.tensor([bo, bi], dtype=torch.int64)
        tensors[f"{name}.expected"] = w.float() * per_element
    return tensors


def int4_group(seed):
    tensors = {}
    for n, (name, (rows, cols, group, dtype)) in enumerate(INT4_CASES.items()):
        args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=group)
        scheme = QuantizationScheme(targets=["Linear"], weights=args)
        g = torch.Generator().manual_seed(seed + 100 + n)
        w = torch.randn(rows, cols, generator=g) * 0.05
        if name == "f16_g32":
            w[list(F16_TINY_ROWS)] *= 1e-5
        w = w.to(dtype)
        grouped = w.unflatten(-1, (cols // group, group))
        scale, zero_point = calculate_qparams(grouped.amin(-1), grouped.amax(-1), args)
        # Push ~6% of the elements past either end of the range so q = -8 and q = 7 both occur.
        per_element = scale.repeat_interleave(group, 1)
        extreme = torch.rand(rows, cols, generator=g)
        w = torch.where(extreme < 0.04, -9 * per_element, w)
        w = torch.where(extreme > 0.98, 9 * per_element, w)

        packed = PackedQuantizationCompressor.compress(
            {"weight": w, "weight_scale": scale, "weight_zero_point": zero_point}, scheme)
        assert set(packed) == {"weight_packed", "weight_scale", "weight_shape"}, packed.keys()
        dense = PackedQuantizationCompressor.decompress(dict(packed), scheme)["weight"]

        q = unpack_from_int32(packed["weight_packed"], 4, packed["weight_shape"])
        assert (q == -8).any() and (q == 7).any(), name
        # What this file documents (forward_helpers._dequantize): q is cast to the scale's dtype and
        # multiplied there, i.e. the float32 product rounded once to that dtype.
        widened = (q.float() * packed["weight_scale"].float().repeat_interleave(group, 1)).to(dtype)
        assert dense.dtype == dtype and torch.equal(dense.view(torch.uint8), widened.view(torch.uint8)), name

        for key, value in packed.items():
            tensors[f"{name}.{key}"] = value.contiguous()
        tensors[f"{name}.group_size"] = torch.tensor([group], dtype=torch.int64)
        tensors[f"{name}.weight"] = dense
    return tensors


README = """# Reference vectors of the quantized-weight decoders

Generated by `tools/make_quant_vectors.py` -- do not edit by hand. To regenerate:

    /opt/fixvenv/bin/python tools/make_quant_vectors.py

Seed {seed}, CPU, one thread. Versions: python {python}, torch {torch}, compressed-tensors {ct},
safetensors {st}. Used by `tests/unit/test_quant_formats.cpp`.

- `fp8_codes.safetensors`: `codes` F8_E4M3 [256] (byte i = code i), `values` F32 [256] = torch's
  `codes.float()` (codes 0x7f and 0xff are NaN).
- `fp8_block.safetensors`, per case `small` ([37, 45], block [16, 8]) and `edge128` ([130, 160],
  block [128, 128]): `<case>.weight` F8_E4M3 [out, in] (random codes, no NaN),
  `<case>.weight_scale_inv` F32 [ceil(out/bo), ceil(in/bi)], `<case>.block_size` I64 [2] = [bo, bi],
  `<case>.expected` F32 [out, in] = `weight.float() * scale_inv` expanded per block with
  `repeat_interleave` and cropped (partial edge blocks).
- `int4_group.safetensors`, per case (`bf16_g32`, `f16_g32`, `f32_g32`: [24, 96] group 32 with
  bf16 / f16 / f32 scales; `bf16_g20_in60`: [10, 60] group 20): `<case>.weight_packed` I32,
  `<case>.weight_scale`, `<case>.weight_shape` I64 [2] exactly as compressed-tensors'
  `PackedQuantizationCompressor.compress` writes them (symmetric int4, strategy group), plus
  `<case>.group_size` I64 [1] and `<case>.weight` = what `PackedQuantizationCompressor.decompress`
  returns (the scale's dtype). About 6% of the elements are pushed past the range so q = -8 and 7
  occur; rows 3 and 17 of `f16_g32` are scaled by 1e-5 so their scales are float16 subnormals.
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/fixtures/quant")
    out = parser.parse_args().out
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    save_file(fp8_codes(), out / "fp8_codes.safetensors")
    save_file(fp8_block(SEED), out / "fp8_block.safetensors")
    save_file(int4_group(SEED), out / "int4_group.safetensors")
    (out / "README.md").write_text(README.format(
        seed=SEED, python=platform.python_version(), torch=torch.__version__,
        ct=compressed_tensors.__version__, st=safetensors.__version__))


if __name__ == "__main__":
    main()
