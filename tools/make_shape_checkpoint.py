#!/usr/bin/env python3
"""Write a full-size "shape-only" Hugging Face checkpoint: config.json, model.safetensors.index.json
and safetensors shards that hold every tensor of the real model under its real name, shape and
dtype, with the tensor data left as sparse holes (reads as zeros), so that a 595 GB checkpoint
takes a few MB of disk. For exercising loaders, planners and memory estimates at the real sizes
without the real weights. Standard library only.

    python3 tools/make_shape_checkpoint.py --arch kimi-k2.5 --out /scratch/k25-shapes
    python3 tools/make_shape_checkpoint.py --arch deepseek-v3 --layers 4 --out DIR --fill-scales 0.01
    python3 tools/make_shape_checkpoint.py --config some/config.json --out DIR --dry-run

Values that are always written: every compressed-tensors `X.weight_shape` (int64 [out, in]).
With --fill-scales V: every FP8 `X.weight_scale_inv` and INT4 `X.weight_scale` holds V (in the
tensor's dtype), every norm weight holds 1.0 and every `e_score_correction_bias` 0.0. Everything
else is a hole. Note that --fill-scales writes the scales for real: about 1.06 GB per Kimi-K2.5
MoE layer (64 GB for the full model), 2.7 MB per DeepSeek-V3 MoE layer.

Built-in layouts (--arch), config dicts of published models fed to the same generator as --config:
kimi-k2.5 (INT4 experts), deepseek-v3 (FP8, 1 MTP layer), llama-3.1-70b, mixtral-8x7b
(mistralai/Mixtral-8x7B-v0.1), glm-4.5 (zai-org/GLM-4.5, 1 MTP layer) and glm-4.5-air
(zai-org/GLM-4.5-Air, 1 MTP layer), gpt-oss-120b and gpt-oss-20b (openai/gpt-oss-*, MXFP4
experts), llama-4-scout and llama-4-maverick (meta-llama/Llama-4-*-Instruct's text model, bf16;
the vision tower left out), gemma-3-1b (google/gemma-3-1b-it, the text-only Gemma-3) and gemma-3-27b
(google/gemma-3-27b-it, the multimodal wrapper). With --layers N the MTP layers follow, numbered from N.
Architectures: Llama, Mistral, Mixtral (block_sparse_moe.experts.E.w1/w2/w3, as its checkpoint
names them), Qwen2, Qwen3 (dense), Qwen3-MoE, Gemma-3 (Gemma3ForCausalLM: four norms per layer; and
Gemma3ForConditionalGeneration: its text model under language_model.model., Gemma3TextConfig's defaults for
the keys its text_config leaves out, a SigLIP vision tower), Glm4Moe (GLM-4.5/4.6/4.7; float32 correction bias, MTP
layers of num_nextn_predict_layers), GptOss (sinks, router bias, stacked MXFP4 experts with biases),
Llama4 (Llama4ForCausalLM, and Llama4ForConditionalGeneration's text model under language_model.model.;
stacked bf16 experts stored x @ W), DeepseekV3 (incl. Kimi-K2 and the MTP layers of
num_nextn_predict_layers) and KimiK25ForConditionalGeneration (text model under
language_model.model., plus a MoonViT vision tower and projector that layertap never reads).
Formats: plain (torch_dtype), DeepSeek FP8 blocks (quant_method fp8), GPT-OSS's MXFP4 (quant_method
mxfp4: the stacked experts only) and compressed-tensors pack-quantized INT4 (targets / ignore matched as layertap does: `re:` entries with re.match,
others by exact name, target `Linear` matches every Linear).
"""
import argparse
import copy
import json
import math
import os
import re
import struct
import sys

# ---------------------------------------------------------------- built-in configs

_KIMI_QUANT = {
    "config_groups": {
        "group_0": {
            "input_activations": None,
            "output_activations": None,
            "targets": ["Linear"],
            "weights": {
                "actorder": None, "block_structure": None, "dynamic": False, "group_size": 32, "num_bits": 4,
                "observer": "minmax", "observer_kwargs": {}, "strategy": "group", "symmetric": True, "type": "int",
            },
        }
    },
    "format": "pack-quantized",
    "ignore": [
        "re:.*self_attn.*",
        "re:.*shared_experts.*",
        "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
        "re:.*lm_head.*",
        "re:.*vision_tower.*",
        "re:.*mm_projector.*",
    ],
    "kv_cache_scheme": None,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}

KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "ignore_index": -100,
    "media_placeholder_token_id": 163605,
    "model_type": "kimi_k25",
    "pad_token_id": None,
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001,
        "bos_token_id": 163584,
        "eos_token_id": 163585,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": 7168,
        "initializer_range": 0.02,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "max_position_embeddings": 262144,
        "model_type": "kimi_k2",
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 384,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 64,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 61,
        "num_key_value_heads": 64,
        "num_nextn_predict_layers": 0,
        "pad_token_id": None,
        "pretraining_tp": 1,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": _KIMI_QUANT,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096, "type": "yarn",
        },
        "rope_theta": 50000.0,
        "routed_scaling_factor": 2.827,
        "scoring_func": "sigmoid",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.48.0",
        "use_cache": True,
        "v_head_dim": 128,
        "vocab_size": 163840,
    },
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.57.1",
    "use_unified_vision_chunk": True,
    "video_placeholder": "<|kimi_k25_video_placeholder|>",
    "vision_config": {
        "init_pos_emb_height": 64,
        "init_pos_emb_time": 4,
        "init_pos_emb_width": 64,
        "merge_kernel_size": [2, 2],
        "mm_hidden_size": 1152,
        "mm_projector_type": "patchmerger",
        "patch_size": 14,
        "pos_emb_type": "divided_fixed",
        "projector_hidden_act": "gelu",
        "projector_ln_eps": 1e-05,
        "text_hidden_size": 7168,
        "video_attn_type": "spatial_temporal",
        "vt_hidden_size": 1152,
        "vt_intermediate_size": 4304,
        "vt_num_attention_heads": 16,
        "vt_num_hidden_layers": 27,
    },
}

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "pretraining_tp": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096, "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}

LLAMA_31_70B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 8192,
    "initializer_range": 0.02,
    "intermediate_size": 28672,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

# config.json of mistralai/Mixtral-8x7B-v0.1. The checkpoint keeps Mixtral's own names:
# block_sparse_moe.gate (the router, bf16) and block_sparse_moe.experts.E.w1 (gate [I, H]),
# w2 (down [H, I]), w3 (up [I, H]); transformers 5.x renames them to mlp.gate and merges the
# experts into mlp.experts.gate_up_proj / down_proj when it loads.
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "output_router_logits": False,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0.dev0",
    "use_cache": True,
    "vocab_size": 32000,
}

# config.json of zai-org/GLM-4.5 (written from memory of the Hub file, cross-checked against
# transformers' Glm4MoeConfig and NVIDIA Megatron-Bridge's GLM-4.5 notes: 92 layers, the first 3
# dense, QK norm on). use_qk_norm is true for GLM-4.5 (and GLM-4.6/4.7, which share this shape but
# have max_position_embeddings 202752), false for GLM-4.5-Air.
GLM_45 = {
    "architectures": ["Glm4MoeForCausalLM"],
    "attention_bias": True,
    "attention_dropout": 0.0,
    "pad_token_id": 151329,
    "eos_token_id": [151329, 151336, 151338],
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "partial_rotary_factor": 0.5,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "max_position_embeddings": 131072,
    "model_type": "glm4_moe",
    "moe_intermediate_size": 1536,
    "norm_topk_prob": True,
    "num_attention_heads": 96,
    "n_group": 1,
    "topk_group": 1,
    "n_routed_experts": 160,
    "n_shared_experts": 1,
    "routed_scaling_factor": 2.5,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "num_hidden_layers": 92,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.54.0",
    "use_cache": True,
    "use_qk_norm": True,
    "vocab_size": 151552,
}

# config.json of zai-org/GLM-4.5-Air: GLM-4.5's keys at 4096 wide, 46 layers (the first dense),
# 128 experts of 1408, no QK norm, routed_scaling_factor 1.0 (Megatron-Bridge's notes give "1.0x";
# transformers' Glm4MoeConfig defaults are this model's values).
GLM_45_AIR = dict(
    GLM_45,
    hidden_size=4096,
    intermediate_size=10944,
    moe_intermediate_size=1408,
    n_routed_experts=128,
    routed_scaling_factor=1.0,
    first_k_dense_replace=1,
    num_hidden_layers=46,
    use_qk_norm=False,
)

# config.json of openai/gpt-oss-120b (as published, rope and quantization keys verbatim; written
# from memory of the Hub file, cross-checked against transformers' GptOssConfig): 36 layers
# alternating sliding (128) and full attention, 128 experts of 2880 in MXFP4, top 4.
# openai/gpt-oss-20b is the same at 24 layers and 32 experts.
GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "attention_dropout": 0.0,
    "eos_token_id": 200002,
    "experts_per_token": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2880,
    "initial_context_length": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(36)],
    "max_position_embeddings": 131072,
    "model_type": "gpt_oss",
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "num_local_experts": 128,
    "output_router_logits": False,
    "pad_token_id": 199999,
    "quantization_config": {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"],
        "quant_method": "mxfp4",
    },
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000,
    "router_aux_loss_coef": 0.9,
    "sliding_window": 128,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "transformers_version": "4.55.0.dev0",
    "use_cache": True,
    "vocab_size": 201088,
}
GPT_OSS_20B = dict(GPT_OSS_120B, num_hidden_layers=24, num_local_experts=32,
                   layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(24)])

# config.json of meta-llama/Llama-4-Scout-17B-16E-Instruct, the text model's keys (written from
# memory of the Hub file, cross-checked against transformers' Llama4TextConfig): 48 layers, all
# MoE (16 experts of 8192, top 1, a shared expert), every 4th layer NoPE, chunks of 8192 on the
# RoPE layers, llama3 RoPE with equal low/high factors. The vision tower is left out (never read).
_LLAMA4_SCOUT_TEXT = {
    "attention_bias": False,
    "attention_chunk_size": 8192,
    "attn_scale": 0.1,
    "attn_temperature_tuning": 4,
    "floor_scale": 8192,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "interleave_moe_layer_step": 1,
    "intermediate_size": 8192,
    "intermediate_size_mlp": 16384,
    "max_position_embeddings": 10485760,
    "model_type": "llama4_text",
    "no_rope_layers": [0 if (i + 1) % 4 == 0 else 1 for i in range(48)],
    "num_attention_heads": 40,
    "num_experts_per_tok": 1,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "num_local_experts": 16,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "use_qk_norm": True,
    "vocab_size": 202048,
}
LLAMA4_SCOUT = {
    "architectures": ["Llama4ForConditionalGeneration"],
    "boi_token_index": 200080,
    "eoi_token_index": 200081,
    "image_token_index": 200092,
    "model_type": "llama4",
    "text_config": _LLAMA4_SCOUT_TEXT,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0.dev0",
}
# meta-llama/Llama-4-Maverick-17B-128E-Instruct: the same width, 128 experts on every other layer
# (dense layers of intermediate_size_mlp between), no q/k norm, no RoPE scaling.
LLAMA4_MAVERICK = dict(LLAMA4_SCOUT, text_config=dict(
    _LLAMA4_SCOUT_TEXT, num_local_experts=128, interleave_moe_layer_step=2, use_qk_norm=False, rope_scaling=None))

# config.json of google/gemma-3-1b-it, the text-only Gemma-3 (written from memory of the Hub file,
# cross-checked against transformers' Gemma3TextConfig): 26 layers, 5 sliding (512) to 1 global,
# one kv head, head_dim 256, tied embeddings.
GEMMA3_1B = {
    "architectures": ["Gemma3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": None,
    "bos_token_id": 2,
    "eos_token_id": [1, 106],
    "final_logit_softcapping": None,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "initializer_range": 0.02,
    "intermediate_size": 6912,
    "max_position_embeddings": 32768,
    "model_type": "gemma3_text",
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "tie_word_embeddings": True,  # Gemma3TextConfig's default: no lm_head in the checkpoint
    "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0",
    "use_cache": True,
    "vocab_size": 262144,
}

# config.json of google/gemma-3-27b-it as published: the multimodal wrapper, whose text_config names
# only what differs from transformers' Gemma3TextConfig (GEMMA3_TEXT_DEFAULTS fills the rest), and a
# SigLIP vision tower that layertap never reads.
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "boi_token_index": 255999,
    "eoi_token_index": 256000,
    "eos_token_id": [1, 106],
    "image_token_index": 262144,
    "initializer_range": 0.02,
    "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "model_type": "gemma3_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0",
    "vision_config": {
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "model_type": "siglip_vision_model",
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "vision_use_head": False,
    },
}
# transformers' Gemma3TextConfig defaults of the keys that decide tensor shapes.
GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        "tie_word_embeddings": True}

ARCHS = {
    "kimi-k2.5": KIMI_K25,
    "deepseek-v3": DEEPSEEK_V3,
    "llama-3.1-70b": LLAMA_31_70B,
    "mixtral-8x7b": MIXTRAL_8X7B,
    "glm-4.5": GLM_45,
    "glm-4.5-air": GLM_45_AIR,
    "gpt-oss-120b": GPT_OSS_120B,
    "gpt-oss-20b": GPT_OSS_20B,
    "llama-4-scout": LLAMA4_SCOUT,
    "llama-4-maverick": LLAMA4_MAVERICK,
    "gemma-3-1b": GEMMA3_1B,
    "gemma-3-27b": GEMMA3_27B,
}

# ---------------------------------------------------------------- dtypes

DTYPE_SIZE = {"U8": 1, "F8_E4M3": 1, "F16": 2, "BF16": 2, "I32": 4, "F32": 4, "I64": 8}
# safetensors lays tensors out by dtype (its enum order, descending), then by name.
DTYPE_RANK = {"U8": 4, "F8_E4M3": 7, "I16": 9, "F16": 11, "BF16": 12, "I32": 13, "F32": 15, "F64": 16, "I64": 17}
TORCH_DTYPE = {None: "BF16", "bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def encode(value, dtype):
    """One element of `dtype` holding the float `value`, as little-endian bytes."""
    if dtype == "F32":
        return struct.pack("<f", value)
    if dtype == "F16":
        return struct.pack("<e", value)
    if dtype == "BF16":
        (bits,) = struct.unpack("<I", struct.pack("<f", value))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return struct.pack("<H", bits & 0xFFFF)
    if dtype == "U8":  # an MXFP4 e8m0 scale: the power of two nearest `value`
        return bytes([min(254, max(0, 127 + round(math.log2(value))))])
    raise SystemExit(f"cannot fill a {dtype} tensor with a float")


def cdiv(a, b):
    return -(-a // b)


# ---------------------------------------------------------------- tensor list


class Tensor:
    __slots__ = ("name", "dtype", "shape", "role", "value")

    def __init__(self, name, dtype, shape, role=None, value=None):
        self.name, self.dtype, self.shape, self.role, self.value = name, dtype, list(shape), role, value

    @property
    def nbytes(self):
        n = DTYPE_SIZE[self.dtype]
        for d in self.shape:
            n *= d
        return n


class Quant:
    """Which Linears are quantized, and how (from quantization_config)."""

    def __init__(self, qc):
        self.kind = "none"
        if not qc:
            return
        method = qc.get("quant_method")
        if method == "fp8":
            if qc.get("fmt", "e4m3") != "e4m3" or not qc.get("weight_block_size"):
                raise SystemExit("fp8 quantization_config: only fmt e4m3 with weight_block_size is supported")
            self.kind = "fp8"
            self.block = [int(x) for x in qc["weight_block_size"]]
        elif method == "compressed-tensors":
            if qc.get("format") != "pack-quantized":
                raise SystemExit(f"compressed-tensors format {qc.get('format')!r} is not supported (pack-quantized only)")
            self.kind = "int4"
            self.groups = []
            for g in qc.get("config_groups", {}).values():
                w = g.get("weights") or {}
                if w.get("num_bits") != 4 or w.get("type") != "int" or w.get("strategy") != "group":
                    raise SystemExit("compressed-tensors: only 4-bit int group weights are supported")
                self.groups.append((list(g.get("targets", [])), int(w["group_size"])))
            self.ignore = list(qc.get("ignore", []))
        elif method == "mxfp4":  # GPT-OSS: only its stacked experts, which gpt_oss_text writes
            self.kind = "mxfp4"
        else:
            raise SystemExit(f"quant_method {method!r} is not supported (fp8, compressed-tensors, mxfp4)")

    @staticmethod
    def _matches(name, pattern):
        if pattern == "Linear":
            return True
        if pattern.startswith("re:"):
            return re.match(pattern[3:], name) is not None
        return pattern == name

    def int4_group(self, module):
        if any(self._matches(module, p) for p in self.ignore):
            return None
        for targets, group in self.groups:
            if any(self._matches(module, t) for t in targets):
                return group
        return None


class Builder:
    def __init__(self, plain, quant):
        self.plain, self.quant, self.tensors = plain, quant, []

    def add(self, name, dtype, shape, role=None, value=None):
        self.tensors.append(Tensor(name, dtype, shape, role, value))

    def norm(self, prefix, dim, bias=False):
        self.add(prefix + ".weight", self.plain, [dim], "norm")
        if bias:
            self.add(prefix + ".bias", self.plain, [dim])

    def plain_tensor(self, name, shape):
        self.add(name, self.plain, shape)

    def linear(self, module, out, inp, bias=False, quantizable=True):
        """A Linear [out, in] in the checkpoint's format (quantizable: a decoder Linear)."""
        q = self.quant
        group = q.int4_group(module) if (quantizable and q.kind == "int4") else None
        if quantizable and q.kind == "fp8":
            bo, bi = q.block
            self.add(module + ".weight", "F8_E4M3", [out, inp])
            self.add(module + ".weight_scale_inv", "F32", [cdiv(out, bo), cdiv(inp, bi)], "scale")
        elif group is not None:
            self.add(module + ".weight_packed", "I32", [out, cdiv(inp, 8)])
            self.add(module + ".weight_scale", "BF16", [out, cdiv(inp, group)], "scale")
            self.add(module + ".weight_shape", "I64", [2], "shape", [out, inp])
        else:
            self.add(module + ".weight", self.plain, [out, inp])
        if bias:
            self.add(module + ".bias", self.plain, [out])

    def mlp(self, prefix, hidden, inter, bias=False):
        self.linear(prefix + ".gate_proj", inter, hidden, bias)
        self.linear(prefix + ".up_proj", inter, hidden, bias)
        self.linear(prefix + ".down_proj", hidden, inter, bias)


def _req(c, key):
    if c.get(key) is None:
        raise SystemExit(f"config: required key {key!r} is missing")
    return int(c[key])


def gqa_layer(b, c, p, arch):
    hidden = _req(c, "hidden_size")
    heads = _req(c, "num_attention_heads")
    kv = int(c.get("num_key_value_heads") or heads)
    hd = int(c.get("head_dim") or hidden // heads)
    attn_bias = bool(c.get("attention_bias", arch == "Qwen2ForCausalLM"))
    qkv_bias = attn_bias or arch == "Qwen2ForCausalLM"
    o_bias = attn_bias and arch not in ("Qwen2ForCausalLM", "Glm4MoeForCausalLM")  # GLM: q/k/v biases only
    b.norm(p + "input_layernorm", hidden)
    b.linear(p + "self_attn.q_proj", heads * hd, hidden, qkv_bias)
    b.linear(p + "self_attn.k_proj", kv * hd, hidden, qkv_bias)
    b.linear(p + "self_attn.v_proj", kv * hd, hidden, qkv_bias)
    b.linear(p + "self_attn.o_proj", hidden, heads * hd, o_bias)
    if arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM") + GEMMA3 or (
            arch == "Glm4MoeForCausalLM" and c.get("use_qk_norm")):
        b.norm(p + "self_attn.q_norm", hd)
        b.norm(p + "self_attn.k_norm", hd)
    b.norm(p + "post_attention_layernorm", hidden)
    if arch in GEMMA3:  # sandwich norms: around the MLP too
        b.norm(p + "pre_feedforward_layernorm", hidden)
        b.norm(p + "post_feedforward_layernorm", hidden)


def mla_layer(b, c, p, moe):
    hidden = _req(c, "hidden_size")
    heads = _req(c, "num_attention_heads")
    q_lora = c.get("q_lora_rank", 1536)
    kv_lora = int(c.get("kv_lora_rank") or 512)
    nope = int(c.get("qk_nope_head_dim") or 128)
    rope = int(c.get("qk_rope_head_dim") or 64)
    v = int(c.get("v_head_dim") or 128)
    bias = bool(c.get("attention_bias", False))
    a = p + "self_attn."
    b.norm(p + "input_layernorm", hidden)
    if q_lora is None:
        b.linear(a + "q_proj", heads * (nope + rope), hidden)
    else:
        b.linear(a + "q_a_proj", int(q_lora), hidden, bias)
        b.norm(a + "q_a_layernorm", int(q_lora))
        b.linear(a + "q_b_proj", heads * (nope + rope), int(q_lora))
    b.linear(a + "kv_a_proj_with_mqa", kv_lora + rope, hidden, bias)
    b.norm(a + "kv_a_layernorm", kv_lora)
    b.linear(a + "kv_b_proj", heads * (nope + v), kv_lora)
    b.linear(a + "o_proj", hidden, heads * v, bias)
    b.norm(p + "post_attention_layernorm", hidden)
    if not moe:
        b.mlp(p + "mlp", hidden, _req(c, "intermediate_size"))
        return
    deepseek_moe(b, c, p, hidden, int(c.get("n_routed_experts") or 256), int(c.get("moe_intermediate_size") or 2048))


def deepseek_moe(b, c, p, hidden, experts, inter):
    """A DeepSeek-style MoE block (DeepSeek-V3, GLM-4.5) under p + "mlp.": the router in the
    checkpoint's dtype (as DeepSeek-V3 stores its gate; GLM-4.5's is not checked against the Hub's
    index: a float32 gate would make it 147 MB larger), the float32 e_score_correction_bias, the
    routed experts and the shared experts as one MLP. transformers keeps the router in fp32."""
    b.plain_tensor(p + "mlp.gate.weight", [experts, hidden])
    b.add(p + "mlp.gate.e_score_correction_bias", "F32", [experts], "bias0")
    for e in range(experts):
        b.mlp(f"{p}mlp.experts.{e}", hidden, inter)
    shared = int(c.get("n_shared_experts", 1) or 0)
    if shared:
        b.mlp(p + "mlp.shared_experts", hidden, shared * inter)


def mtp_layers(b, c, prefix, layer):
    """The multi-token-prediction layers of num_nextn_predict_layers, numbered on from
    num_hidden_layers: embed_tokens, enorm, hnorm, eh_proj, a full decoder layer (`layer(p, i)`),
    shared_head.norm and shared_head.head. Never read by layertap."""
    hidden, vocab, layers = _req(c, "hidden_size"), _req(c, "vocab_size"), _req(c, "num_hidden_layers")
    for i in range(layers, layers + int(c.get("num_nextn_predict_layers") or 0)):
        p = f"{prefix}layers.{i}."
        b.plain_tensor(p + "embed_tokens.weight", [vocab, hidden])
        b.norm(p + "enorm", hidden)
        b.norm(p + "hnorm", hidden)
        b.linear(p + "eh_proj", hidden, 2 * hidden, quantizable=False)
        layer(p, i)
        b.norm(p + "shared_head.norm", hidden)
        b.plain_tensor(p + "shared_head.head.weight", [vocab, hidden])


def deepseek_text(b, c, prefix, lm_head):
    """DeepseekV3ForCausalLM under `prefix` (e.g. 'model.'), lm_head tensor name, MTP layers last."""
    hidden, vocab, layers = _req(c, "hidden_size"), _req(c, "vocab_size"), _req(c, "num_hidden_layers")
    k_dense = int(c.get("first_k_dense_replace", 3))
    freq = int(c.get("moe_layer_freq", 1) or 1)

    def is_moe(i):
        return i >= k_dense and i % freq == 0

    b.plain_tensor(prefix + "embed_tokens.weight", [vocab, hidden])
    for i in range(layers):
        mla_layer(b, c, f"{prefix}layers.{i}.", is_moe(i))
    b.norm(prefix + "norm", hidden)
    if not c.get("tie_word_embeddings", False):
        b.plain_tensor(lm_head, [vocab, hidden])
    mtp_layers(b, c, prefix, lambda p, i: mla_layer(b, c, p, is_moe(i)))


def gqa_text(b, c, arch, prefix="model.", lm_head="lm_head.weight"):
    hidden, vocab, layers = _req(c, "hidden_size"), _req(c, "vocab_size"), _req(c, "num_hidden_layers")
    inter = _req(c, "intermediate_size")
    mlp_bias = bool(c.get("mlp_bias", False)) and arch == "LlamaForCausalLM"
    b.plain_tensor(prefix + "embed_tokens.weight", [vocab, hidden])
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        gqa_layer(b, c, p, arch)
        moe = False
        if arch == "Qwen3MoeForCausalLM":
            experts = int(c.get("num_experts") or c.get("num_local_experts") or 0)
            step = int(c.get("decoder_sparse_step", 1) or 1)
            moe = i not in (c.get("mlp_only_layers") or []) and experts > 0 and (i + 1) % step == 0
        if arch == "MixtralForCausalLM":
            experts = _req(c, "num_local_experts")
            b.plain_tensor(p + "block_sparse_moe.gate.weight", [experts, hidden])
            for e in range(experts):
                x = f"{p}block_sparse_moe.experts.{e}."
                b.linear(x + "w1", inter, hidden)  # gate
                b.linear(x + "w2", hidden, inter)  # down
                b.linear(x + "w3", inter, hidden)  # up
        elif moe:
            m_inter = _req(c, "moe_intermediate_size")
            b.plain_tensor(p + "mlp.gate.weight", [experts, hidden])
            for e in range(experts):
                b.mlp(f"{p}mlp.experts.{e}", hidden, m_inter)
        else:
            b.mlp(p + "mlp", hidden, inter, mlp_bias)
    b.norm(prefix + "norm", hidden)
    if not c.get("tie_word_embeddings", False):
        b.plain_tensor(lm_head, [vocab, hidden])


def siglip(b, v, text_hidden):
    """Gemma-3's SigLIP vision tower and projector (never read by layertap; here for the totals)."""
    hidden, inter, layers = _req(v, "hidden_size"), _req(v, "intermediate_size"), _req(v, "num_hidden_layers")
    patch, image = _req(v, "patch_size"), _req(v, "image_size")
    p = "vision_tower.vision_model."
    b.add(p + "embeddings.patch_embedding.weight", b.plain, [hidden, 3, patch, patch])
    b.add(p + "embeddings.patch_embedding.bias", b.plain, [hidden])
    b.add(p + "embeddings.position_embedding.weight", b.plain, [(image // patch) ** 2, hidden])
    for i in range(layers):
        x = f"{p}encoder.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            b.linear(x + "self_attn." + proj, hidden, hidden, bias=True, quantizable=False)
        b.norm(x + "layer_norm1", hidden, bias=True)
        b.norm(x + "layer_norm2", hidden, bias=True)
        b.linear(x + "mlp.fc1", inter, hidden, bias=True, quantizable=False)
        b.linear(x + "mlp.fc2", hidden, inter, bias=True, quantizable=False)
    b.norm(p + "post_layernorm", hidden, bias=True)
    b.add("multi_modal_projector.mm_input_projection_weight", b.plain, [hidden, text_hidden])
    b.norm("multi_modal_projector.mm_soft_emb_norm", hidden)


def gpt_oss_text(b, c):
    """GptOssForCausalLM as OpenAI publishes it: q/k/v/o biases, sinks [heads], a router with a bias,
    and the routed experts stacked over experts: MXFP4 gate_up_proj (gate and up rows interleaved)
    and down_proj as `_blocks` uint8 [E, out, in/32, 16] + `_scales` uint8 [E, out, in/32], their
    biases bf16 [E, out]. (A dequantized checkpoint stores gate_up_proj [E, H, 2I] instead; layertap
    refuses it.)"""
    hidden, vocab, layers = _req(c, "hidden_size"), _req(c, "vocab_size"), _req(c, "num_hidden_layers")
    inter, experts, heads = _req(c, "intermediate_size"), _req(c, "num_local_experts"), _req(c, "num_attention_heads")
    mxfp4 = (c.get("quantization_config") or {}).get("quant_method") == "mxfp4"
    if not mxfp4:
        raise SystemExit("GptOssForCausalLM: only the published MXFP4 experts (quant_method mxfp4) are generated")
    if hidden % 32 or inter % 32:
        raise SystemExit("GptOssForCausalLM: MXFP4 needs hidden_size and intermediate_size divisible by 32")
    b.plain_tensor("model.embed_tokens.weight", [vocab, hidden])
    for i in range(layers):
        p = f"model.layers.{i}."
        gqa_layer(b, c, p, "GptOssForCausalLM")
        b.plain_tensor(p + "self_attn.sinks", [heads])
        b.plain_tensor(p + "mlp.router.weight", [experts, hidden])
        b.plain_tensor(p + "mlp.router.bias", [experts])
        for proj, out, inp in (("gate_up_proj", 2 * inter, hidden), ("down_proj", hidden, inter)):
            x = p + "mlp.experts." + proj
            b.add(x + "_blocks", "U8", [experts, out, inp // 32, 16])
            b.add(x + "_scales", "U8", [experts, out, inp // 32], "scale")
            b.plain_tensor(x + "_bias", [experts, out])
    b.norm("model.norm", hidden)
    if not c.get("tie_word_embeddings", False):
        b.plain_tensor("lm_head.weight", [vocab, hidden])


def llama4_text(b, c, prefix, lm_head):
    """Llama-4's text model as Meta publishes it: GQA (no q/k norm weights: the norm has none), a MoE
    feed_forward (router without bias; experts stacked x @ W: gate_up_proj [E, H, 2I], down_proj
    [E, I, H]; shared_expert) on the layers of moe_layers / interleave_moe_layer_step, dense
    feed_forward of intermediate_size_mlp on the others."""
    hidden, vocab, layers = _req(c, "hidden_size"), _req(c, "vocab_size"), _req(c, "num_hidden_layers")
    inter, experts = _req(c, "intermediate_size"), _req(c, "num_local_experts")
    inter_mlp = int(c.get("intermediate_size_mlp") or 16384)
    step = int(c.get("interleave_moe_layer_step") or 1)
    moe = set(c["moe_layers"]) if c.get("moe_layers") is not None else set(range(step - 1, layers, step))
    b.plain_tensor(prefix + "embed_tokens.weight", [vocab, hidden])
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        gqa_layer(b, c, p, "Llama4ForCausalLM")
        if i in moe:
            b.plain_tensor(p + "feed_forward.router.weight", [experts, hidden])
            b.plain_tensor(p + "feed_forward.experts.gate_up_proj", [experts, hidden, 2 * inter])
            b.plain_tensor(p + "feed_forward.experts.down_proj", [experts, inter, hidden])
            b.mlp(p + "feed_forward.shared_expert", hidden, inter)
        else:
            b.mlp(p + "feed_forward", hidden, inter_mlp)
    b.norm(prefix + "norm", hidden)
    if not c.get("tie_word_embeddings", False):
        b.plain_tensor(lm_head, [vocab, hidden])


def glm4_moe_layer(b, c, p, moe):
    """One Glm4Moe decoder layer: GQA with q/k/v biases (attention_bias) and, with use_qk_norm,
    per-head q_norm/k_norm; a dense MLP or a DeepSeek-style MoE whose correction bias is float32."""
    hidden = _req(c, "hidden_size")
    gqa_layer(b, c, p, "Glm4MoeForCausalLM")
    if not moe:
        b.mlp(p + "mlp", hidden, _req(c, "intermediate_size"))
        return
    deepseek_moe(b, c, p, hidden, _req(c, "n_routed_experts"), _req(c, "moe_intermediate_size"))


def glm4_moe_text(b, c):
    """Glm4MoeForCausalLM and its MTP layers (mtp_layers: GLM-4.5's model.layers.92). GLM-4.5 and
    -Air store the MTP embed_tokens and shared_head.head; GLM-4.6 leaves both out, sharing the main
    model's. transformers does not build the MTP layers and ignores their tensors on load."""
    hidden, vocab, layers = _req(c, "hidden_size"), _req(c, "vocab_size"), _req(c, "num_hidden_layers")
    k_dense = int(c.get("first_k_dense_replace", 1))
    b.plain_tensor("model.embed_tokens.weight", [vocab, hidden])
    for i in range(layers):
        glm4_moe_layer(b, c, f"model.layers.{i}.", i >= k_dense)
    b.norm("model.norm", hidden)
    if not c.get("tie_word_embeddings", False):
        b.plain_tensor("lm_head.weight", [vocab, hidden])
    mtp_layers(b, c, "model.", lambda p, i: glm4_moe_layer(b, c, p, i >= k_dense))


def moonvit(b, v, text_hidden):
    """A MoonViT-like vision tower and patch-merger projector (never read by layertap)."""
    d, inter = int(v.get("vt_hidden_size", 1152)), int(v.get("vt_intermediate_size", 4304))
    patch, blocks = int(v.get("patch_size", 14)), int(v.get("vt_num_hidden_layers", 27))
    t = "vision_tower."
    b.plain_tensor(t + "patch_embed.proj.weight", [d, 3, patch, patch])
    b.plain_tensor(t + "patch_embed.proj.bias", [d])
    b.plain_tensor(t + "patch_embed.pos_emb.weight",
                   [int(v.get("init_pos_emb_height", 64)), int(v.get("init_pos_emb_width", 64)), d])
    for i in range(blocks):
        p = f"{t}encoder.blocks.{i}."
        b.norm(p + "norm0", d, bias=True)
        b.linear(p + "wqkv", 3 * d, d, bias=True, quantizable=False)
        b.linear(p + "wo", d, d, bias=True, quantizable=False)
        b.norm(p + "norm1", d, bias=True)
        b.linear(p + "mlp.fc0", inter, d, bias=True, quantizable=False)
        b.linear(p + "mlp.fc1", d, inter, bias=True, quantizable=False)
    b.norm(t + "encoder.final_layernorm", d, bias=True)
    mm = int(v.get("mm_hidden_size", d))
    kh, kw = (v.get("merge_kernel_size") or [2, 2])[:2]
    merged = mm * int(kh) * int(kw)
    b.norm("mm_projector.pre_norm", mm, bias=True)
    b.linear("mm_projector.proj.0", merged, merged, bias=True, quantizable=False)
    b.linear("mm_projector.proj.2", int(v.get("text_hidden_size", text_hidden)), merged, bias=True, quantizable=False)


GEMMA3 = ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")
GQA_ARCHS = ("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
             "Qwen3MoeForCausalLM", "Gemma3ForCausalLM")
SUPPORTED = GQA_ARCHS + ("Glm4MoeForCausalLM", "GptOssForCausalLM", "Llama4ForCausalLM",
                         "Llama4ForConditionalGeneration", "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration",
                         "Gemma3ForConditionalGeneration")
# text model under text_config
WRAPPERS = ("KimiK25ForConditionalGeneration", "Llama4ForConditionalGeneration", "Gemma3ForConditionalGeneration")


def text_config(config):
    arch = (config.get("architectures") or [None])[0]
    if arch in WRAPPERS:
        if not isinstance(config.get("text_config"), dict):
            raise SystemExit(f"{arch} config without text_config")
        return config["text_config"]
    return config


def tensor_list(config):
    """Every tensor of the checkpoint `config` describes, in module order."""
    arch = (config.get("architectures") or [None])[0]
    if arch not in SUPPORTED:
        raise SystemExit(f"architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED)})")
    c = text_config(config)
    if arch in GEMMA3:
        c = {**GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in c.items() if v is not None}}
    qc = config.get("quantization_config") or c.get("quantization_config")
    plain = TORCH_DTYPE.get(c.get("torch_dtype") or c.get("dtype") or config.get("torch_dtype"))
    if plain is None:
        raise SystemExit(f"torch_dtype {c.get('torch_dtype') or c.get('dtype')!r} is not supported")
    b = Builder(plain, Quant(qc))
    if arch in GQA_ARCHS:
        gqa_text(b, c, arch)
    elif arch == "Glm4MoeForCausalLM":
        glm4_moe_text(b, c)
    elif arch == "GptOssForCausalLM":
        gpt_oss_text(b, c)
    elif arch == "Llama4ForCausalLM":
        llama4_text(b, c, "model.", "lm_head.weight")
    elif arch == "Llama4ForConditionalGeneration":
        llama4_text(b, c, "language_model.model.", "language_model.lm_head.weight")
    elif arch == "Gemma3ForConditionalGeneration":
        gqa_text(b, c, arch, "language_model.model.", "language_model.lm_head.weight")
        if isinstance(config.get("vision_config"), dict):
            siglip(b, config["vision_config"], _req(c, "hidden_size"))
    elif arch == "DeepseekV3ForCausalLM":
        deepseek_text(b, c, "model.", "lm_head.weight")
    else:
        deepseek_text(b, c, "language_model.model.", "language_model.lm_head.weight")
        if isinstance(config.get("vision_config"), dict):
            moonvit(b, config["vision_config"], _req(c, "hidden_size"))
    names = set()
    for t in b.tensors:
        if t.name in names:
            raise AssertionError(f"tensor {t.name} generated twice")
        names.add(t.name)
    return b.tensors


def apply_overrides(config, layers=None, vocab=None):
    """--layers / --vocab on a copy of config (the text config for Kimi-K2.5)."""
    config = copy.deepcopy(config)
    c = text_config(config)
    if vocab is not None:
        c["vocab_size"] = vocab
    if layers is not None:
        if layers < 1:
            raise SystemExit("--layers must be at least 1")
        c["num_hidden_layers"] = layers
        arch = (config.get("architectures") or [None])[0]
        # keep a MoE layer among the first `layers` (the MTP layers, numbered on from there, follow)
        if arch in ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"):
            c["first_k_dense_replace"] = min(int(c.get("first_k_dense_replace", 3)), max(layers - 1, 0))
        if arch == "Glm4MoeForCausalLM":
            c["first_k_dense_replace"] = min(int(c.get("first_k_dense_replace", 1)), max(layers - 1, 0))
        if c.get("mlp_only_layers"):
            c["mlp_only_layers"] = [i for i in c["mlp_only_layers"] if i < layers]
        for key in ("layer_types", "no_rope_layers"):  # Gemma-3, GPT-OSS, Llama-4: the pattern continued
            if isinstance(c.get(key), list):
                values = c[key]
                c[key] = [values[i % len(values)] for i in range(layers)]
    return config


# ---------------------------------------------------------------- shards and files


def assign_shards(tensors, n):
    """Tensors in order into n shards balanced by bytes (a tensor goes where its midpoint falls);
    empty shards (tensors larger than a shard's share) are dropped. Returns lists of tensors."""
    n = max(1, min(n, len(tensors)))
    total = sum(t.nbytes for t in tensors) or 1
    shards = [[] for _ in range(n)]
    pos = 0
    for t in tensors:
        k = min(n - 1, int((pos + t.nbytes / 2) * n // total))
        shards[k].append(t)
        pos += t.nbytes
    return [s for s in shards if s]


def shard_layout(tensors):
    """(header bytes incl. padding, [(tensor, begin)] in data order, data size) of one shard."""
    order = sorted(tensors, key=lambda t: (-DTYPE_RANK[t.dtype], t.name))
    header = {"__metadata__": {"format": "pt"}}
    placed, pos = [], 0
    for t in order:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [pos, pos + t.nbytes]}
        placed.append((t, pos))
        pos += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return text, placed, pos


def fill_bytes(t, fill):
    """The bytes to write for tensor t (None: leave it a hole)."""
    if t.role == "shape":
        return struct.pack("<%dq" % len(t.value), *t.value)
    if fill is None:
        return None
    if t.role == "scale":
        return encode(fill, t.dtype)
    if t.role == "norm":
        return encode(1.0, t.dtype)
    if t.role == "bias0":
        return encode(0.0, t.dtype)
    return None


CHUNK = 8 << 20


def write_shard(path, tensors, fill):
    header, placed, data_size = shard_layout(tensors)
    base = 8 + len(header)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for t, begin in placed:
            pattern = fill_bytes(t, fill)
            if pattern is None:
                continue
            f.seek(base + begin)
            if len(pattern) == t.nbytes:
                f.write(pattern)
                continue
            reps = t.nbytes // len(pattern)  # pattern is one element
            chunk = pattern * min(reps, CHUNK // len(pattern))
            left = t.nbytes
            while left:
                piece = chunk if left >= len(chunk) else chunk[:left]
                f.write(piece)
                left -= len(piece)
        f.truncate(base + data_size)
    return base + data_size


def disk_bytes(path):
    return os.stat(path).st_blocks * 512


def prepare_out(out, force):
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise SystemExit(f"--out {out} exists and is not a directory")
        existing = os.listdir(out)
        if existing and not force:
            raise SystemExit(f"--out {out} is not empty (use --force to write into it)")
        for name in existing:  # stale shards of an earlier run would confuse a reader of the directory
            if name.endswith(".safetensors") or name == "model.safetensors.index.json":
                os.remove(os.path.join(out, name))
    else:
        os.makedirs(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--arch", choices=sorted(ARCHS), help="a built-in layout")
    src.add_argument("--config", help="a config.json of a supported architecture")
    ap.add_argument("--out", help="output directory (refused when non-empty, unless --force)")
    ap.add_argument("--force", action="store_true", help="write into a non-empty --out (removes its old shards)")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers (full width kept)")
    ap.add_argument("--vocab", type=int, help="override vocab_size")
    ap.add_argument("--shards", type=int, help="number of shards (default: about 5 GB each, at least 1)")
    ap.add_argument("--fill-scales", type=float, metavar="VALUE",
                    help="write FP8/INT4 scales as VALUE, norm weights as 1.0, e_score_correction_bias as 0.0")
    ap.add_argument("--dry-run", action="store_true", help="print the summary only, write nothing")
    a = ap.parse_args(argv)
    if not a.dry_run and not a.out:
        ap.error("--out is required (or --dry-run)")
    if a.shards is not None and a.shards < 1:
        ap.error("--shards must be at least 1")

    if a.arch:
        base = ARCHS[a.arch]
    else:
        with open(a.config) as f:
            base = json.load(f)
    config = apply_overrides(base, a.layers, a.vocab)
    tensors = tensor_list(config)
    total = sum(t.nbytes for t in tensors)
    n = a.shards if a.shards is not None else max(1, round(total / 5e9))
    shards = assign_shards(tensors, n)
    if a.shards is not None and len(shards) != a.shards:
        print(f"note: {len(shards)} shards, not {a.shards} (some tensors are larger than a shard's share)",
              file=sys.stderr)

    on_disk = 0
    if not a.dry_run:
        prepare_out(a.out, a.force)
        path = os.path.join(a.out, "config.json")
        with open(path, "w") as f:
            f.write(json.dumps(config, indent=2, sort_keys=bool(a.arch)) + "\n")
        on_disk += disk_bytes(path)
        weight_map = {}
        for i, shard in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            path = os.path.join(a.out, name)
            write_shard(path, shard, a.fill_scales)
            on_disk += disk_bytes(path)
            for t in shard:
                weight_map[t.name] = name
        path = os.path.join(a.out, "model.safetensors.index.json")
        with open(path, "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
            f.write("\n")
        on_disk += disk_bytes(path)

    print(f"{len(tensors)} tensors, {len(shards)} shards, {total / 1e9:.2f} GB logical ({total} bytes), "
          + ("nothing written (dry run)" if a.dry_run else f"{on_disk / 1e6:.1f} MB on disk in {a.out}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
