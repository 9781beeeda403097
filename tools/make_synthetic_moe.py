#!/usr/bin/env python3
"""Write a random-weight DeepseekV3ForCausalLM checkpoint (bf16, per-expert layout) big enough that
the weights, not the process, dominate a rank's memory: for measuring peak memory per rank under
tensor and expert parallelism (tools/bench_moe_memory.sh). Needs only numpy.

    python3 tools/make_synthetic_moe.py OUT_DIR [--hidden 1024 --experts 32 --moe-intermediate 512 --layers 4]
"""
import argparse
import json
import struct
from pathlib import Path

import numpy as np


def bf16(a):
    """float32 array -> bf16 bytes (truncated: the values are random anyway)."""
    return (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--moe-intermediate", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=160)
    a = ap.parse_args()
    H, nh, I = a.hidden, a.heads, a.moe_intermediate
    q_lora, kv_lora, nope, rope, v = 384, 256, 64, 32, 64
    config = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": H,
        "intermediate_size": 4 * I, "moe_intermediate_size": I, "num_hidden_layers": a.layers,
        "num_attention_heads": nh, "num_key_value_heads": nh, "n_routed_experts": a.experts,
        "num_experts_per_tok": 8, "n_group": 4, "topk_group": 2, "n_shared_experts": 1,
        "first_k_dense_replace": 1, "q_lora_rank": q_lora, "kv_lora_rank": kv_lora, "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope, "v_head_dim": v, "vocab_size": a.vocab, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    }
    rng = np.random.default_rng(0)
    shapes = {"model.embed_tokens.weight": (a.vocab, H), "model.norm.weight": (H,)}
    for i in range(a.layers):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                   p + "self_attn.q_a_proj.weight": (q_lora, H), p + "self_attn.q_a_layernorm.weight": (q_lora,),
                   p + "self_attn.q_b_proj.weight": (nh * (nope + rope), q_lora),
                   p + "self_attn.kv_a_proj_with_mqa.weight": (kv_lora + rope, H),
                   p + "self_attn.kv_a_layernorm.weight": (kv_lora,),
                   p + "self_attn.kv_b_proj.weight": (nh * (nope + v), kv_lora),
                   p + "self_attn.o_proj.weight": (H, nh * v)}
        mlps = [(p + "mlp.", 4 * I)] if i == 0 else [(p + "mlp.shared_experts.", I)] + [
            (f"{p}mlp.experts.{e}.", I) for e in range(a.experts)]
        if i > 0:
            shapes |= {p + "mlp.gate.weight": (a.experts, H), p + "mlp.gate.e_score_correction_bias": (a.experts,)}
        for base, inter in mlps:
            shapes |= {base + "gate_proj.weight": (inter, H), base + "up_proj.weight": (inter, H),
                       base + "down_proj.weight": (H, inter)}
    header, offset = {}, 0
    for name, shape in shapes.items():
        dtype = "F32" if name.endswith("e_score_correction_bias") else "BF16"
        size = int(np.prod(shape)) * (4 if dtype == "F32" else 2)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    a.out.mkdir(parents=True, exist_ok=True)
    with open(a.out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, shape in shapes.items():
            if name.endswith("e_score_correction_bias"):
                f.write(rng.uniform(-0.1, 0.1, shape).astype(np.float32).tobytes())
            elif len(shape) == 1:
                f.write(bf16(1 + 0.1 * rng.standard_normal(shape, np.float32)))
            else:
                f.write(bf16(rng.standard_normal(shape, np.float32) * (1 / np.sqrt(shape[1]))))
    (a.out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    print(f"{a.out}: {offset / 2**20:.0f} MiB of bf16 weights, {a.experts} experts x {a.layers - 1} MoE layers")


if __name__ == "__main__":
    main()
