"""MoE / MLA golden fixtures for tools/make_fixtures.py (DeepSeek-V3, Kimi-K2, Kimi-K2.5 INT4,
DeepSeek FP8, Qwen3-MoE, Mixtral, GLM-4.5 MoE), written in the per-expert tensor layout real checkpoints use.

Not run on its own: make_fixtures.main() calls make_all(ctx, models_dir, golden, first_index) with
ctx = the make_fixtures module (seeds, weight scales, capture_states, ...).

Each fixture: an in-memory transformers model in float32 (eager attention, eager experts) whose
parameters are exactly the values the checkpoint decodes to; the checkpoint files written by hand
from it (bf16 / fp8 blocks / compressed-tensors int4 groups); a proof that the files decode back to
those parameters; reference.safetensors from the in-memory model; the routing margins.
"""

import copy
import json
import math
import re

import torch
import torch.nn.functional as F
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationConfig
from compressed_tensors.quantization.utils.helpers import calculate_qparams
from compressed_tensors.utils.match import is_match
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (
    AutoModelForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Glm4MoeConfig,
    Glm4MoeForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)
from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRotaryEmbedding

MIN_MARGIN = 1e-4  # every routing decision must win by at least this much (float32 noise is ~1e-7)
FP8_BLOCK = [16, 8]  # [rows (output dim), cols (input dim)]; deliberately non-square
FP8_MAX = 448.0
INT4_GROUP = 32
TP_SIZES = (1, 2, 4)

# DeepSeek family: the keys a real DeepSeek-V3 / Kimi-K2 config.json carries (hand-written configs).
DS_REAL_KEYS = (
    "architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
    "num_hidden_layers", "num_nextn_predict_layers", "num_attention_heads", "num_key_value_heads",
    "n_shared_experts", "n_routed_experts", "routed_scaling_factor", "kv_lora_rank", "q_lora_rank",
    "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim", "topk_method", "n_group", "topk_group",
    "num_experts_per_tok", "moe_layer_freq", "first_k_dense_replace", "norm_topk_prob", "scoring_func",
    "aux_loss_alpha", "seq_aux", "hidden_act", "max_position_embeddings", "initializer_range",
    "rms_norm_eps", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "pretraining_tp",
    "tie_word_embeddings", "rope_theta", "rope_scaling", "attention_bias", "attention_dropout",
    "torch_dtype", "transformers_version",
)
DS_REAL_EXTRAS = dict(topk_method="noaux_tc", scoring_func="sigmoid", moe_layer_freq=1, aux_loss_alpha=0.001,
                      seq_aux=True, pretraining_tp=1, use_cache=True, attention_bias=False, attention_dropout=0.0,
                      hidden_act="silu", torch_dtype="bfloat16", transformers_version="4.48.0")


def ds_args(**kw):
    base = dict(vocab_size=160, bos_token_id=1, eos_token_id=2, pad_token_id=None, initializer_range=0.08,
                tie_word_embeddings=False, num_hidden_layers=4, first_k_dense_replace=1, hidden_act="silu")
    base.update(kw)
    return base


def mixtral_args(**kw):
    base = dict(vocab_size=160, bos_token_id=1, eos_token_id=2, pad_token_id=None, initializer_range=0.08,
                tie_word_embeddings=False, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
                num_experts_per_tok=2, rms_norm_eps=1e-5, hidden_act="silu", max_position_embeddings=32768,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    base.update(kw)
    return base


# family -> (config class, model class)
FAMILIES = {
    "deepseek": (DeepseekV3Config, DeepseekV3ForCausalLM),
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
    "mixtral": (MixtralConfig, MixtralForCausalLM),
    "glm4_moe": (Glm4MoeConfig, Glm4MoeForCausalLM),
}


def noaux(family):
    """Families routed by DeepSeek's noaux_tc router (sigmoid, e_score_correction_bias, groups)."""
    return family in ("deepseek", "glm4_moe")


# name -> spec. "config": DeepseekV3Config / Qwen3MoeConfig / MixtralConfig / Glm4MoeConfig kwargs of the model
# (rope in rope_parameters form). "form": how config.json is written: "native" (transformers' own save), "classic"
# (native, RoPE rewritten to top-level rope_theta + rope_scaling, and partial_rotary_factor, if any, top-level as
# GLM-4.5 writes it), "real" (hand-written key set of a real DeepSeek/Kimi config, classic RoPE with "type"),
# "kimi_k25" (real K2.5 wrapper around a "real" text config).
# "router_std": std of the router matrices; "bias": e_score_correction_bias ~ uniform(lo, hi).
MOE_MODELS = {
    "deepseek_v3": dict(
        family="deepseek", fmt="bf16", form="native", router_std=0.3, bias=(-1.1, 0.1), seed_offset=2,
        config=ds_args(
            hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=40, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=12, n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
            n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.5, rms_norm_eps=1e-3,
            rope_interleave=True, num_nextn_predict_layers=0, max_position_embeddings=16384,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": 1.0})),
    "kimi_k2": dict(
        family="deepseek", fmt="bf16", form="real", model_type="kimi_k2", mtp=True, router_std=0.3,
        bias=(-1.1, 0.1), seed_offset=1,
        config=ds_args(
            hidden_size=64, intermediate_size=80, moe_intermediate_size=24, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=24, qk_nope_head_dim=12, qk_rope_head_dim=8,
            v_head_dim=16, n_routed_experts=12, num_experts_per_tok=3, n_group=1, topk_group=1,
            n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.827, rms_norm_eps=1e-5,
            num_nextn_predict_layers=1, max_position_embeddings=131072,
            rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0,
                             "original_max_position_embeddings": 4096, "beta_fast": 1.0, "beta_slow": 1.0,
                             "mscale": 0.707, "mscale_all_dim": 1.0})),
    "deepseek_v3_noqlora": dict(
        family="deepseek", fmt="bf16", form="classic", router_std=0.3, bias=(-1.1, 0.1), seed_offset=1,
        config=ds_args(
            hidden_size=64, intermediate_size=64, moe_intermediate_size=16, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=12, n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
            n_shared_experts=1, norm_topk_prob=False, routed_scaling_factor=2.5, rms_norm_eps=1e-6,
            rope_interleave=False, num_nextn_predict_layers=0, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "kimi_k25_int4": dict(
        family="deepseek", fmt="int4", form="kimi_k25", model_type="kimi_k2", router_std=0.3,
        bias=(-1.1, 0.1), seed_offset=2,
        config=ds_args(
            hidden_size=64, intermediate_size=96, moe_intermediate_size=64, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=16, n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1,
            n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.5, rms_norm_eps=1e-5,
            num_nextn_predict_layers=0, max_position_embeddings=262144,
            rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 64.0,
                             "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": 1.0})),
    "deepseek_v3_fp8": dict(
        family="deepseek", fmt="fp8", form="real", model_type="deepseek_v3", router_std=0.3,
        bias=(-1.1, 0.1), seed_offset=0,
        config=ds_args(
            hidden_size=72, intermediate_size=96, moe_intermediate_size=32, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=36, kv_lora_rank=28, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=8, n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
            n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.5, rms_norm_eps=1e-6,
            num_nextn_predict_layers=0, max_position_embeddings=163840,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                             "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": 1.0})),
    "qwen3_moe": dict(
        family="qwen3_moe", fmt="bf16", form="classic", router_std=0.3, seed_offset=0,
        config=dict(
            vocab_size=160, bos_token_id=1, eos_token_id=2, pad_token_id=None, initializer_range=0.08,
            tie_word_embeddings=False, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
            num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[1],
            rms_norm_eps=1e-6, max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Appended after the fixtures above (model numbers 12, 13, 14), so their seeds are unchanged.
    "mixtral": dict(
        family="mixtral", fmt="bf16", form="classic", router_std=0.3, seed_offset=2,
        config=mixtral_args(sliding_window=None)),
    "mixtral_swa": dict(
        family="mixtral", fmt="bf16", form="classic", router_std=0.3, seed_offset=2,
        config=mixtral_args(sliding_window=8)),
    "glm4_moe": dict(
        family="glm4_moe", fmt="bf16", form="classic", mtp=True, router_std=0.3, bias=(-1.1, 0.1), seed_offset=0,
        config=dict(
            vocab_size=160, bos_token_id=1, eos_token_id=2, pad_token_id=None, initializer_range=0.08,
            tie_word_embeddings=False, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=4, num_nextn_predict_layers=1, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, partial_rotary_factor=0.5, attention_bias=True, use_qk_norm=True, n_routed_experts=16,
            num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
            norm_topk_prob=True, routed_scaling_factor=2.5, rms_norm_eps=1e-5, hidden_act="silu",
            max_position_embeddings=131072, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}

# Kimi-K2.5 style compressed-tensors config (routed experts only; vision tower and projector excluded).
INT4_QUANT_CONFIG = {
    "config_groups": {
        "group_0": {
            "input_activations": None,
            "output_activations": None,
            "targets": ["Linear"],
            "weights": {
                "actorder": None, "block_structure": None, "dynamic": False, "group_size": INT4_GROUP,
                "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "strategy": "group",
                "symmetric": True, "type": "int",
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
FP8_QUANT_CONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                    "weight_block_size": FP8_BLOCK}
K25_VISION_CONFIG = {  # tiny, keys as in Kimi-K2.5's vision_config; nothing here is run
    "init_pos_emb_height": 4, "init_pos_emb_width": 4, "init_pos_emb_time": 4, "merge_kernel_size": [2, 2],
    "mm_hidden_size": 16, "mm_projector_type": "patchmerger", "patch_size": 14, "pos_emb_type": "divided_fixed",
    "projector_hidden_act": "gelu", "projector_ln_eps": 1e-5, "text_hidden_size": 64,
    "video_attn_type": "spatial_temporal", "vt_hidden_size": 16, "vt_intermediate_size": 32,
    "vt_num_attention_heads": 2, "vt_num_hidden_layers": 1,
}
MEDIA_PLACEHOLDER_TOKEN_ID = 158


# ----------------------------------------------------------------------------------------------
# model construction


def build_model(spec, seed_build, seed_weights, ctx):
    cfg_cls, cls = FAMILIES[spec["family"]]
    config = cfg_cls(**copy.deepcopy(spec["config"]))
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    torch.manual_seed(seed_build)
    model = cls(config).eval()
    ctx.randomize_weights(model, seed_weights)
    gen = torch.Generator().manual_seed(seed_weights + 50_000)
    with torch.no_grad():
        for name, mod in model.named_modules():
            if name.endswith("mlp.gate"):
                # Router matrices get their own std (routing must depend on the token, margins stay wide).
                mod.weight.mul_(spec["router_std"] / ctx.WEIGHT_STD)
                if hasattr(mod, "e_score_correction_bias"):  # zero after init in transformers: randomize
                    lo, hi = spec["bias"]
                    mod.e_score_correction_bias.copy_(
                        lo + (hi - lo) * torch.rand(mod.e_score_correction_bias.shape, generator=gen))
    return model


def moe_layers(model):
    return [i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")]


# ----------------------------------------------------------------------------------------------
# tensor formats


def fp8_quantize(w):
    """Per-block (FP8_BLOCK) e4m3 quantization as DeepSeek stores it: scale_inv = amax / 448 (float32),
    fp8 = w / scale_inv. Partial edge blocks use their own amax."""
    rb, cb = FP8_BLOCK
    out, inn = w.shape
    R, C = -(-out // rb), -(-inn // cb)
    padded = torch.zeros(R * rb, C * cb, dtype=torch.float32)
    padded[:out, :inn] = w.float()
    amax = padded.view(R, rb, C, cb).abs().amax(dim=(1, 3))
    assert (amax > 0).all()
    scale_inv = (amax / FP8_MAX).float()
    full = expand_blocks(scale_inv, out, inn)
    q = (w.float() / full).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    assert not torch.isnan(q.float()).any()
    return q, scale_inv


def expand_blocks(scale_inv, out, inn):
    rb, cb = FP8_BLOCK
    return scale_inv.repeat_interleave(rb, dim=0).repeat_interleave(cb, dim=1)[:out, :inn]


def fp8_decode(q, scale_inv):
    """Reference decoding in float32: fp8 value times the scale of its block (crop at the edges)."""
    out, inn = q.shape
    assert scale_inv.shape == (-(-out // FP8_BLOCK[0]), -(-inn // FP8_BLOCK[1])), (q.shape, scale_inv.shape)
    return q.float() * expand_blocks(scale_inv.float(), out, inn)


def int4_scheme():
    return QuantizationConfig.model_validate(INT4_QUANT_CONFIG).config_groups["group_0"]


def int4_compress(w_bf16, scheme):
    """compressed-tensors' own symmetric group quantization + PackedQuantizationCompressor."""
    args = scheme.weights
    out, inn = w_bf16.shape
    groups = w_bf16.view(out, inn // args.group_size, args.group_size)
    scale, zp = calculate_qparams(groups.amin(dim=-1), groups.amax(dim=-1), args)
    assert scale.dtype == torch.bfloat16, scale.dtype
    comp = PackedQuantizationCompressor.compress(
        {"weight": w_bf16, "weight_scale": scale, "weight_zero_point": zp}, scheme)
    assert set(comp) == {"weight_packed", "weight_scale", "weight_shape"}, set(comp)
    return comp


def int4_library_decode(comp, scheme):
    return PackedQuantizationCompressor.decompress(dict(comp), scheme)["weight"]


def int4_unpack(packed, shape):
    """Independent unpacking: 8 nibbles per int32, element j at bits 4*(j%8) of word j//8, value nibble-8."""
    words = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(8, dtype=torch.int64) * 4
    nib = (words.unsqueeze(-1) >> shifts) & 0xF
    return (nib.reshape(packed.shape[0], -1)[:, : int(shape[1])] - 8).to(torch.int8)


def int4_decode(packed, scale, shape):
    """Reference decoding: bf16(q * scale) with the scale of the weight's 32-column group."""
    q = int4_unpack(packed, shape)
    full = scale.repeat_interleave(INT4_GROUP, dim=1)
    return (q.to(torch.bfloat16) * full).float()


# ----------------------------------------------------------------------------------------------
# checkpoint layout


def split_experts(state, n_experts):
    """Fused in-memory experts -> per-expert tensors ({gate,up,down}_proj.weight [I,H]/[I,H]/[H,I])."""
    out = {}
    for name, t in state.items():
        m = re.fullmatch(r"(.*\.mlp\.experts)\.(gate_up_proj|down_proj)", name)
        if not m:
            out[name] = t
            continue
        assert t.shape[0] == n_experts, (name, t.shape)
        for e in range(n_experts):
            if m.group(2) == "gate_up_proj":
                gate, up = t[e].chunk(2, dim=0)
                out[f"{m.group(1)}.{e}.gate_proj.weight"] = gate.contiguous()
                out[f"{m.group(1)}.{e}.up_proj.weight"] = up.contiguous()
            else:
                out[f"{m.group(1)}.{e}.down_proj.weight"] = t[e].contiguous()
    return out


def fuse_experts(weights, n_experts):
    """Inverse of split_experts on decoded float32 weights (names without the quantization suffixes)."""
    out, groups = {}, {}
    for name, t in weights.items():
        m = re.fullmatch(r"(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight", name)
        if m:
            groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = t
        else:
            out[name] = t
    for prefix, g in groups.items():
        assert len(g) == 3 * n_experts, (prefix, len(g))
        out[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([g[(e, "gate")], g[(e, "up")]], dim=0) for e in range(n_experts)])
        out[f"{prefix}.down_proj"] = torch.stack([g[(e, "down")] for e in range(n_experts)])
    return out


# Mixtral checkpoints: block_sparse_moe.gate.weight and block_sparse_moe.experts.{e}.w1 (gate) / w2 (down) / w3 (up).
MIXTRAL_EXPERT_NAMES = {"gate": "w1", "down": "w2", "up": "w3"}


def mixtral_file_name(name):
    """Per-expert in-memory name (mlp.experts.{e}.gate_proj.weight, mlp.gate.weight) -> Mixtral checkpoint name."""
    m = re.fullmatch(r"(model\.layers\.\d+)\.mlp\.(.*)", name)
    if not m:
        return name
    rest = m.group(2)
    if e := re.fullmatch(r"experts\.(\d+)\.(gate|up|down)_proj\.weight", rest):
        rest = f"experts.{e.group(1)}.{MIXTRAL_EXPERT_NAMES[e.group(2)]}.weight"
    else:
        assert rest == "gate.weight", name
    return f"{m.group(1)}.block_sparse_moe.{rest}"


def mixtral_memory_name(name):
    """Inverse of mixtral_file_name."""
    m = re.fullmatch(r"(model\.layers\.\d+)\.block_sparse_moe\.(.*)", name)
    if not m:
        return name
    rest = m.group(2)
    if e := re.fullmatch(r"experts\.(\d+)\.(w1|w2|w3)\.weight", rest):
        proj = {v: k for k, v in MIXTRAL_EXPERT_NAMES.items()}[e.group(2)]
        rest = f"experts.{e.group(1)}.{proj}_proj.weight"
    else:
        assert rest == "gate.weight", name
    return f"{m.group(1)}.mlp.{rest}"


FP8_LINEAR = re.compile(
    r"model\.layers\.\d+\.(self_attn\.(q_a_proj|q_b_proj|q_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj)"
    r"|mlp\.(gate_proj|up_proj|down_proj)|mlp\.shared_experts\.(gate|up|down)_proj"
    r"|mlp\.experts\.\d+\.(gate|up|down)_proj)\.weight")
ROUTED_EXPERT = re.compile(r".*\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight")


def encode_checkpoint(model, spec):
    """Per-expert file tensors for `model` in the spec's format, and the in-memory parameters replaced by
    exactly what those tensors decode to. Returns (file tensors, stats)."""
    fmt = spec["fmt"]
    n_exp = model.config.num_local_experts  # an alias of n_routed_experts / num_experts where those are the keys
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    per_expert = split_experts(state, n_exp)
    files, decoded, stats = {}, {}, {"fp8_tensors": 0, "int4_tensors": 0, "int4_min_nibbles": 0}
    scheme = int4_scheme() if fmt == "int4" else None
    for name, t in per_expert.items():
        if name.endswith("e_score_correction_bias"):
            files[name] = t.float().contiguous()  # float32 in real checkpoints
            decoded[name] = files[name].clone()
        elif fmt == "fp8" and FP8_LINEAR.fullmatch(name):
            q, s = fp8_quantize(t)
            files[name] = q.contiguous()
            files[name + "_scale_inv"] = s.contiguous()
            decoded[name] = fp8_decode(q, s)
            stats["fp8_tensors"] += 1
        elif fmt == "int4" and ROUTED_EXPERT.fullmatch(name):
            comp = int4_compress(t.to(torch.bfloat16), scheme)
            base = name[: -len(".weight")]
            for k in ("weight_packed", "weight_scale", "weight_shape"):
                files[f"{base}.{k}"] = comp[k].contiguous()
            lib = int4_library_decode(comp, scheme)
            assert lib.dtype == torch.bfloat16, lib.dtype
            decoded[name] = lib.float()
            stats["int4_tensors"] += 1
            stats["int4_min_nibbles"] += int((int4_unpack(comp["weight_packed"], comp["weight_shape"]) == -8).sum())
        else:
            files[name] = t.to(torch.bfloat16).contiguous()
            decoded[name] = files[name].float()
    in_memory = fuse_experts(decoded, n_exp)
    assert set(in_memory) == set(state), set(in_memory) ^ set(state)
    with torch.no_grad():
        model.load_state_dict(in_memory, strict=True)
    if spec["family"] == "mixtral":
        files = {mixtral_file_name(k): v for k, v in files.items()}
    return files, stats


def decode_files(tensors, n_exp, prefix="", family=None):
    """Decode checkpoint tensors read back from disk (own decoders, float32) into in-memory names."""
    plain = {}
    for name, t in tensors.items():
        if not name.startswith(prefix):
            continue
        key = name[len(prefix):]
        if key.endswith("_scale_inv") or key.endswith(".weight_scale") or key.endswith(".weight_shape"):
            continue
        if key.endswith(".weight_packed"):
            base = name[: -len(".weight_packed")]
            plain[key[: -len("_packed")]] = int4_decode(t, tensors[base + ".weight_scale"],
                                                        tensors[base + ".weight_shape"])
        elif t.dtype == torch.float8_e4m3fn:
            plain[key] = fp8_decode(t, tensors[name + "_scale_inv"])
        else:
            plain[key] = t.float()
    if family == "mixtral":
        plain = {mixtral_memory_name(k): v for k, v in plain.items()}
    return fuse_experts(plain, n_exp)


def mtp_tensors(files, model, gen):
    """Random tensors of one DeepSeek multi-token-prediction layer, model.layers.{L}.*, never read."""
    L = model.config.num_hidden_layers
    src = f"model.layers.{L - 1}."
    H, V = model.config.hidden_size, model.config.vocab_size
    out = {}
    shapes = {k[len(src):]: (v.shape, v.dtype) for k, v in files.items() if k.startswith(src)}
    shapes.update({"enorm.weight": ((H,), torch.bfloat16), "hnorm.weight": ((H,), torch.bfloat16),
                   "eh_proj.weight": ((H, 2 * H), torch.bfloat16), "embed_tokens.weight": ((V, H), torch.bfloat16),
                   "shared_head.norm.weight": ((H,), torch.bfloat16),
                   "shared_head.head.weight": ((V, H), torch.bfloat16)})
    for k in sorted(shapes):
        shape, dtype = shapes[k]
        noise = torch.randn(shape, generator=gen)
        val = 1.0 + 0.1 * noise if (len(shape) == 1 and "norm" in k) else 0.08 * noise
        out[f"model.layers.{L}.{k}"] = val.to(dtype).contiguous()
    return out


def read_safetensors(paths):
    tensors = {}
    for p in paths:
        with safe_open(p, framework="pt") as f:
            for k in f.keys():
                assert k not in tensors, k
                tensors[k] = f.get_tensor(k)
    return tensors


def write_sharded(model_dir, shards):
    """shards: list of dicts; one -> model.safetensors, several -> model-0000i-of-0000n + index."""
    if len(shards) == 1:
        save_file(shards[0], model_dir / "model.safetensors", metadata={"format": "pt"})
        return [model_dir / "model.safetensors"]
    n, weight_map, total, paths = len(shards), {}, 0, []
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{n:05d}.safetensors"
        save_file(shard, model_dir / fname, metadata={"format": "pt"})
        paths.append(model_dir / fname)
        for k, t in shard.items():
            weight_map[k] = fname
            total += t.numel() * t.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return paths


# ----------------------------------------------------------------------------------------------
# config.json


def write_json(path, obj):
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def classic_rope(rope):
    rope = dict(rope)
    theta = rope.pop("rope_theta")
    kind = rope.pop("rope_type")
    return theta, (None if kind == "default" else {**rope, "type": kind})


def real_text_config(model, spec):
    """Key set of a real DeepSeek-V3 / Kimi-K2 config.json (classic RoPE spelling, no rope_interleave:
    absent means interleaved, as in the real files)."""
    d = model.config.to_dict()
    d.update(DS_REAL_EXTRAS)
    d["architectures"] = ["DeepseekV3ForCausalLM"]
    d["model_type"] = spec["model_type"]
    d["rope_theta"], d["rope_scaling"] = classic_rope(model.config.rope_parameters)
    return {k: d[k] for k in DS_REAL_KEYS}


def write_config(model_dir, model, spec, name):
    form = spec["form"]
    cls_name = type(model).__name__
    if form in ("native", "classic"):
        cfg = copy.deepcopy(model.config)
        cfg.architectures = [cls_name]
        cfg.dtype = torch.bfloat16
        cfg.save_pretrained(model_dir)
        d = json.loads((model_dir / "config.json").read_text())
        if form == "classic":
            rope = dict(d.pop("rope_parameters"))
            if "partial_rotary_factor" in rope:  # top-level, as GLM-4.5's config.json has it
                d["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
            d["rope_theta"], d["rope_scaling"] = classic_rope(rope)
        if "num_local_experts" in d and spec["family"] == "qwen3_moe":
            d["num_experts"] = d.pop("num_local_experts")  # the Hub spelling (transformers 5 writes the alias)
        write_json(model_dir / "config.json", d)
        return d
    text = real_text_config(model, spec)
    if spec["fmt"] == "fp8":
        text["quantization_config"] = FP8_QUANT_CONFIG
    if form == "real":
        write_json(model_dir / "config.json", text)
        return text
    assert form == "kimi_k25"
    text["quantization_config"] = INT4_QUANT_CONFIG
    d = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
         "media_placeholder_token_id": MEDIA_PLACEHOLDER_TOKEN_ID, "pad_token_id": None,
         "ignore_index": -100, "use_unified_vision_chunk": True, "video_placeholder": "<|kimi_k25_video_placeholder|>",
         "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.57.1",
         "text_config": text, "vision_config": K25_VISION_CONFIG}
    write_json(model_dir / "config.json", d)
    return d


def config_from_file(d, family):
    """The model config transformers builds from a written (text) config dict."""
    if "text_config" in d:
        d = d["text_config"]
    kw = {k: v for k, v in d.items() if k not in ("architectures", "model_type", "quantization_config",
                                                    "torch_dtype", "transformers_version", "dtype")}
    return FAMILIES[family][0](**kw)


def check_config_roundtrip(d, model, spec):
    c, m = config_from_file(d, spec["family"]), model.config
    keys = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "rms_norm_eps", "vocab_size", "rope_parameters", "num_experts_per_tok", "norm_topk_prob"]
    if spec["family"] == "deepseek":
        keys += ["moe_intermediate_size", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                 "v_head_dim", "n_routed_experts", "n_group", "topk_group", "n_shared_experts",
                 "routed_scaling_factor", "first_k_dense_replace", "rope_interleave", "head_dim", "qk_head_dim"]
    elif spec["family"] == "qwen3_moe":
        keys += ["moe_intermediate_size", "num_experts", "decoder_sparse_step", "mlp_only_layers", "head_dim"]
    elif spec["family"] == "mixtral":  # always renormalises: no norm_topk_prob
        keys = [k for k in keys if k != "norm_topk_prob"]
        keys += ["num_local_experts", "head_dim", "sliding_window", "tie_word_embeddings"]
    else:
        keys += ["moe_intermediate_size", "n_routed_experts", "n_group", "topk_group", "n_shared_experts",
                 "routed_scaling_factor", "first_k_dense_replace", "head_dim", "attention_bias", "use_qk_norm",
                 "num_nextn_predict_layers", "tie_word_embeddings"]
    for k in keys:
        a, b = getattr(c, k), getattr(m, k)
        if k == "rope_parameters":
            a = {kk: vv for kk, vv in a.items() if kk != "type"}
        assert a == b, (k, a, b)


# ----------------------------------------------------------------------------------------------
# routing margins


def deepseek_route(gate, x, mask_value=float("-inf"), use_bias=True, use_groups=True):
    """Recompute DeepseekV3TopkRouter's choice; return (indices, group margin, expert margin)."""
    x = x.reshape(-1, gate.hidden_dim)
    scores = F.linear(x.type(torch.float32), gate.weight.type(torch.float32)).sigmoid()
    sfc = scores + gate.e_score_correction_bias if use_bias else scores
    G, E, tg, k = gate.num_group, gate.num_experts, gate.topk_group, gate.top_k
    group_scores = sfc.view(-1, G, E // G).topk(2, dim=-1)[0].sum(dim=-1)
    inf = torch.full((x.shape[0],), float("inf"))
    if G > tg and use_groups:
        s = group_scores.sort(dim=-1, descending=True)[0]
        g_margin = s[:, tg - 1] - s[:, tg]
        group_idx = torch.topk(group_scores, k=tg, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
        sfc = sfc.masked_fill(~score_mask.bool(), mask_value)
    else:
        g_margin = inf
    s = sfc.sort(dim=-1, descending=True)[0]
    e_margin = s[:, k - 1] - s[:, k]
    idx = torch.topk(sfc, k=k, dim=-1, sorted=False)[1]
    return idx, g_margin, e_margin


def qwen_route(gate, x):
    x = x.reshape(-1, gate.hidden_dim)
    probs = F.softmax(F.linear(x, gate.weight), dtype=torch.float, dim=-1)
    s = probs.sort(dim=-1, descending=True)[0]
    idx = torch.topk(probs, gate.top_k, dim=-1)[1]
    return idx, s[:, gate.top_k - 1] - s[:, gate.top_k]


def same_sets(a, b):
    return (a.sort(dim=-1)[0] == b.sort(dim=-1)[0]).all(dim=-1)


def routing_report(model, golden, family):
    """Run each golden sample alone; hook every router; return margins and how much routing varies."""
    records = []

    def hook(layer):
        def fn(module, args, output):
            records.append((layer, module, args[0].detach().clone(), output[2].detach().clone()))
        return fn

    handles = [model.model.layers[i].mlp.gate.register_forward_hook(hook(i)) for i in moe_layers(model)]
    try:
        for sample in golden:
            ids = torch.tensor(sample["input_ids"])[None, :]
            with torch.no_grad():
                model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    rep = {"group_margin": float("inf"), "expert_margin": float("inf"), "tokens": 0, "decisions": 0,
           "bias_changes": 0, "groups_change": 0, "zero_fill_changes": 0, "negative_biased_selected": 0,
           "distinct_sets": set()}
    with torch.no_grad():
        for layer, gate, x, chosen in records:
            if noaux(family):
                idx, gm, em = deepseek_route(gate, x)
                rep["group_margin"] = min(rep["group_margin"], gm.min().item())
                rep["bias_changes"] += int((~same_sets(idx, deepseek_route(gate, x, use_bias=False)[0])).sum())
                rep["groups_change"] += int((~same_sets(idx, deepseek_route(gate, x, use_groups=False)[0])).sum())
                rep["zero_fill_changes"] += int((~same_sets(idx, deepseek_route(gate, x, mask_value=0.0)[0])).sum())
                scores = F.linear(x.reshape(-1, gate.hidden_dim).float(), gate.weight.float()).sigmoid()
                biased = (scores + gate.e_score_correction_bias).gather(1, idx)
                rep["negative_biased_selected"] += int((biased < 0).sum())
                rep["decisions"] += idx.shape[0] * (2 if gate.num_group > gate.topk_group else 1)
            else:
                idx, em = qwen_route(gate, x)
                rep["decisions"] += idx.shape[0]
            assert same_sets(idx, chosen).all(), f"layer {layer}: recomputed routing differs from the router's"
            rep["expert_margin"] = min(rep["expert_margin"], em.min().item())
            rep["tokens"] += idx.shape[0]
            rep["distinct_sets"] |= {(layer, tuple(r)) for r in idx.sort(dim=-1)[0].tolist()}
    rep["distinct_sets"] = len(rep["distinct_sets"])
    rep["min_margin"] = min(rep["group_margin"], rep["expert_margin"])
    return rep


# ----------------------------------------------------------------------------------------------
# checks and descriptions


def yarn_regimes(config):
    """(#extrapolated, #ramped, #interpolated) inverse frequencies of transformers' YaRN for this config."""
    rope = config.rope_parameters
    if rope["rope_type"] != "yarn":
        return None
    dim, base = config.qk_rope_head_dim, rope["rope_theta"]
    orig = rope["original_max_position_embeddings"]

    def corr(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(corr(rope.get("beta_fast") or 32)), 0)
    high = min(math.ceil(corr(rope.get("beta_slow") or 1)), dim - 1)
    if low == high:
        high += 0.001
    ramp = [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(dim // 2)]
    extrap = [1 - r for r in ramp]  # weight of the extrapolated (unscaled) frequency
    return (sum(e == 1 for e in extrap), sum(0 < e < 1 for e in extrap), sum(e == 0 for e in extrap), extrap)


def tp_report(config, spec):
    """Which TP sizes the shapes allow, per constraint."""
    c = config
    rows = {}
    for tp in TP_SIZES:
        why = []
        if c.num_attention_heads % tp:
            why.append("heads")
        if spec["family"] != "deepseek":  # GQA: kv heads split, or each replicated on tp / kv ranks
            if not (c.num_key_value_heads % tp == 0 or tp % c.num_key_value_heads == 0):
                why.append("kv heads")
        if spec["family"] == "qwen3_moe":
            n_exp, dense, moe_i, shared = c.num_experts, c.intermediate_size, c.moe_intermediate_size, 0
        elif spec["family"] == "mixtral":  # no dense layer; intermediate_size is the experts' size
            n_exp, dense, moe_i, shared = c.num_local_experts, 0, c.intermediate_size, 0
        else:
            n_exp, dense, moe_i = c.n_routed_experts, c.intermediate_size, c.moe_intermediate_size
            shared = c.moe_intermediate_size * c.n_shared_experts
        if n_exp % tp:
            why.append("experts")
        if dense % tp:
            why.append("dense intermediate")
        if moe_i % tp:
            why.append("moe intermediate")
        if shared and shared % tp:
            why.append("shared intermediate")
        if spec["fmt"] == "fp8":
            rb, cb = FP8_BLOCK
            h = c.num_attention_heads // tp if c.num_attention_heads % tp == 0 else None
            if h is not None:
                q_rows = h * (c.qk_nope_head_dim + c.qk_rope_head_dim)
                if q_rows % rb:
                    why.append(f"fp8 q_b rows/rank {q_rows}")
                kv_rows = h * (c.qk_nope_head_dim + c.v_head_dim)
                if kv_rows % rb:
                    why.append(f"fp8 kv_b rows/rank {kv_rows}")
                if (h * c.v_head_dim) % cb:
                    why.append(f"fp8 o_proj cols/rank {h * c.v_head_dim}")
            for label, size in (("dense", dense), ("shared", shared), ("moe (if sliced)", moe_i)):
                per = size / tp
                if per != int(per) or per % rb or per % cb:
                    why.append(f"fp8 {label} intermediate/rank {per:g}")
        if spec["fmt"] == "int4":
            per = moe_i / tp
            if per != int(per) or per % INT4_GROUP:
                why.append(f"int4 down_proj groups if experts sliced ({per:g}/rank)")
        rows[tp] = why
    return rows


def describe_moe(name, spec, model, d, rep, sizes, tp, regimes, extra):
    c = model.config
    family = spec["family"]
    ds = family == "deepseek"
    n_exp = c.num_local_experts
    if noaux(family):
        dense_layers = list(range(c.first_k_dense_replace))
        groups = f"{c.n_group}/{c.topk_group}"
        shared = f"{c.n_shared_experts}x{c.moe_intermediate_size}"
    else:
        dense_layers = [i for i in range(c.num_hidden_layers) if i not in moe_layers(model)]
        groups, shared = "-", "-"
    if ds:
        attn = dict(q_lora=c.q_lora_rank, kv_lora=c.kv_lora_rank,
                    dims=f"{c.qk_nope_head_dim}/{c.qk_rope_head_dim}/{c.v_head_dim}")
    else:
        dims = f"head_dim {c.head_dim}, kv heads {c.num_key_value_heads}"
        if family == "mixtral":
            dims += f", sliding_window {c.sliding_window if c.sliding_window is not None else 'null'}"
        if family == "glm4_moe":
            dims += f", q/k/v bias {str(c.attention_bias).lower()}, qk norm {str(c.use_qk_norm).lower()}"
        attn = dict(q_lora="-", kv_lora="-", dims=dims)
    rope = c.rope_parameters
    rope_s = rope["rope_type"] + f" theta {rope['rope_theta']:g}"
    if rope["rope_type"] == "yarn":
        rope_s += (f" x{rope['factor']:g} orig {rope['original_max_position_embeddings']}"
                   f" beta {rope['beta_fast']:g}/{rope['beta_slow']:g} mscale {rope['mscale']:g}/{rope['mscale_all_dim']:g}")
    if "partial_rotary_factor" in rope:
        prf = rope["partial_rotary_factor"]
        rope_s += f", partial_rotary_factor {prf:g} (rotary dim {int(c.head_dim * prf)} of {c.head_dim})"
    if ds:
        rope_s += ", interleaved" if c.rope_interleave else ", rotate_half"
    quant = {"bf16": "none (bf16; router bias float32)" if noaux(family) else "none (bf16)",
             "fp8": f"fp8 e4m3 blocks {FP8_BLOCK} (decoder Linears)",
             "int4": f"int4 group {INT4_GROUP} sym pack-quantized (routed experts)"}[spec["fmt"]]
    intermediate = (f"-/{c.intermediate_size}" if family == "mixtral"
                    else f"{c.intermediate_size}/{c.moe_intermediate_size}")
    arch = d.get("architectures", ["?"])[0]
    mtype = d["model_type"] + (f" (text: {d['text_config']['model_type']})" if "text_config" in d else "")
    return dict(name=name, arch=arch, model_type=mtype, fmt=spec["fmt"], form=spec["form"], hidden=c.hidden_size,
                heads=c.num_attention_heads, layers=c.num_hidden_layers, experts=f"{n_exp}/{c.num_experts_per_tok}",
                groups=groups, shared=shared, dense_layers=dense_layers, moe_layers=moe_layers(model),
                intermediate=intermediate, rope=rope_s, quant=quant, family=family,
                eps=c.rms_norm_eps, rep=rep, sizes=sizes, tp=tp, regimes=regimes, extra=extra, **attn)


# ----------------------------------------------------------------------------------------------
# Mixtral / GLM-4.5: file layout and semantics the fixtures exercise


def check_file_layout(on_disk, model, family):
    """The checkpoint keys are the real Mixtral / GLM-4.5 ones."""
    c, keys = model.config, set(on_disk)
    L, E = c.num_hidden_layers, c.num_local_experts
    for i in range(L):
        p = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            assert p + f"self_attn.{proj}.weight" in keys, (p, proj)
            has_bias = p + f"self_attn.{proj}.bias" in keys
            assert has_bias == (family == "glm4_moe" and proj != "o_proj"), (p, proj, has_bias)
        if family == "mixtral":
            assert not any(k.startswith(p + "mlp.") for k in keys)
            assert on_disk[p + "block_sparse_moe.gate.weight"].shape == (E, c.hidden_size)
            for e in range(E):
                q = p + f"block_sparse_moe.experts.{e}."
                assert on_disk[q + "w1.weight"].shape == (c.intermediate_size, c.hidden_size)
                assert on_disk[q + "w3.weight"].shape == (c.intermediate_size, c.hidden_size)
                assert on_disk[q + "w2.weight"].shape == (c.hidden_size, c.intermediate_size)
        else:
            assert (p + "self_attn.q_norm.weight" in keys) and on_disk[p + "self_attn.k_norm.weight"].shape == (
                c.head_dim,)
            if i < c.first_k_dense_replace:
                for proj in ("gate_proj", "up_proj", "down_proj"):
                    assert p + f"mlp.{proj}.weight" in keys
            else:
                assert on_disk[p + "mlp.gate.weight"].shape == (E, c.hidden_size)
                assert on_disk[p + "mlp.gate.e_score_correction_bias"].dtype == torch.float32
                for e in range(E):
                    for proj in ("gate_proj", "up_proj", "down_proj"):
                        assert p + f"mlp.experts.{e}.{proj}.weight" in keys
                for proj in ("gate_proj", "up_proj", "down_proj"):
                    assert p + f"mlp.shared_experts.{proj}.weight" in keys
    if family == "mixtral":
        return (f"real Mixtral layout: block_sparse_moe.gate.weight [{E}, {c.hidden_size}], "
                f"block_sparse_moe.experts.E.w1/w3 [{c.intermediate_size}, {c.hidden_size}], "
                f"w2 [{c.hidden_size}, {c.intermediate_size}]")
    mtp = sorted({k[len(f"model.layers.{L}."):] for k in keys if k.startswith(f"model.layers.{L}.")
                  and ".experts." not in k and ".self_attn." not in k})
    return (f"real GLM-4.5 layout: q/k/v biases (no o_proj bias), q_norm/k_norm [{c.head_dim}], dense layer(s) "
            f"{list(range(c.first_k_dense_replace))}, mlp.gate + e_score_correction_bias (float32), experts, "
            f"shared_experts; MTP layer non-expert, non-attention keys: {', '.join(mtp)}")


def mixtral_checks(model, d, golden, tensors, ctx, checks):
    c, extra = model.config, {}
    assert "sliding_window" in d and d["sliding_window"] == c.sliding_window, d.get("sliding_window")
    assert moe_layers(model) == list(range(c.num_hidden_layers)), moe_layers(model)
    assert model.model.layers[0].self_attn.q_proj.bias is None
    # Which keys position t of the first layer reads: perturb the token at t-W and at t-W+1 and see whether
    # the first layer's output at t (states[1, t]) changes (W = the window, or 8 for the unwindowed model).
    W = c.sliding_window or 8
    longest = max(range(len(golden)), key=lambda i: len(golden[i]["input_ids"]))
    ids = torch.tensor(golden[longest]["input_ids"])
    t = 2 * W + 4
    base = ctx.capture_states(model, ids)[1, t]

    def first_layer_at_t_changes(p):
        ids2 = ids.clone()
        ids2[p] = (ids2[p] + 1) % ctx.MAX_TOKEN_ID
        return not torch.equal(ctx.capture_states(model, ids2)[1, t], base)

    inside, outside = first_layer_at_t_changes(t - W + 1), first_layer_at_t_changes(t - W)
    assert inside
    if c.sliding_window is not None:
        assert not outside, "a key W positions back is attended"
        alt = copy.deepcopy(model)
        alt.config.sliding_window = None
        diff = ctx.states_diff(alt, golden, tensors)
        assert diff > 1e-3, diff
        extra["no_window_diff"] = diff
        checks.append(f"sliding window {W}: query {t} reads key {t - W + 1}, not key {t - W}; without the window "
                      f"states change by up to {diff:.3g}")
    else:
        assert outside, "the unwindowed model ignores a key 8 positions back"
        checks.append(f"sliding_window null: query {t} reads key {t - W} too (full causal attention)")
    # Renormalised top-2 of a softmax over all experts == softmax over the 2 selected logits.
    gate = model.model.layers[0].mlp.gate
    x = torch.randn(5, c.hidden_size, generator=torch.Generator().manual_seed(0))
    logits, scores, idx = gate(x)
    assert logits.dtype == torch.float32 and scores.dtype == torch.float32
    assert torch.allclose(scores, F.softmax(logits.gather(1, idx), dim=-1), rtol=0, atol=1e-6)
    return extra


def glm4_moe_checks(model, d, golden, tensors, ctx, checks):
    c, extra = model.config, {"bias_std": ctx.BIAS_STD}
    rope = c.rope_parameters
    # config.json holds the classic top-level keys; transformers moves them into rope_parameters.
    assert "rope_parameters" not in d and d["partial_rotary_factor"] == 0.5 and d["rope_theta"] == 1e6, d
    assert rope["partial_rotary_factor"] == 0.5 and rope["rope_theta"] == 1e6, rope
    # Without the key transformers would still use 0.5 (Glm4MoeConfig.__post_init__ default), and theta 10000.
    bare = {k: v for k, v in d.items() if k not in ("partial_rotary_factor", "rope_theta", "rope_scaling",
                                                    "architectures", "model_type", "dtype", "transformers_version")}
    default_rope = Glm4MoeConfig(**bare).rope_parameters
    assert default_rope["partial_rotary_factor"] == 0.5 and default_rope["rope_theta"] == 10000.0, default_rope
    rdim = int(c.head_dim * rope["partial_rotary_factor"])
    rot = model.model.rotary_emb
    inv = 1.0 / (rope["rope_theta"] ** (torch.arange(0, rdim, 2, dtype=torch.float) / rdim))
    assert rdim == 8 and torch.equal(inv, rot.inv_freq), (rdim, rot.inv_freq)
    attn = model.model.layers[0].self_attn
    assert attn.head_dim == c.head_dim == 16 and attn.scaling == c.head_dim ** -0.5
    assert attn.q_proj.bias is not None and attn.k_proj.bias is not None and attn.v_proj.bias is not None
    assert attn.o_proj.bias is None
    assert attn.q_norm.variance_epsilon == c.rms_norm_eps and attn.k_norm.variance_epsilon == c.rms_norm_eps
    assert moe_layers(model) == list(range(c.first_k_dense_replace, c.num_hidden_layers)), moe_layers(model)

    def variant(change):
        alt = copy.deepcopy(model)
        with torch.no_grad():
            change(alt)
        return ctx.states_diff(alt, golden, tensors)

    def full_rotary(alt):
        alt.config.rope_parameters = {**rope, "partial_rotary_factor": 1.0}
        alt.model.rotary_emb = Glm4MoeRotaryEmbedding(alt.config)

    def no_bias(alt):
        for layer in alt.model.layers:
            for proj in ("q_proj", "k_proj", "v_proj"):
                getattr(layer.self_attn, proj).bias.zero_()

    def no_qk_norm(alt):
        for layer in alt.model.layers:
            layer.self_attn.q_norm = torch.nn.Identity()
            layer.self_attn.k_norm = torch.nn.Identity()

    def no_scaling(alt):
        for i in moe_layers(alt):
            alt.model.layers[i].mlp.gate.routed_scaling_factor = 1.0

    for key, change, what in (("full_rotary_diff", full_rotary, "partial_rotary_factor 1.0"),
                              ("no_bias_diff", no_bias, "q/k/v biases dropped"),
                              ("no_qk_norm_diff", no_qk_norm, "q/k norms dropped"),
                              ("no_scaling_diff", no_scaling, "routed_scaling_factor 1")):
        extra[key] = variant(change)
        assert extra[key] > 1e-3, (key, extra[key])
        checks.append(f"{what}: states change by up to {extra[key]:.3g}")
    return extra


# ----------------------------------------------------------------------------------------------
# one fixture


def make_moe_model(name, index, model_dir, golden, ctx):
    spec = MOE_MODELS[name]
    seed_build, seed_weights = ctx.SEED + index, ctx.SEED + 100 + index + spec["seed_offset"]
    model = build_model(spec, seed_build, seed_weights, ctx)
    family = spec["family"]
    n_exp = model.config.num_local_experts
    model_dir.mkdir(parents=True)
    files, stats = encode_checkpoint(model, spec)
    checks = []

    # ---- files
    prefix = "language_model." if spec["form"] == "kimi_k25" else ""
    named = {prefix + k: v for k, v in files.items()}
    if spec.get("mtp"):
        named.update(mtp_tensors(files, model, torch.Generator().manual_seed(seed_weights + 60_000)))
    if spec["form"] == "kimi_k25":
        gen = torch.Generator().manual_seed(seed_weights + 70_000)
        vt, H = K25_VISION_CONFIG["vt_hidden_size"], model.config.hidden_size
        dummies = {"vision_tower.patch_embed.proj.weight": (vt, 3, 14, 14), "vision_tower.patch_embed.proj.bias": (vt,),
                   "vision_tower.encoder.blocks.0.wqkv.weight": (3 * vt, vt),
                   "vision_tower.encoder.blocks.0.wo.weight": (vt, vt),
                   "vision_tower.encoder.final_layernorm.weight": (vt,),
                   "mm_projector.pre_norm.weight": (vt,), "mm_projector.proj.0.weight": (4 * vt, 4 * vt),
                   "mm_projector.proj.2.weight": (H, 4 * vt)}
        for k in sorted(dummies):
            named[k] = (0.08 * torch.randn(dummies[k], generator=gen)).to(torch.bfloat16)
        layer_of = lambda k: int(m.group(1)) if (m := re.match(r"language_model\.model\.layers\.(\d+)\.", k)) else -1
        shards = [{k: v for k, v in named.items() if layer_of(k) < 2 and not k.startswith("language_model.lm_head")
                   and not k.startswith("language_model.model.norm")},
                  {k: v for k, v in named.items() if layer_of(k) >= 2 or k.startswith("language_model.lm_head")
                   or k.startswith("language_model.model.norm")}]
        assert sum(map(len, shards)) == len(named)
    else:
        shards = [named]
    paths = write_sharded(model_dir, shards)
    d = write_config(model_dir, model, spec, name)
    check_config_roundtrip(d, model, spec)

    # ---- the files decode to the in-memory parameters (own decoders), tensor by tensor, exactly
    on_disk = read_safetensors(paths)
    assert set(on_disk) == set(named)
    decoded = decode_files({k: v for k, v in on_disk.items()
                            if not re.match(rf"{re.escape(prefix)}model\.layers\.{model.config.num_hidden_layers}\.", k)},
                           n_exp, prefix, family)
    mem = model.state_dict()
    assert set(decoded) == set(mem), set(decoded) ^ set(mem)
    for k in mem:
        assert decoded[k].dtype == torch.float32 and torch.equal(decoded[k], mem[k]), f"{name}: {k} differs"
    checks.append(f"{len(mem)} in-memory tensors == decoded files (exact)")
    if spec.get("mtp"):
        L = model.config.num_hidden_layers
        n_mtp = sum(k.startswith(f"model.layers.{L}.") for k in on_disk)
        checks.append(f"MTP layer model.layers.{L}.* present ({n_mtp} tensors, not part of the model)")
    if family in ("mixtral", "glm4_moe"):
        checks.append(check_file_layout(on_disk, model, family))

    if spec["fmt"] == "int4":
        # The library's own view of the files: quantized modules == routed experts, and its decompression
        # of the stored tensors == our decoding.
        scheme = int4_scheme()
        qcfg = QuantizationConfig.model_validate(d["text_config"]["quantization_config"])
        linears = sorted({k.rsplit(".", 1)[0] for k in on_disk
                          if (k.endswith(".weight") and on_disk[k].dim() == 2 and "embed_tokens" not in k
                              and not k.endswith("mlp.gate.weight")) or k.endswith(".weight_packed")})
        dummy = torch.nn.Linear(1, 1, device="meta")
        quantized = {n for n in linears if is_match(n, dummy, ["Linear"], qcfg.ignore)}
        packed = {k[: -len(".weight_packed")] for k in on_disk if k.endswith(".weight_packed")}
        assert quantized == packed, quantized ^ packed
        assert all(ROUTED_EXPERT.fullmatch(p + ".weight") for p in packed)
        for base in packed:
            comp = {s: on_disk[f"{base}.{s}"] for s in ("weight_packed", "weight_scale", "weight_shape")}
            assert comp["weight_scale"].dtype == torch.bfloat16 and comp["weight_shape"].dtype == torch.int64
            assert torch.equal(int4_library_decode(comp, scheme).float(),
                               int4_decode(comp["weight_packed"], comp["weight_scale"], comp["weight_shape"]))
        assert stats["int4_min_nibbles"] > 0
        checks.append(f"{len(packed)} int4 tensors (compressed-tensors ignore list selects exactly the routed "
                      f"experts; library decompress == bf16(q*scale)); {stats['int4_min_nibbles']} nibbles are -8")
    if spec["fmt"] == "fp8":
        partial_r = sum(on_disk[k].shape[0] % FP8_BLOCK[0] != 0 for k in on_disk if on_disk[k].dtype == torch.float8_e4m3fn)
        partial_c = sum(on_disk[k].shape[1] % FP8_BLOCK[1] != 0 for k in on_disk if on_disk[k].dtype == torch.float8_e4m3fn)
        assert partial_r and partial_c, (partial_r, partial_c)
        checks.append(f"{stats['fp8_tensors']} fp8 tensors ({partial_r} with a partial row block, "
                      f"{partial_c} with a partial column block)")

    # ---- transformers' loader agrees (only where it loads these files faithfully)
    reference_model = model
    if spec["fmt"] == "bf16" and spec["form"] in ("native", "classic"):
        loaded, info = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype="auto", attn_implementation="eager", experts_implementation="eager",
            output_loading_info=True)
        assert type(loaded) is type(model), type(loaded)
        problems = {k: v for k, v in info.items() if v}
        mtp_prefix = f"model.layers.{model.config.num_hidden_layers}."
        unexpected_mtp = set()
        if spec.get("mtp"):  # the MTP layer is not part of the model: unexpected, and only it
            unexpected_mtp = set(problems.pop("unexpected_keys", ()))
            assert unexpected_mtp and all(k.startswith(mtp_prefix) for k in unexpected_mtp), unexpected_mtp
        assert not problems, problems
        g = loaded.model.layers[moe_layers(model)[0]].mlp.gate
        extra_load = f"; as loaded (dtype auto) the router weight is {str(g.weight.dtype).split('.')[-1]}"
        if noaux(family):
            extra_load += f", e_score_correction_bias {str(g.e_score_correction_bias.dtype).split('.')[-1]}"
        if family == "glm4_moe":  # _keep_in_fp32_modules_strict (the README says so)
            assert g.weight.dtype == torch.float32 and g.e_score_correction_bias.dtype == torch.float32
        if family == "mixtral":  # the router computes in the model dtype (the README says so)
            assert g.weight.dtype == torch.bfloat16
        loaded = loaded.float().eval()
        with torch.no_grad():
            for p in loaded.parameters():
                p.data = p.data.clone()
        lstate = loaded.state_dict()
        for k, v in mem.items():
            assert torch.equal(lstate[k].float(), v), f"{name}: from_pretrained {k} differs"
        if noaux(family):
            b = lstate[f"model.layers.{moe_layers(model)[0]}.mlp.gate.e_score_correction_bias"]
            assert b.abs().min() > 0
        if spec.get("mtp"):
            checks.append(f"from_pretrained: no missing keys, unexpected keys only the {len(unexpected_mtp)} of the "
                          f"MTP layer {mtp_prefix}*, every tensor equal"
                          + (" (incl. e_score_correction_bias)" if noaux(family) else "") + extra_load)
        else:
            checks.append("from_pretrained: no missing/unexpected keys, every tensor equal"
                          + (" (incl. e_score_correction_bias)" if noaux(family) else "")
                          + (extra_load if family in ("mixtral", "glm4_moe") else ""))
        reference_model = loaded

    # ---- reference states
    tensors, exact = {}, True
    for i, sample in enumerate(golden):
        ids = torch.tensor(sample["input_ids"], dtype=torch.long)
        states = ctx.capture_states(reference_model, ids)
        if reference_model is not model:
            again = ctx.capture_states(model, ids)
            ctx.assert_close(states, again, f"{name} sample {i}: reloaded vs in-memory model")
            exact &= torch.equal(states, again)
        tensors[f"sample{i}.states"] = states.contiguous()
        tensors[f"sample{i}.input_ids"] = ids.to(torch.int32)
    if reference_model is not model:
        checks.append(f"reloaded==in-memory states {'bit-exact' if exact else 'within 1e-6'}")
    L = model.config.num_hidden_layers
    ctx.save_reference(model_dir, tensors, L)

    # ---- routing margins
    rep = routing_report(model, golden, family)
    assert rep["min_margin"] >= MIN_MARGIN, f"{name}: routing margin {rep['min_margin']:.3g} < {MIN_MARGIN}"
    if noaux(family):
        assert rep["bias_changes"] > 0, f"{name}: e_score_correction_bias never changes the routing"
        if model.config.n_group > model.config.topk_group:
            assert rep["groups_change"] > 0, f"{name}: group masking never changes the routing"
            assert rep["zero_fill_changes"] > 0, f"{name}: masking with 0 instead of -inf never changes the routing"

    # ---- semantics checks that the fixture exercises
    extra = {}
    regimes = yarn_regimes(model.config) if family == "deepseek" else None
    if family == "deepseek":
        rope = model.config.rope_parameters
        rot = model.model.rotary_emb
        extra["attention_factor"] = rot.attention_scaling
        extra["softmax_scale"] = model.model.layers[0].self_attn.scaling
        extra["qk_head_dim^-0.5"] = model.config.qk_head_dim ** -0.5
        if regimes:
            # Our reading of the ramp must reproduce the model's inverse frequencies.
            dim, base, f = model.config.qk_rope_head_dim, rope["rope_theta"], rope["factor"]
            pos = base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
            ex = torch.tensor(regimes[3], dtype=torch.float)
            inv = (1.0 / (f * pos)) * (1 - ex) + (1.0 / pos) * ex
            assert torch.equal(inv, rot.inv_freq), (inv, rot.inv_freq)
        if name == "deepseek_v3":
            assert all(regimes[:3]), f"YaRN regimes (extrapolated, ramped, interpolated) = {regimes[:3]}"
        if name == "kimi_k2":
            assert abs(rot.attention_scaling - 1) > 1e-3, rot.attention_scaling
        # The latent norms' eps (1e-6, transformers' default) must matter where rms_norm_eps differs.
        attn = model.model.layers[0].self_attn
        assert attn.kv_a_layernorm.variance_epsilon == 1e-6
        assert attn.q_a_layernorm is None or attn.q_a_layernorm.variance_epsilon == 1e-6
        if model.config.rms_norm_eps != 1e-6:
            alt = copy.deepcopy(model)
            for layer in alt.model.layers:
                layer.self_attn.kv_a_layernorm.variance_epsilon = model.config.rms_norm_eps
                if layer.self_attn.q_a_layernorm is not None:
                    layer.self_attn.q_a_layernorm.variance_epsilon = model.config.rms_norm_eps
            longest = max(range(len(golden)), key=lambda i: len(golden[i]["input_ids"]))
            diff = (ctx.capture_states(alt, torch.tensor(golden[longest]["input_ids"]))
                    - tensors[f"sample{longest}.states"]).abs().max().item()
            extra["latent_eps_diff"] = diff
            checks.append(f"latent norms with rms_norm_eps instead of 1e-6 change states by {diff:.3g}")
    elif family == "mixtral":
        extra.update(mixtral_checks(model, d, golden, tensors, ctx, checks))
    elif family == "glm4_moe":
        extra.update(glm4_moe_checks(model, d, golden, tensors, ctx, checks))
    else:
        c = model.config
        by_step = [i for i in range(L) if (i + 1) % c.decoder_sparse_step != 0]
        by_list = [i for i in c.mlp_only_layers if (i + 1) % c.decoder_sparse_step == 0]
        assert len(moe_layers(model)) >= 2 and by_step and by_list, (moe_layers(model), by_step, by_list)
        extra["dense_by_step"], extra["dense_by_mlp_only"] = by_step, by_list
        checks.append(f"MoE layers {moe_layers(model)}, dense by step {by_step}, dense by mlp_only_layers {by_list}")

    tp = tp_report(model.config, spec)
    if family in ("mixtral", "glm4_moe"):
        assert not any(tp.values()), f"{name}: must shard at TP {list(TP_SIZES)}: {tp}"
    sizes = {p.name: p.stat().st_size for p in sorted(model_dir.iterdir())}
    checks.append(f"min routing margin {rep['min_margin']:.3g} (group {rep['group_margin']:.3g}, "
                  f"expert {rep['expert_margin']:.3g}) over {rep['tokens']} router calls")
    if noaux(family):
        checks.append(f"bias changes {rep['bias_changes']}, group mask changes {rep['groups_change']}, "
                      f"0-fill would change {rep['zero_fill_changes']}, negative biased scores selected "
                      f"{rep['negative_biased_selected']}")
    checks.append(f"{rep['distinct_sets']} distinct expert sets")
    checks.append("TP " + ", ".join(f"{t}: {'ok' if not w else 'no (' + '; '.join(w) + ')'}" for t, w in tp.items()))
    print(f"  {name}:\n    " + "\n    ".join(checks))
    reloaded = None if reference_model is model else ("bit-identical" if exact else "within 1e-6")
    return dict(describe_moe(name, spec, model, d, rep, sizes, tp, regimes, extra), index=index, reloaded=reloaded)


def make_all(ctx, models_dir, golden, first_index):
    return [make_moe_model(name, first_index + j, models_dir / name, golden, ctx)
            for j, name in enumerate(MOE_MODELS)]


# ----------------------------------------------------------------------------------------------
# README section


def readme_section(descs):
    def fmt_margin(x):
        return "-" if x == float("inf") else f"{x:.3g}"

    rows = []
    for m in descs:
        rows.append(
            f"| `{m['name']}` | {m['arch']} | {m['model_type']} | {m['fmt']} ({m['form']} config) | {m['hidden']} | "
            f"{m['heads']} | {m['q_lora'] if m['q_lora'] is not None else 'null'} | {m['kv_lora']} | {m['dims']} | "
            f"{m['intermediate']} | {m['experts']} | {m['groups']} | {m['shared']} | "
            f"{','.join(map(str, m['dense_layers'])) or 'none'} | {m['eps']:g} | {m['rope']} | {m['quant']} |")
    margin_rows = []
    for m in descs:
        r = m["rep"]
        margin_rows.append(
            f"| `{m['name']}` | {fmt_margin(r['min_margin'])} | {fmt_margin(r['group_margin'])} | "
            f"{fmt_margin(r['expert_margin'])} | {r['tokens']} | {r['distinct_sets']} | "
            + (f"{r['bias_changes']} | {r['groups_change']} | {r['zero_fill_changes']} | {r['negative_biased_selected']} |"
               if m["groups"] != "-" else "- | - | - | - |"))
    tp_rows = []
    for m in descs:
        cells = []
        for t, why in m["tp"].items():
            cells.append("yes" if not why else "no: " + "; ".join(why))
        tp_rows.append(f"| `{m['name']}` | " + " | ".join(cells) + " |")
    size_rows = []
    for m in descs:
        total = sum(m["sizes"].values())
        size_rows.append(f"| `{m['name']}` | {total / 1024:.0f} KiB | "
                         + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in m["sizes"].items()) + " |")
    by = {m["name"]: m for m in descs}
    numbers = ", ".join(f"`{m['name']}` {m['index']}" for m in descs)
    offsets = ", ".join(f"`{n}` {MOE_MODELS[n]['seed_offset']}" for n in MOE_MODELS)
    bias = tuple(MOE_MODELS["deepseek_v3"]["bias"])
    assert all(tuple(spec["bias"]) == bias for spec in MOE_MODELS.values() if noaux(spec["family"]))
    assert all(spec["router_std"] == 0.3 for spec in MOE_MODELS.values())
    dv3, kimi = by["deepseek_v3"], by["kimi_k2"]
    mix, swa, glm = by["mixtral"], by["mixtral_swa"], by["glm4_moe"]
    reloaded = [m for m in descs if m["reloaded"]]
    reloaded_names = ", ".join(f"`{m['name']}`" for m in reloaded[:-1]) + f" and `{reloaded[-1]['name']}`"
    reloaded_how = ("bit-identical to the in-memory one" if all(m["reloaded"] == "bit-identical" for m in reloaded)
                    else "within 1e-6 of the in-memory one")
    glm_cfg = MOE_MODELS["glm4_moe"]["config"]
    yarn_lines = "; ".join(
        f"`{m['name']}` {m['regimes'][0]}/{m['regimes'][1]}/{m['regimes'][2]} "
        f"[{', '.join(f'{e:g}' for e in m['regimes'][3])}], {m['extra']['attention_factor']:.9g}, "
        f"{m['extra']['softmax_scale']:.9g}" for m in descs if m["regimes"])
    return f"""
## MoE / MLA models (`tools/moe_fixtures.py`)

Written by hand from an in-memory transformers model (float32, eager attention, eager experts) in the
**per-expert layout real checkpoints use** (transformers 5 fuses experts in memory as
`mlp.experts.gate_up_proj [E, 2I, H]` / `down_proj [E, H, I]`; the files hold
`mlp.experts.{{e}}.gate_proj.weight [I, H]`, `.up_proj.weight [I, H]`, `.down_proj.weight [H, I]`, `mlp.gate.weight [E, H]`,
`mlp.gate.e_score_correction_bias [E]` (float32), `mlp.shared_experts.{{gate,up,down}}_proj.weight`; the Mixtral
fixtures use Mixtral's own names instead: `block_sparse_moe.gate.weight [E, H]`, `block_sparse_moe.experts.{{e}}.w1.weight`
(gate) `[I, H]`, `.w3.weight` (up) `[I, H]`, `.w2.weight` (down) `[H, I]`, which transformers 5.24 loads through its
`mixtral` conversion mapping: `.block_sparse_moe.` -> `.mlp.`, w1 and w3 stacked and concatenated into
`gate_up_proj`, w2 stacked into `down_proj`). Apart from
the FP8 / INT4 tensors described below and the float32 bias, every tensor is bf16. Model numbers continue the numbering above ({numbers}), so no earlier fixture changed; the weight
seed is SEED+100+n+offset, where the offset ({offsets}) was raised from 0 until every routing margin was >= {MIN_MARGIN:g}
(see below). Router matrices are N(0, 0.3) (wider than the other matrices, so routing depends on the token and
margins stay wide); `e_score_correction_bias` ~ uniform{bias} (transformers initialises it to zero), so many
biased scores are negative and the -inf group masking matters. In-memory parameters are exactly what the files decode to, and the script proves it
tensor by tensor; for {reloaded_names} it also loads the directory with
`AutoModelForCausalLM.from_pretrained` (no missing keys, no unexpected keys except `glm4_moe`'s MTP layer, every
tensor equal, `e_score_correction_bias` loaded) and the reference states come from that model ({reloaded_how}).
`reference.safetensors` has exactly the format described above.

| name | class | model_type | format (config form) | hidden | heads | q_lora | kv_lora | nope/rope/v | dense/moe intermediate | experts/top-k | groups/topk_group | shared | dense layers | rms_norm_eps | RoPE | quantization |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

`qwen3_moe`: 6 layers, `decoder_sparse_step` 2 and `mlp_only_layers` [1]: layers 3 and 5 are MoE; 0, 2, 4 are dense
by the step rule and 1 is dense only because of `mlp_only_layers` (transformers' rule: MoE iff
`layer not in mlp_only_layers and num_experts > 0 and (layer + 1) % decoder_sparse_step == 0`). GQA 4/2 heads,
head_dim 16, q/k norms, softmax routing, `norm_topk_prob` false.

`mixtral` / `mixtral_swa`: `MixtralForCausalLM`, 4 layers, every layer MoE (8 experts, top-2, expert intermediate =
`intermediate_size` {mix['intermediate'].split('/')[1]}; Mixtral has no `moe_intermediate_size`, no dense layer and no shared expert), GQA 4/2 heads,
head_dim 16, no biases, no q/k norms. They differ only in `sliding_window` (null / 8) and in their weights (model
numbers {mix['index']} / {swa['index']}). Three golden samples (19, 61 and 33 tokens) are longer than the window.

`glm4_moe`: `Glm4MoeForCausalLM` (GLM-4.5 / 4.6 architecture), 4 layers: layer 0 dense SwiGLU (intermediate
{glm_cfg['intermediate_size']}), layers 1-3 MoE ({glm_cfg['n_routed_experts']} routed experts of {glm_cfg['moe_intermediate_size']}, top-{glm_cfg['num_experts_per_tok']}, {glm_cfg['n_group']} groups / `topk_group` {glm_cfg['topk_group']}, one shared expert,
`routed_scaling_factor` {glm_cfg['routed_scaling_factor']}, `norm_topk_prob` true); GQA 4/2 heads, head_dim 16, q/k/v biases
(N(0, {glm['extra']['bias_std']:g}), o_proj has none), per-head q/k RMSNorms, `partial_rotary_factor` 0.5 (RoPE on 8 of 16 dims), `num_nextn_predict_layers` 1 with the
multi-token-prediction layer `model.layers.4.*` in the file (see below).

Config forms: `native` = what transformers 5.24 `save_pretrained` writes (`rope_parameters`; for DeepSeek it also
writes `head_dim` = qk_rope_head_dim = 8 and `qk_head_dim` = 24 -- `head_dim` is NOT the attention head size);
`classic` = the same with top-level `rope_theta` + `rope_scaling` (null for default RoPE; for `qwen3_moe` also the
Hub key `num_experts`, which transformers 5 would write as its alias `num_local_experts`); `real` = the key set of
a real DeepSeek-V3 / Kimi-K2 config.json (`rope_scaling` with `"type": "yarn"`, `topk_method` "noaux_tc",
`scoring_func` "sigmoid", `torch_dtype`, no `rope_interleave` key: absent means interleaved, transformers' default).
`mixtral`, `mixtral_swa` and `glm4_moe` are `classic` (top-level `rope_theta` 1e6, `rope_scaling` null; `glm4_moe`
also has the top-level `partial_rotary_factor` 0.5 where GLM-4.5's config.json has it, and no `rope_parameters`;
`sliding_window` is written for both Mixtral fixtures, null or 8, as in real Mixtral configs).

- `kimi_k2`: `architectures` ["DeepseekV3ForCausalLM"], `model_type` "kimi_k2" (transformers does not register it;
  the reference is a DeepseekV3 model built from this config), n_group 1, `num_nextn_predict_layers` 1 and the
  multi-token-prediction layer `model.layers.4.*` is in the file (random values, DeepSeek MTP layout: `enorm`,
  `hnorm`, `eh_proj [H, 2H]`, `embed_tokens`, `shared_head.norm`, `shared_head.head` and a full MoE decoder layer).
  It is not part of the model: a loader must never read it. YaRN with Kimi's beta_fast = beta_slow = 1 and
  mscale 0.707 != mscale_all_dim 1.0, so the cos/sin attention factor is {kimi['extra']['attention_factor']:.6g} (not 1).
- `glm4_moe`: `num_nextn_predict_layers` 1 and the multi-token-prediction layer `model.layers.4.*` is in the file
  (random values, the GLM-4.5 MTP layout, the same as DeepSeek's: `eh_proj [H, 2H]`, `enorm`, `hnorm`,
  `shared_head.norm`, `embed_tokens`, `shared_head.head` and a full MoE decoder layer with biases, q/k norms, router,
  `e_score_correction_bias`, 16 experts and the shared expert), with `embed_tokens` and `shared_head.head` as
  GLM-4.5 and GLM-4.5-Air checkpoints have them (GLM-4.6's omit those two). transformers 5.24 has no MTP module for
  GLM: `from_pretrained` reports `model.layers.4.*` as unexpected keys (its `_keys_to_ignore_on_load_unexpected` only
  names layers 46 and 92, the MTP layers of the real GLM-4.5-Air and GLM-4.5). It is not part of the model and not part
  of the reference states (L = 4): a loader must never read it.
- `kimi_k25_int4`: Kimi-K2.5 wrapper: `architectures` ["KimiK25ForConditionalGeneration"], `model_type` "kimi_k25",
  `media_placeholder_token_id` {MEDIA_PLACEHOLDER_TOKEN_ID}, a small `vision_config`, and `text_config` (model_type
  "kimi_k2") holding the DeepSeek-V3 text config and the `quantization_config`: compressed-tensors
  `pack-quantized`, int4 symmetric, `strategy` group, `group_size` {INT4_GROUP}, `targets` ["Linear"], ignore list
  as Kimi-K2.5 / K3 write it (`re:.*self_attn.*`, `re:.*shared_experts.*`, `re:.*mlp\\.(gate|up|gate_up|down)_proj.*`,
  `re:.*lm_head.*`, `re:.*vision_tower.*`, `re:.*mm_projector.*`), so only routed experts are int4 (the script checks
  this with compressed-tensors' own `is_match` over every Linear of the file; the router `mlp.gate` is not a Linear).
  Tensors are prefixed `language_model.` (`language_model.model.embed_tokens.weight`, `language_model.model.layers.N.*`,
  `language_model.model.norm.weight`, `language_model.lm_head.weight`) next to dummy `vision_tower.*` / `mm_projector.*`
  tensors, in two shards with `model.safetensors.index.json`. A routed expert Linear is stored as `X.weight_packed`
  int32 `[out, in/8]` (8 nibbles per word, element j at bits 4*(j%8), value = nibble - 8), `X.weight_scale` bf16
  `[out, in/32]`, `X.weight_shape` int64 `[2]` = [out, in], exactly as `PackedQuantizationCompressor` writes them
  (scales from compressed-tensors' `calculate_qparams`: amax/7.5 in bf16; some nibbles are -8). Decoded value =
  `bf16(q * scale)` (what the library's decompress returns), then float32. moe_intermediate 64 and hidden 64, so
  gate/up (in = 64) and down (in = 64) have 2 groups per row.
- `deepseek_v3_fp8`: DeepSeek FP8 checkpoint: top-level `quantization_config` {json.dumps(FP8_QUANT_CONFIG)};
  every Linear of the decoder layers (q_a, q_b, kv_a_proj_with_mqa, kv_b, o, dense/shared/routed gate/up/down) is
  `X.weight` float8_e4m3fn + `X.weight_scale_inv` float32 `[ceil(out/16), ceil(in/8)]` (block = 16 rows x 8 columns;
  scale_inv = block amax / 448). Router `mlp.gate.weight` bf16, `e_score_correction_bias` float32, norms, embeddings,
  `lm_head` bf16. Decoded value = `float32(fp8) * scale_inv[row // 16, col // 8]` in float32 (edge blocks are partial:
  hidden 72 = 4.5 row blocks, q_lora 36, kv_lora 28, kv_a out 36). The reference uses these values, computed by our
  own code, not transformers' FP8 loader.

Routing margins (smallest over every token of every golden sample, run one sample at a time, every MoE layer;
DeepSeek and GLM-4.5 (the same noaux_tc router): group margin = topk_group-th minus next group score, expert
margin = k-th selected minus best unselected biased score after group masking; Qwen3-MoE and Mixtral: k-th minus
(k+1)-th softmax probability). Required >= {MIN_MARGIN:g}.
"changes" columns count router calls (tokens x MoE layers) whose expert set would differ without the bias, without
group masking, or with non-selected groups masked to 0 instead of -inf; "negative" counts selected experts whose
biased score is negative.

| name | min margin | group margin | expert margin | router calls | distinct expert sets | bias changes | group mask changes | 0-fill changes | negative selected |
|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(margin_rows)}

Tensor-parallel sizes the shapes allow (heads, kv heads (GQA: split, or each replicated on TP / kv ranks), whole
experts, dense / moe / shared intermediate (Mixtral: its expert `intermediate_size`); FP8:
per-rank q_b and kv_b rows multiple of 16, o_proj columns multiple of 8, intermediate slices multiple of 16 and 8;
INT4: down_proj input slices whole 32-groups if experts were sliced along the intermediate size):

| name | TP 1 | TP 2 | TP 4 |
|---|---|---|---|
{chr(10).join(tp_rows)}

Sizes:

| name | total | files |
|---|---|---|
{chr(10).join(size_rows)}

Semantics the MoE/MLA references follow (checked in transformers 5.24 `modeling_deepseek_v3.py`,
`modeling_rope_utils.py`, `qwen3_moe/modeling_qwen3_moe.py`, `mixtral/modeling_mixtral.py`,
`glm4_moe/modeling_glm4_moe.py` and `configuration_glm4_moe.py`, `masking_utils.py`; several are asserted by the
script). Reference states of every fixture here have the layout above, `[L+2, T, H]` with L = `num_hidden_layers`
(4 for `mixtral`, `mixtral_swa`, `glm4_moe`; MTP layers are never part of it):

- MLA: `q = q_b_proj(q_a_layernorm(q_a_proj(x)))` (or `q_proj(x)` when `q_lora_rank` is null), viewed as
  [heads, nope + rope]; `kv_a_proj_with_mqa(x)` splits into [kv_lora_rank | rope]; the first part goes through
  `kv_a_layernorm`, then `kv_b_proj` gives per head [nope | v] (k_nope and value); the rope part is one key shared by
  all heads. `q_a_layernorm` and `kv_a_layernorm` are `DeepseekV3RMSNorm(dim)` with transformers' default
  **eps 1e-6, not `rms_norm_eps`** (only input/post-attention/final norms use `rms_norm_eps`). `deepseek_v3` has
  `rms_norm_eps` 1e-3 so this is visible: using 1e-3 in the latent norms changes its states by up to
  {dv3['extra'].get('latent_eps_diff', float('nan')):.3g}. RMSNorm = `w * (x * rsqrt(mean(x^2) + eps))` in float32.
- RoPE covers only the `qk_rope_head_dim` part (transformers sets `head_dim` = qk_rope_head_dim). Query/key
  = concat(nope, rope) (nope first). With `rope_interleave` true (the default; absent in real configs) the rope dims
  are consecutive pairs (x0, x1), (x2, x3), ... rotated by frequency i = pair index and the result is written
  de-interleaved: `cat(x_even*cos - x_odd*sin, x_odd*cos + x_even*sin)` -- equal to de-interleaving q_rot/k_rot,
  then `rotate_half`. Since q and k get the same permutation the scores equal the interleaved-output form.
  `deepseek_v3_noqlora` has `rope_interleave` false: plain `rotate_half` halves.
- Softmax scale = `(nope + rope) ** -0.5`, times `mscale^2` with `mscale = 0.1 * mscale_all_dim * ln(factor) + 1`
  when RoPE is not default and `mscale_all_dim` is set and non-zero (and factor > 1). `deepseek_v3`:
  {dv3['extra']['softmax_scale']:.9g} (plain {dv3['extra']['qk_head_dim^-0.5']:.9g}).
- YaRN (transformers `_compute_yarn_parameters`, dim = qk_rope_head_dim, `truncate` default true):
  `low = max(floor(d(beta_fast)), 0)`, `high = min(ceil(d(beta_slow)), dim - 1)` with
  `d(r) = dim * ln(orig_max_pos / (2 pi r)) / (2 ln theta)`; `ramp_i = clamp((i - low) / (high - low), 0, 1)`
  (high += 0.001 if equal); `inv_freq_i = (1 - ramp_i) * theta^(-2i/dim) + ramp_i * theta^(-2i/dim) / factor`
  (i = 0 .. dim/2 - 1: low i extrapolated = unscaled, high i interpolated = divided by factor). cos/sin are multiplied by the attention factor
  `get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)` when both are set (non-zero), else
  `get_mscale(factor)` (= 0.1 ln(factor) + 1). Per fixture (extrapolated / ramped / interpolated frequencies, ramp
  weights 1 - ramp_i, attention factor, softmax scale): {yarn_lines}.
  `max_position_embeddings` is not used when `factor` is given.
- DeepSeek router (`DeepseekV3TopkRouter`, float32): `s = sigmoid(x @ W^T)`, `b = s + e_score_correction_bias`;
  group score = sum of the top-2 `b` in each of `n_group` contiguous groups; keep the `topk_group` best groups;
  non-selected groups' `b` are set to **-inf** (`masked_fill`); top-k experts by masked `b`; weights = the
  **unbiased** `s` of the chosen experts, divided by their sum (+1e-20) if `norm_topk_prob`, then times
  `routed_scaling_factor` (also when `norm_topk_prob` is false). Output = routed sum + shared expert(x) (shared =
  SwiGLU with intermediate `moe_intermediate_size * n_shared_experts`, not scaled). Layers `< first_k_dense_replace`
  are dense SwiGLU with `intermediate_size`.
- Qwen3-MoE router: logits `x @ W^T` in the model dtype (float32 here), `p = softmax` in float32, top-k of p, renormalised only if `norm_topk_prob`
  (false here), no scaling factor, no shared expert.
- Mixtral router (`MixtralTopKRouter`): logits `x @ W^T` in the model dtype (float32 here; a bf16 run would compute
  them in bf16 -- Mixtral's router weight loads as bf16, unlike GLM's), `p = softmax(logits.float())` over all 8
  experts, top-2 of p, **always** divided by their sum (no `norm_topk_prob` key; = softmax over the two selected
  logits, asserted), no scaling factor, no shared expert. Mixtral attention: GQA, no biases, no q/k norms,
  `rotate_half` RoPE over the whole head_dim, scale `head_dim ** -0.5`.
- Sliding window (Mixtral, `create_sliding_window_causal_mask` when `sliding_window` is not null): a query at
  position i attends to keys i-W+1 .. i (W keys including itself; mask `q - W < kv <= q`). The script proves it on
  `mixtral_swa` (W = 8): changing the token at t-8 leaves layer 0's output at t = 20 unchanged, changing the token
  at t-7 changes it; with `sliding_window` null (`mixtral`) the token at t-8 matters. Dropping `mixtral_swa`'s
  window changes its states by up to {swa['extra']['no_window_diff']:.3g}.
- GLM-4.5 attention (`Glm4MoeAttention`): q/k/v = Linear **with bias** (`attention_bias` true; `o_proj` never has
  one), viewed as [T, heads, head_dim]; `q_norm` / `k_norm` = RMSNorm over each head's head_dim with `rms_norm_eps`,
  applied **before** RoPE (when `use_qk_norm`); partial RoPE: `rotary_dim = int(head_dim * partial_rotary_factor)`
  = 8; `rotate_half` on the first 8 dims of each head only (pairs (j, j+4), inv_freq_j = theta^(-2j/8), j = 0..3), dims
  8..15 pass through unchanged; softmax scale `head_dim ** -0.5` with the full head_dim 16. `head_dim` comes from
  config.json (`getattr(config, "head_dim", hidden / heads)`). The rotary embedding reads `partial_rotary_factor`
  from `config.rope_parameters`; transformers moves the top-level `partial_rotary_factor` and `rope_theta` of
  config.json there (`convert_rope_params_to_dict`). Absent from config.json, `partial_rotary_factor` defaults to
  **0.5** for glm4_moe (`Glm4MoeConfig.__post_init__`), not 1.0, and `rope_theta` to 10000. Asserted: the model's
  inv_freq has 4 entries; with `partial_rotary_factor` 1.0 states change by up to
  {glm['extra']['full_rotary_diff']:.3g}, without the q/k/v biases by up to {glm['extra']['no_bias_diff']:.3g}, without the q/k norms by up to
  {glm['extra']['no_qk_norm_diff']:.3g}, with `routed_scaling_factor` 1 by up to {glm['extra']['no_scaling_diff']:.3g}.
- GLM-4.5 router (`Glm4MoeTopkRouter`): the DeepSeek noaux_tc router above, line for line (float32 logits
  `x.float() @ W.float()^T`, sigmoid, bias for the choice only, group score = top-2 sum, -inf masking, unbiased
  weights / (sum + 1e-20), times `routed_scaling_factor`); the MoE block adds the shared expert (intermediate
  `moe_intermediate_size * n_shared_experts`, unscaled); layers `< first_k_dense_replace` are dense with
  `intermediate_size`. `_keep_in_fp32_modules_strict` = ["e_score_correction_bias", "gate.weight"]: loaded with
  `dtype="auto"` the router weight and bias stay float32 (the file's router weight is bf16, its values exact in
  float32).
- Experts: SwiGLU `down(silu(gate(x)) * up(x))`, each scaled by its routing weight and summed.
"""
