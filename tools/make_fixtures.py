#!/usr/bin/env python3
"""Generate the golden-test fixtures of layertap (tiny random HF models + reference states).

Writes, under --out (default tests/fixtures):
  models/<name>/         tiny random-weight causal LMs saved with save_pretrained (safetensors),
                         plus reference.safetensors with the per-layer hidden states of every
                         golden sample, computed by transformers in float32 (eager attention);
  data/golden.jsonl      5 short samples used by the golden tests;
  data/demo.jsonl        200 longer samples for the README demo run;
  VERSIONS.json, README.md.

Run:  /opt/layertap-pyenv/bin/python tools/make_fixtures.py
      (the environment of tools/python_env.sh, plus compressed-tensors at the version in VERSIONS.json)
Deterministic (fixed seeds, single CPU thread) and idempotent (models/ and data/ are wiped first).

      /opt/layertap-pyenv/bin/python tools/make_fixtures.py --only NAME [NAME ...]
generates everything in a temporary directory, then replaces only models/NAME, README.md and VERSIONS.json
under --out: use it to add a fixture without touching the committed ones (float32 references of the dense
models differ in the last bits when regenerated on another CPU). It lists the other files that came out
different from the ones it kept.
"""

import argparse
import copy
import json
import math
import platform
import random
import shutil
import sys
import tempfile
from pathlib import Path

import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

SEED = 1234
VOCAB = 160  # every model accepts token ids < VOCAB
MAX_TOKEN_ID = 150  # dataset ids are drawn from [0, MAX_TOKEN_ID)
MAX_POS = 512
WEIGHT_STD = 0.08  # std of every matrix (also written as initializer_range)
BIAS_STD = 0.1  # biases default to zero; randomized so a dropped bias is visible
NORM_STD = 0.1  # RMSNorm weights = 1 + NORM_STD * randn (Gemma, whose norms multiply by 1 + w: w = NORM_STD * randn)
GOLDEN_LENGTHS = [19, 1, 61, 7, 33]  # line order of data/golden.jsonl
GOLDEN_NO_LOSS_MASK = 3  # this golden line omits "loss_mask"
GOLDEN_NO_ID = 4  # this golden line omits "id"
DEMO_SAMPLES = 200
DEMO_LENGTHS = (16, 256)

# Common shape arguments: hidden sizes are not powers of two, GQA everywhere.
COMMON = dict(vocab_size=VOCAB, max_position_embeddings=MAX_POS, initializer_range=WEIGHT_STD,
              bos_token_id=1, eos_token_id=2, pad_token_id=None)

# name -> (model class, config, dtype the checkpoint is saved in, config.json RoPE form, save kwargs)
# RoPE form "classic": config.json gets top-level `rope_theta` + `rope_scaling` like real Hub
# checkpoints; "native": whatever this transformers version writes (`rope_parameters`).
MODELS = {
    "llama": (
        LlamaForCausalLM,
        LlamaConfig(hidden_size=72, intermediate_size=100, num_hidden_layers=4,
                    num_attention_heads=6, num_key_value_heads=2, rms_norm_eps=1e-5,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                    tie_word_embeddings=False, **COMMON),
        torch.float32, "classic", {},
    ),
    "llama3_rope": (
        LlamaForCausalLM,
        # head_dim 14, theta 5e5, original_max_position_embeddings 64: inverse-frequency index 0 is
        # in the high-frequency band (kept), index 1 in the smoothed band, 2..6 in the low band (/8).
        LlamaConfig(hidden_size=56, intermediate_size=90, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=2e-5,
                    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 64},
                    tie_word_embeddings=False, **COMMON),
        torch.float32, "classic", {},
    ),
    "mistral": (
        MistralForCausalLM,
        MistralConfig(hidden_size=80, intermediate_size=98, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      sliding_window=8, tie_word_embeddings=False, **COMMON),
        torch.float16, "classic", {},
    ),
    "qwen2": (
        Qwen2ForCausalLM,
        Qwen2Config(hidden_size=60, intermediate_size=100, num_hidden_layers=4,
                    num_attention_heads=6, num_key_value_heads=2, rms_norm_eps=1e-5,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                    tie_word_embeddings=True, **COMMON),
        torch.float32, "native", {},
    ),
    "qwen3": (
        Qwen3ForCausalLM,
        Qwen3Config(hidden_size=72, intermediate_size=108, num_hidden_layers=4, head_dim=16,
                    num_attention_heads=6, num_key_value_heads=2, rms_norm_eps=1e-4,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                    tie_word_embeddings=False, **COMMON),
        torch.bfloat16, "native", {"max_shard_size": "100KB"},
    ),
    # Appended last so the per-model seeds (SEED + n, SEED + 100 + n) of the models above are unchanged.
    "llama_tp": (
        LlamaForCausalLM,
        # For tensor-parallel tests at TP = 1, 2, 4: q heads 8 and intermediate 112 split evenly;
        # kv heads 2 < 4, so TP 4 must replicate each key/value head on two ranks.
        LlamaConfig(hidden_size=64, intermediate_size=112, num_hidden_layers=4, head_dim=8,
                    num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-5,
                    rope_parameters={"rope_type": "default", "rope_theta": 20000.0},
                    tie_word_embeddings=False, **COMMON),
        torch.float32, "classic", {},
    ),
}

# Numbered after the MoE fixtures of tools/moe_fixtures.py (model number len(MODELS) + len(MOE_MODELS) + j), so no
# earlier fixture's seeds change. Same tuple layout as MODELS; RoPE form "gemma_classic": config.json as the
# google/gemma-3-* text checkpoints write it (top-level rope_theta (global), rope_local_base_freq, rope_scaling
# (global layers only), sliding_window_pattern, and layer_types as newer Hub revisions list them).
LATE_MODELS = {
    "gemma3": (
        Gemma3ForCausalLM,
        # Text-only Gemma-3 (model_type gemma3_text, as google/gemma-3-1b-it ships it). head_dim 24 != hidden/heads
        # = 16 and query_pre_attn_scalar 20 != head_dim, so the score scale 20^-0.5 is visible; one kv head
        # (replicated at TP 2 and 4, like the real 1b); layers 0-4 sliding (window 8, local RoPE base 1e4),
        # layer 5 full (theta 1e6, linear scaling x8 as gemma-3-4b and larger have).
        Gemma3TextConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=6, head_dim=24,
                         num_attention_heads=4, num_key_value_heads=1, query_pre_attn_scalar=20,
                         hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, sliding_window=8,
                         sliding_window_pattern=6,
                         layer_types=["sliding_attention"] * 5 + ["full_attention"],
                         rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                          "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                             "rope_theta": 1000000.0}},
                         attn_logit_softcapping=None, final_logit_softcapping=None,
                         tie_word_embeddings=True, **COMMON),
        torch.bfloat16, "gemma_classic", {},
    ),
}
ONE_PLUS_W_NORMS = ("gemma3_text",)  # model types whose RMSNorm multiplies by (1 + weight)
TP_SIZES = (1, 2, 4)  # llama_tp and gemma3 must shard at each of these
TP_FIXTURES = ("llama_tp", "gemma3")


def randomize_weights(model, seed, norm_offset=1.0):
    """Re-initialize every parameter from a seeded generator (matrices N(0, WEIGHT_STD),
    biases N(0, BIAS_STD), RMSNorm weights norm_offset + N(0, NORM_STD): 1 + ..., or 0 + ... for norms that
    multiply by 1 + weight (Gemma))."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied parameters are listed once
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(BIAS_STD * noise)
            elif p.dim() == 1:  # every 1-D weight of these models is an RMSNorm weight
                assert "norm" in name, name
                p.copy_(norm_offset + NORM_STD * noise)
            else:
                p.copy_(WEIGHT_STD * noise)


def to_classic_rope(config_path):
    """Rewrite config.json with top-level `rope_theta` / `rope_scaling` instead of `rope_parameters`."""
    cfg = json.loads(config_path.read_text())
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
    config_path.write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")


def to_gemma_classic_rope(config_path):
    """Rewrite a Gemma-3 text config.json the way google/gemma-3-* checkpoints write it: top-level `rope_theta`
    (full-attention layers), `rope_local_base_freq` (sliding layers), `rope_scaling` (full-attention layers only;
    null when default), `sliding_window_pattern` (transformers 5.24 would write its private `_sliding_window_pattern`),
    `layer_types` kept; no `rope_parameters`, no `use_bidirectional_attention` (absent = false)."""
    cfg = json.loads(config_path.read_text())
    rope = cfg.pop("rope_parameters")
    full, local = dict(rope["full_attention"]), dict(rope["sliding_attention"])
    assert local.get("rope_type") == "default" and set(local) == {"rope_type", "rope_theta"}, local
    cfg["rope_theta"] = full.pop("rope_theta")
    cfg["rope_local_base_freq"] = local["rope_theta"]
    cfg["rope_scaling"] = None if full.get("rope_type", "default") == "default" else full
    pattern = cfg.pop("_sliding_window_pattern")
    cfg["sliding_window_pattern"] = pattern
    assert cfg["layer_types"] == ["sliding_attention" if (i + 1) % pattern else "full_attention"
                                  for i in range(cfg["num_hidden_layers"])], (cfg["layer_types"], pattern)
    assert cfg.pop("use_bidirectional_attention") is False
    config_path.write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")


def capture_states(model, input_ids, text=None):
    """Run one sample; return float32 [L+2, T, H]: inputs of layers 0..L-1, output of layer L-1,
    output of the final norm. Asserts agreement with output_hidden_states where they overlap.
    `text`: the decoder (default model.model; a multimodal wrapper's text model)."""
    text = model.model if text is None else text
    layers = text.layers
    n = len(layers)
    captured = {}

    def pre_hook(k):
        def hook(module, args, kwargs):
            captured[k] = (args[0] if args else kwargs["hidden_states"]).detach().clone()
        return hook

    def last_layer_hook(module, args, kwargs, output):
        captured[n] = (output[0] if isinstance(output, tuple) else output).detach().clone()

    def norm_hook(module, args, output):
        captured[n + 1] = output.detach().clone()

    handles = [layers[k].register_forward_pre_hook(pre_hook(k), with_kwargs=True) for k in range(n)]
    handles.append(layers[n - 1].register_forward_hook(last_layer_hook, with_kwargs=True))
    handles.append(text.norm.register_forward_hook(norm_hook))
    try:
        with torch.no_grad():
            out = model(input_ids=input_ids[None, :], output_hidden_states=True, use_cache=False)
    finally:
        for h in handles:
            h.remove()

    hs = out.hidden_states
    assert len(hs) == n + 1, len(hs)
    for k in range(n):
        assert_close(captured[k], hs[k], f"layer {k} input vs hidden_states[{k}]")
    assert_close(captured[n + 1], hs[n], f"final norm vs hidden_states[{n}]")
    states = torch.stack([captured[k][0] for k in range(n + 2)])
    assert states.dtype == torch.float32
    assert torch.isfinite(states).all()
    return states


def save_reference(model_dir, tensors, n_layers):
    """reference.safetensors: the golden samples' states [L+2, T, H] and ids, with their layout."""
    # One metadata key only: safetensors does not keep the order of several, which would make the
    # file bytes differ between runs.
    layout = (f"sample<i>.states[k]: k<{n_layers} input of decoder layer k; k={n_layers} output of "
              f"last layer (pre final norm); k={n_layers + 1} after final norm; sample<i>.input_ids int32")
    save_file(tensors, model_dir / "reference.safetensors", metadata={"layout": layout})


def load_reference(model_dir):
    """A fixture's reference.safetensors, as save_reference wrote it."""
    return load_file(model_dir / "reference.safetensors")


def states_diff(model, golden, tensors):
    """Largest |difference| from the references over the longest golden sample."""
    longest = max(range(len(golden)), key=lambda i: len(golden[i]["input_ids"]))
    return (capture_states(model, torch.tensor(golden[longest]["input_ids"]))
            - tensors[f"sample{longest}.states"]).abs().max().item()


def assert_close(a, b, what, tol=1e-6):
    diff = (a.float() - b.float()).abs().max().item() if a.numel() else 0.0
    assert a.shape == b.shape and diff <= tol, f"{what}: shape {a.shape} vs {b.shape}, max diff {diff}"


def make_data(data_dir, rng):
    data_dir.mkdir(parents=True)
    golden = []
    for i, length in enumerate(GOLDEN_LENGTHS):
        sample = {}
        if i != GOLDEN_NO_ID:
            sample["id"] = f"golden-{i}"
        sample["input_ids"] = [rng.randrange(MAX_TOKEN_ID) for _ in range(length)]
        if i != GOLDEN_NO_LOSS_MASK:
            sample["loss_mask"] = [rng.randrange(2) for _ in range(length)]
        golden.append(sample)
    write_jsonl(data_dir / "golden.jsonl", golden)

    demo = []
    for i in range(DEMO_SAMPLES):
        length = rng.randint(*DEMO_LENGTHS)
        prompt = rng.randint(1, length - 1)  # prompt tokens masked out, response tokens kept
        demo.append({"id": f"demo-{i:03d}",
                     "input_ids": [rng.randrange(MAX_TOKEN_ID) for _ in range(length)],
                     "loss_mask": [0] * prompt + [1] * (length - prompt)})
    write_jsonl(data_dir / "demo.jsonl", demo)
    return golden


def write_jsonl(path, rows):
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def llama3_bands(cfg):
    """Count inverse frequencies in the (high, medium, low) bands of llama3 RoPE scaling."""
    rope = cfg.rope_parameters
    dim = cfg.head_dim
    wavelens = [2 * math.pi * rope["rope_theta"] ** (i / dim) for i in range(0, dim, 2)]
    old = rope["original_max_position_embeddings"]
    high, low = old / rope["high_freq_factor"], old / rope["low_freq_factor"]
    return (sum(w < high for w in wavelens), sum(high <= w <= low for w in wavelens),
            sum(w > low for w in wavelens))


def make_model(name, index, model_dir, golden):
    cls, config, save_dtype, rope_form, save_kwargs = MODELS[name] if name in MODELS else LATE_MODELS[name]
    torch.manual_seed(SEED + index)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    randomize_weights(model, SEED + 100 + index, 0.0 if config.model_type in ONE_PLUS_W_NORMS else 1.0)
    with torch.no_grad():  # round the weights to the checkpoint dtype, keep computing in float32
        for p in model.parameters():
            p.copy_(p.to(save_dtype))
    # Cast a copy for saving: casting `model` itself would also round its RoPE inv_freq buffer.
    to_save = copy.deepcopy(model).to(save_dtype)
    to_save.config.dtype = save_dtype
    to_save.save_pretrained(model_dir, safe_serialization=True, **save_kwargs)
    if rope_form == "classic":
        to_classic_rope(model_dir / "config.json")
    elif rope_form == "gemma_classic":
        to_gemma_classic_rope(model_dir / "config.json")
    in_memory = model  # same rounded weights, config as built in memory

    # The reference comes from the checkpoint as saved: load it in its own dtype, then .float().
    loaded = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto", attn_implementation="eager")
    assert type(loaded) is cls, type(loaded)
    assert all(p.dtype == save_dtype for p in loaded.parameters()), f"{name}: not loaded as {save_dtype}"
    loaded = loaded.float().eval()
    with torch.no_grad():
        # float32 checkpoints stay memory-mapped at unaligned file offsets, and CPU BLAS rounding
        # (seen for T=1 matrix-vector products) depends on alignment; use fresh aligned copies.
        for p in loaded.parameters():
            p.data = p.data.clone()
    assert loaded.config.rope_parameters == in_memory.config.rope_parameters, (
        loaded.config.rope_parameters, in_memory.config.rope_parameters)

    tensors, exact = {}, True
    for i, sample in enumerate(golden):
        ids = torch.tensor(sample["input_ids"], dtype=torch.long)
        states = capture_states(loaded, ids)
        again = capture_states(in_memory, ids)  # checks the saved config (e.g. classic RoPE) reloads identically
        assert_close(states, again, f"{name} sample {i}: reloaded vs in-memory model")
        exact &= torch.equal(states, again)
        tensors[f"sample{i}.states"] = states.contiguous()
        tensors[f"sample{i}.input_ids"] = ids.to(torch.int32)
    save_reference(model_dir, tensors, loaded.config.num_hidden_layers)

    checks, extra = [f"reloaded==in-memory {'bit-exact' if exact else 'within 1e-6'}"], {}
    if name == "llama3_rope":
        bands = llama3_bands(loaded.config)
        assert all(bands), f"llama3 bands (high, medium, low) = {bands}"
        checks.append(f"llama3 bands (high, medium, low) = {bands}")
    if loaded.config.model_type == "mistral":
        # The window must matter for samples longer than it.
        no_window = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype="auto", attn_implementation="eager", sliding_window=None).float().eval()
        longest = max(range(len(golden)), key=lambda i: len(golden[i]["input_ids"]))
        ids = torch.tensor(golden[longest]["input_ids"])
        diff = (capture_states(no_window, ids) - tensors[f"sample{longest}.states"]).abs().max().item()
        assert diff > 1e-3, diff
        checks.append(f"sliding window changes states (max diff without it {diff:.3g})")
    if loaded.config.model_type == "gemma3_text":
        extra = gemma3_checks(loaded, model_dir, golden, tensors, checks)
    if name in TP_FIXTURES:
        c = loaded.config
        for tp in TP_SIZES:
            assert c.num_attention_heads % tp == 0 and c.intermediate_size % tp == 0, tp
            assert c.num_key_value_heads % tp == 0 or tp % c.num_key_value_heads == 0, tp
        assert c.num_key_value_heads < max(TP_SIZES), "no kv-head replication to test"
        checks.append(f"q heads {c.num_attention_heads}, kv heads {c.num_key_value_heads}, "
                      f"intermediate {c.intermediate_size} shard at TP {list(TP_SIZES)}")
    if save_kwargs.get("max_shard_size"):
        shards = sorted(model_dir.glob("model-*.safetensors"))
        assert (model_dir / "model.safetensors.index.json").exists() and len(shards) >= 3, shards
        checks.append(f"{len(shards)} shards")
    print(f"  {name}: " + "; ".join(checks))
    return dict(describe(name, model_dir, save_dtype), index=index, extra=extra)


def gemma3_reimplementation(model, cfg, ids):
    """Gemma-3 text forward written out from config.json (classic keys) and the model's parameters, in float32,
    independent of transformers' modules; returns states [L+2, T, H] in the reference layout."""
    m = model.model
    H, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    T, W, eps = len(ids), cfg["sliding_window"], cfg["rms_norm_eps"]

    def norm(mod, x):  # Gemma RMSNorm: float32, times (1 + weight)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + mod.weight)

    def rope_tables(theta, factor):  # rotate_half RoPE; linear scaling divides every inverse frequency by factor
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)) / factor
        ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
        ang = torch.cat((ang, ang), -1)[:, None, :]
        return ang.cos(), ang.sin()

    def rotate(x, cos, sin):
        return x * cos + torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), -1) * sin

    scaling = cfg["rope_scaling"]
    assert scaling is None or scaling["rope_type"] == "linear", scaling
    tables = {"sliding_attention": rope_tables(cfg["rope_local_base_freq"], 1.0),
              "full_attention": rope_tables(cfg["rope_theta"], scaling["factor"] if scaling else 1.0)}
    qi, ki = torch.arange(T)[:, None], torch.arange(T)[None, :]
    masks = {"full_attention": ki <= qi, "sliding_attention": (ki <= qi) & (ki > qi - W)}  # keys i-W+1 .. i
    x = m.embed_tokens.weight[ids] * torch.tensor(H ** 0.5, dtype=torch.float32)
    states = [x]
    for layer, kind in zip(m.layers, cfg["layer_types"], strict=True):
        a, mlp = layer.self_attn, layer.mlp
        h = norm(layer.input_layernorm, x)
        q = norm(a.q_norm, (h @ a.q_proj.weight.T).view(T, nh, hd))
        k = norm(a.k_norm, (h @ a.k_proj.weight.T).view(T, nkv, hd))
        v = (h @ a.v_proj.weight.T).view(T, nkv, hd)
        q, k = rotate(q, *tables[kind]), rotate(k, *tables[kind])
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * cfg["query_pre_attn_scalar"] ** -0.5
        probs = scores.masked_fill(~masks[kind], float("-inf")).softmax(-1)
        o = torch.einsum("hqk,khd->qhd", probs, v).reshape(T, nh * hd) @ a.o_proj.weight.T
        x = x + norm(layer.post_attention_layernorm, o)  # residual adds the post-attention-normed output
        f = norm(layer.pre_feedforward_layernorm, x)
        f = (torch.nn.functional.gelu(f @ mlp.gate_proj.weight.T, approximate="tanh")
             * (f @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T
        x = x + norm(layer.post_feedforward_layernorm, f)
        states.append(x)
    states.append(norm(m.norm, x))
    return torch.stack(states)


def gemma3_checks(model, model_dir, golden, tensors, checks):
    """Gemma-3 semantics the reference must show (asserted) and how much each feature moves the states."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    cfg = json.loads((model_dir / "config.json").read_text())
    c, m, extra = model.config, model.model, {}
    W, L, kinds = c.sliding_window, c.num_hidden_layers, c.layer_types
    # transformers 5.24 turns the classic keys into per-layer-type rope_parameters (Gemma3TextConfig
    # .convert_rope_params_to_dict): rope_scaling goes to full_attention only, rope_theta is the full layers' theta,
    # rope_local_base_freq the sliding layers' theta (default RoPE, unscaled).
    want = {"full_attention": {**cfg["rope_scaling"], "rope_theta": cfg["rope_theta"]},
            "sliding_attention": {"rope_type": "default", "rope_theta": cfg["rope_local_base_freq"]}}
    assert c.rope_parameters == want, c.rope_parameters
    extra["rope_parameters"] = c.rope_parameters
    hd = c.head_dim
    plain = lambda theta: 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    assert torch.equal(m.rotary_emb.sliding_attention_inv_freq, plain(cfg["rope_local_base_freq"]))
    assert torch.equal(m.rotary_emb.full_attention_inv_freq, plain(cfg["rope_theta"]) / cfg["rope_scaling"]["factor"])
    assert kinds == cfg["layer_types"] and [l.self_attn.sliding_window for l in m.layers] == [
        W if k == "sliding_attention" else None for k in kinds]
    attn = m.layers[0].self_attn
    assert attn.head_dim == hd == 24 and attn.scaling == c.query_pre_attn_scalar ** -0.5 and hd ** -0.5 != attn.scaling
    assert c.attn_logit_softcapping is None and c.final_logit_softcapping is None
    scale = m.embed_tokens.embed_scale
    assert scale.dtype == torch.float32 and scale.item() == c.hidden_size ** 0.5 == 8.0, scale
    extra["embed_scale"] = scale.item()
    for i, sample in enumerate(golden):
        ids = torch.tensor(sample["input_ids"])
        ref = tensors[f"sample{i}.states"]
        assert torch.equal(ref[0], m.embed_tokens.weight[ids] * 8.0), "embedding output != weight[id] * 8"
        with torch.no_grad():
            mine = gemma3_reimplementation(model, cfg, ids)
        diff = (mine - ref).abs().max().item()
        assert diff <= 2e-5 * max(1.0, ref.abs().max().item()), (i, diff)
        extra["reimpl_diff"] = max(extra.get("reimpl_diff", 0.0), diff)
    checks.append(f"written-out forward from config.json matches within {extra['reimpl_diff']:.2g}")

    longest = max(range(len(golden)), key=lambda i: len(golden[i]["input_ids"]))
    ids = torch.tensor(golden[longest]["input_ids"])
    base = tensors[f"sample{longest}.states"]

    def perturbed(p):
        ids2 = ids.clone()
        ids2[p] = (ids2[p] + 1) % MAX_TOKEN_ID
        return capture_states(model, ids2)

    # Layer 0 (sliding) at t reads keys t-W+1 .. t only.
    t = 2 * W + 4
    assert kinds[0] == "sliding_attention"
    assert not torch.equal(perturbed(t - W + 1)[1, t], base[1, t]), "layer 0 ignores key t-W+1"
    assert torch.equal(perturbed(t - W)[1, t], base[1, t]), "layer 0 reads key t-W"
    # n sliding layers reach back n*(W-1) positions; the full layer after them reads everything.
    n_sliding = kinds.index("full_attention")
    assert kinds[:n_sliding] == ["sliding_attention"] * n_sliding and n_sliding == L - 1
    t = len(ids) - 1
    reach = t - n_sliding * (W - 1)
    assert reach > 0, "golden sample too short to leave the sliding layers' reach"
    far, near = perturbed(reach - 1), perturbed(reach)
    assert torch.equal(far[:n_sliding + 1, t], base[:n_sliding + 1, t]), "a sliding layer reads beyond its window"
    assert not torch.equal(far[n_sliding + 1, t], base[n_sliding + 1, t]), "the full layer ignores an early key"
    assert not torch.equal(near[n_sliding, t], base[n_sliding, t]), "sliding layers' reach is shorter than expected"
    extra["window_probe"] = (2 * W + 4, t, reach)
    checks.append(f"layer 0 at {2 * W + 4} reads key {W + 5} not {W + 4}; at {t} layers 0-{n_sliding - 1} reach back to "
                  f"token {reach}, layer {n_sliding} (full) reads token {reach - 1}")

    def variant(change):
        alt = copy.deepcopy(model)
        with torch.no_grad():
            change(alt)
        return (capture_states(alt, ids) - base).abs().max().item()

    def set_rope(alt, layer_type, params):
        alt.config.rope_parameters = {**alt.config.rope_parameters, layer_type: params}
        alt.model.rotary_emb = Gemma3RotaryEmbedding(alt.config)

    full, local = c.rope_parameters["full_attention"], c.rope_parameters["sliding_attention"]
    variants = {
        "no_window": ("sliding_window 4096 (no window)", lambda a: setattr(a.config, "sliding_window", 4096)),
        "full_unscaled": ("full layer without the linear factor",
                          lambda a: set_rope(a, "full_attention", {"rope_type": "default",
                                                                   "rope_theta": full["rope_theta"]})),
        "sliding_scaled": ("linear factor also on sliding layers",
                           lambda a: set_rope(a, "sliding_attention", {**full, "rope_theta": local["rope_theta"]})),
        "sliding_global_theta": ("sliding layers with rope_theta 1e6",
                                 lambda a: set_rope(a, "sliding_attention", {"rope_type": "default",
                                                                             "rope_theta": full["rope_theta"]})),
        "head_dim_scale": ("score scale head_dim^-0.5",
                           lambda a: [setattr(l.self_attn, "scaling", hd ** -0.5) for l in a.model.layers]),
        "no_qk_norm": ("q/k norms dropped", lambda a: [(setattr(l.self_attn, "q_norm", torch.nn.Identity()),
                                                        setattr(l.self_attn, "k_norm", torch.nn.Identity()))
                                                       for l in a.model.layers]),
        "erf_gelu": ("erf GELU instead of tanh", lambda a: [setattr(l.mlp, "act_fn", torch.nn.GELU())
                                                            for l in a.model.layers]),
    }
    for key, (what, change) in variants.items():
        extra[key] = variant(change)
        assert extra[key] > (1e-5 if key == "erf_gelu" else 1e-3), (key, extra[key])
        checks.append(f"{what}: states change by up to {extra[key]:.3g}")
    return extra


def describe(name, model_dir, save_dtype):
    cfg = json.loads((model_dir / "config.json").read_text())
    rope_keys = {k: cfg[k] for k in ("rope_parameters", "rope_theta", "rope_scaling", "rope_local_base_freq")
                 if k in cfg}
    return {
        "name": name, "architecture": cfg["architectures"][0], "dtype": str(save_dtype).split(".")[-1],
        "hidden": cfg["hidden_size"], "heads": cfg["num_attention_heads"], "kv_heads": cfg["num_key_value_heads"],
        "head_dim": cfg.get("head_dim", "(absent)"), "layers": cfg["num_hidden_layers"],
        "intermediate": cfg["intermediate_size"], "vocab": cfg["vocab_size"],
        "tied": cfg.get("tie_word_embeddings"), "rms_norm_eps": cfg["rms_norm_eps"],
        "sliding_window": cfg.get("sliding_window", "(absent)"), "rope": rope_keys,
    }


def versions():
    import compressed_tensors
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "safetensors": safetensors.__version__,
            "compressed_tensors": compressed_tensors.__version__}


def gemma3_section(g):
    """README section of the gemma3 fixture (g: its make_model() result)."""
    cls, cfg, _, _, _ = LATE_MODELS["gemma3"]
    x, (t0, t, reach) = g["extra"], g["extra"]["window_probe"]
    W, L, hd, nh, nkv = cfg.sliding_window, cfg.num_hidden_layers, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    n_sliding = cfg.layer_types.index("full_attention")
    full, local = x["rope_parameters"]["full_attention"], x["rope_parameters"]["sliding_attention"]
    tp = "; ".join(f"TP {k}: {nh // k} q head{'s' if nh // k > 1 else ''} and {cfg.intermediate_size // k} of the "
                   f"{cfg.intermediate_size} intermediate features per rank" for k in TP_SIZES)
    reimpl = "bit for bit" if x["reimpl_diff"] == 0 else f"within {x['reimpl_diff']:.2g}"
    return f"""
## Gemma-3 text model (`gemma3`)

`{cls.__name__}` (`model_type` "gemma3_text", the text-only Gemma-3 as google/gemma-3-1b-it ships it), model number
{g['index']} (after the MoE fixtures; build seed {SEED}+{g['index']}, weight seed {SEED}+100+{g['index']}), so adding it changed no other fixture.
bf16 checkpoint (`model.safetensors`, no `lm_head.weight`: tied), reference from the float32 model holding exactly
the bf16 values. Shape: hidden {cfg.hidden_size}, {L} layers, {nh} q heads, {nkv} kv head, `head_dim` {hd} (not hidden/heads = {cfg.hidden_size // nh}),
`query_pre_attn_scalar` {cfg.query_pre_attn_scalar} (not head_dim), intermediate {cfg.intermediate_size}, `hidden_activation` "{cfg.hidden_activation}",
`rms_norm_eps` {cfg.rms_norm_eps:g}, vocab {cfg.vocab_size}, `sliding_window` {W}, no softcapping (`attn_logit_softcapping` and
`final_logit_softcapping` null), no biases (`attention_bias` false). Weights: matrices N(0, {WEIGHT_STD}); every Gemma RMSNorm
weight w (the module multiplies by 1 + w) is {NORM_STD}*N(0, 1), so 1 + w is distributed like the other fixtures' norm
weights -- the four norms of each layer, `q_norm`, `k_norm` and the final norm, all random.

config.json is in the classic form of the google/gemma-3-* text checkpoints: top-level `rope_theta` {full['rope_theta']:.1f},
`rope_local_base_freq` {local['rope_theta']:.1f}, `rope_scaling` {json.dumps({k: v for k, v in full.items() if k != 'rope_theta'})} (as gemma-3-4b and
larger have; the 1b has null), `sliding_window_pattern` 6 and `layer_types` listing each layer (as newer Hub revisions do);
no `rope_parameters`, no `use_bidirectional_attention` (absent = false); `dtype` (what transformers 5.24 writes; Hub files say
`torch_dtype`). transformers 5.24 (`Gemma3TextConfig.convert_rope_params_to_dict`, then `standardize_rope_params`)
turns these keys into per-layer-type `rope_parameters` (asserted):

- `full_attention`: {json.dumps(full)} -- `rope_scaling` is merged into the full-attention entry
  **only**, and `rope_theta` is the full layers' theta (default 1e6 if absent);
- `sliding_attention`: {json.dumps(local)} -- always default (unscaled) RoPE with theta
  `rope_local_base_freq` (default 1e4 if absent); `rope_scaling` never applies to sliding layers.

Linear scaling divides every inverse frequency of the full layers by the factor: `inv_freq_j = theta^(-2j/{hd}) / 8`
(j = 0 .. {hd // 2 - 1}, asserted against the model's buffers); `max_position_embeddings` plays no part. `layer_types` decides
which layer is which; `sliding_window_pattern` is only used when `layer_types` is absent (layer i sliding iff
`(i + 1) % pattern != 0`; both give layers 0-{n_sliding - 1} sliding, {n_sliding} full here).

Semantics the reference follows (transformers 5.24 `gemma3/modeling_gemma3.py`, `masking_utils.py`,
`modeling_rope_utils.py`; the script recomputes every golden sample with its own written-out forward, built
from config.json and the parameters only; on the generating machine it matched the reference states {reimpl}):

- Embedding (`Gemma3TextScaledWordEmbedding`): `embed_tokens.weight[id] * embed_scale`, `embed_scale` = sqrt(hidden),
  held as a non-persistent buffer `torch.tensor(hidden ** 0.5)` (created in the default dtype at construction, cast to
  the weight dtype in forward). In the float32 reference it is float32 sqrt({cfg.hidden_size}) = {x['embed_scale']:g} exactly, and states[0] ==
  weight[id] * 8 bit for bit (asserted). Caution for real sizes: a model loaded with `dtype=bfloat16` builds the buffer in
  bf16 (34.0 instead of 33.94 for hidden 1152, 50.5 for 2560) and keeps that value after `.float()`; hidden 64 makes
  both 8, so this fixture cannot tell the two apart.
- RMSNorm (`Gemma3RMSNorm`, every norm): `y = x * rsqrt(mean(x^2) + eps) * (1 + w)` in float32 (x and w upcast, the
  product cast back to the input dtype -- (x * (1 + w)).to(dtype), not x.to(dtype) * w); eps = `rms_norm_eps` for all of them,
  `q_norm` / `k_norm` included.
- Decoder layer, with x its input (= states[k]):
  `h = x + post_attention_layernorm(self_attn(input_layernorm(x)))`;
  `out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))`.
  `input_layernorm` normalises the layer input before attention; `post_attention_layernorm` normalises the
  **attention output (after o_proj)**, and the residual adds that normed output (the sum is not normed);
  `pre_feedforward_layernorm` normalises `h`, the residual stream after the attention add (its input is the sum, not
  the normed attention output), and feeds the MLP; `post_feedforward_layernorm` normalises the MLP output (after
  down_proj) before it is added to `h`. The final `norm` is applied to the last layer's output (states[L+1]).
- MLP (GeGLU, tanh GELU), y = `pre_feedforward_layernorm(h)`: `down_proj(gelu_tanh(gate_proj(y)) * up_proj(y))` with
  `gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))` (`gelu_pytorch_tanh`); the erf GELU would change
  the states by up to {x['erf_gelu']:.3g}.
- Attention, y = `input_layernorm(x)`: q = `q_proj(y)` viewed [T, {nh}, {hd}], k and v = `k_proj(y)`, `v_proj(y)` viewed [T, {nkv}, {hd}];
  `q_norm` / `k_norm` (RMSNorm over each head's {hd} dims, one weight shared by all heads, (1 + w)) applied to q and k
  **before** RoPE, v not normed; RoPE `rotate_half` over the whole head_dim (pairs (j, j + {hd // 2})) with the cos/sin of the
  layer's type; the one kv head serves all {nh} q heads; scores scaled by `query_pre_attn_scalar ** -0.5` = {cfg.query_pre_attn_scalar}^-0.5
  (**not** head_dim^-0.5: using {hd}^-0.5 changes the states by up to {x['head_dim_scale']:.3g}); no softcapping; softmax in float32;
  `o_proj` over the {nh}*{hd} = {nh * hd} concatenated head outputs.
- Layers 0-{n_sliding - 1} (`sliding_attention`): a query at position i attends to keys i-{W - 1} .. i ({W} keys including itself,
  `create_sliding_window_causal_mask`: `q - W < kv <= q`, as Mistral's), RoPE theta {local['rope_theta']:.0f}, unscaled. Layer {n_sliding}
  (`full_attention`): plain causal mask, RoPE theta {full['rope_theta']:.0f} with the inverse frequencies divided by {full['factor']:g}.
  Proved on the 61-token golden sample: changing the token at {t0 - W + 1} changes layer 0's output at {t0}, changing the token
  at {t0 - W} does not; at position {t} the {n_sliding} sliding layers reach back exactly to token {reach} ({n_sliding} x {W - 1}): changing token {reach - 1} leaves
  states[0..{n_sliding}] at {t} bit-identical and changes layer {n_sliding}'s output there, changing token {reach} changes states[{n_sliding}].
- Sensitivity on the 61-token golden sample (largest |change| of any state): without the window (`sliding_window`
  4096) {x['no_window']:.3g}; full layer without the linear factor {x['full_unscaled']:.3g}; the linear factor applied to the sliding layers too
  {x['sliding_scaled']:.3g}; sliding layers with theta 1e6 {x['sliding_global_theta']:.3g}; q/k norms dropped {x['no_qk_norm']:.3g}.

Tensor parallelism: {nh} q heads and intermediate {cfg.intermediate_size} divide by 1, 2 and 4; the single kv head (`k_proj`, `v_proj`
rows and the `k_norm` weight) is replicated on every rank at TP 2 and 4, as on the real small Gemma-3s
({tp}; every rank holds the whole kv head).
`q_norm` / `k_norm` weights are per head_dim, so every rank holds the whole of both.
"""


def write_readme(out, vers, models, moe_section=""):
    def cell(value):  # JSON spelling (true/null), bare strings unquoted
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

    columns = ("architecture", "dtype", "hidden", "heads", "kv_heads", "head_dim", "layers",
               "intermediate", "vocab", "tied", "rms_norm_eps", "sliding_window")
    rows = "\n".join(
        f"| `{m['name']}` | " + " | ".join(cell(m[c]) for c in columns) + f" | `{cell(m['rope'])}` |"
        for m in models)
    tp_cfg = MODELS["llama_tp"][1]
    gemma_index = next(m["index"] for m in models if m["name"] == "gemma3")
    text = f"""# layertap test fixtures

Generated by `tools/make_fixtures.py` -- do not edit by hand. To regenerate (wipes `models/` and `data/`):

    /opt/layertap-pyenv/bin/python tools/make_fixtures.py

(the Python environment of `tools/python_env.sh`, plus `compressed-tensors` at the version in `VERSIONS.json`).
To add or regenerate only some fixtures and keep every other committed file as it is:

    /opt/layertap-pyenv/bin/python tools/make_fixtures.py --only NAME [NAME ...]

(generates everything in a temporary directory, then copies `models/NAME`, `README.md` and `VERSIONS.json`).

Seed: {SEED} (weights of model number n use seed {SEED}+100+n; data uses `random.Random({SEED})`).
CPU, one thread, eager attention. Reruns on one machine are byte-identical; another CPU (other BLAS kernels) can
change float32 references in the last bits (the committed llama/mistral/qwen references differ by up to ~2e-6 when
regenerated on a different machine -- keep the committed ones unless the models change).

Versions: python {vers['python']}, torch {vers['torch']}, transformers {vers['transformers']},
safetensors {vers['safetensors']} (also in `VERSIONS.json`).

## Models (`models/<name>/`)

Tiny random-weight checkpoints written by `save_pretrained(..., safe_serialization=True)`. Matrices are
N(0, {WEIGHT_STD}), biases N(0, {BIAS_STD}), every RMSNorm weight 1 + {NORM_STD}*N(0, 1) (`gemma3`: w = {NORM_STD}*N(0, 1), its
norms multiply by 1 + w). All accept token ids < {VOCAB}.
Config columns are taken from each `config.json` (RoPE column: the exact RoPE keys it contains).

| name | class | saved dtype | hidden | q heads | kv heads | head_dim | layers | intermediate | vocab | tied | eps | sliding_window | RoPE keys |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
{rows}

`llama`, `llama3_rope`, `mistral` and `llama_tp` have their config.json rewritten to the classic Hub form
(top-level `rope_theta` and `rope_scaling`); `qwen2` and `qwen3` keep the `rope_parameters` form this transformers
version writes. The script checks that each checkpoint reloads to the same states as the in-memory model.
`qwen3` is sharded (`model.safetensors.index.json` + several `model-*.safetensors`); `qwen2` ties
`lm_head` to `embed_tokens` (no `lm_head.weight` in the checkpoint). `head_dim` "(absent)" means
hidden/heads. The qwen2/qwen3 configs also carry `layer_types` (all "full_attention"), `use_sliding_window: false`
and `sliding_window: null`; the mistral config has `sliding_window: 8` and no `layer_types`. `gemma3` (model number
{gemma_index}, generated after the MoE fixtures) has its own section at the end.
`llama_tp` is for tensor-parallel tests at TP = {", ".join(map(str, TP_SIZES))}: its {tp_cfg.num_attention_heads} q heads and intermediate
size {tp_cfg.intermediate_size} divide evenly by each, while its {tp_cfg.num_key_value_heads} kv heads force key/value-head replication at
TP {max(TP_SIZES)} (each kv head on {max(TP_SIZES) // tp_cfg.num_key_value_heads} ranks). It is listed last (model number {list(MODELS).index("llama_tp")}, weight seed
{SEED}+100+{list(MODELS).index("llama_tp")}), so adding it changed no other fixture.

Semantics the references follow (transformers eager attention; `gemma3` differs, see its section): scores are scaled by `head_dim ** -0.5`
(qwen3: 16, not hidden/heads = 12); RMSNorm is `x * rsqrt(mean(x^2) + eps) * weight` in float32, and qwen3's
per-head q/k norms use the same `rms_norm_eps` and are applied before RoPE; RoPE rotates halves
(`rotate_half`, not interleaved pairs); with `sliding_window` W a query at position i attends to keys
i-W+1 .. i (W keys including itself).

## Reference states (`models/<name>/reference.safetensors`)

For golden sample i (0-based line of `data/golden.jsonl`), run alone (batch 1, no padding, positions 0..T-1)
by transformers in float32 (float16/bfloat16 checkpoints loaded as saved, then `.float()`):

- `sample{{i}}.input_ids`: int32 `[T]`
- `sample{{i}}.states`: float32 `[L+2, T, H]`; index k < L is the input of decoder layer k (k=0: embedding
  output, = HF `hidden_states[k]`), index L the output of the last decoder layer before the final norm,
  index L+1 the output of the final norm (= HF `hidden_states[L]`, what the LM head reads).

## Data (`data/`)

- `golden.jsonl`: {len(GOLDEN_LENGTHS)} samples of lengths {GOLDEN_LENGTHS} (in line order), ids in [0, {MAX_TOKEN_ID}),
  random 0/1 `loss_mask`; line {GOLDEN_NO_LOSS_MASK} has no `loss_mask`, line {GOLDEN_NO_ID} has no `id`.
- `demo.jsonl`: {DEMO_SAMPLES} samples (`id`, `input_ids`, `loss_mask`), lengths uniform in {list(DEMO_LENGTHS)}, ids in
  [0, {MAX_TOKEN_ID}), loss mask 0 on a random prompt prefix and 1 after it.
""" + moe_section
    (out / "README.md").write_text(text)


def generate(out):
    """Every fixture, README.md and VERSIONS.json under `out` (models/ and data/ wiped first)."""
    vers = versions()
    print("versions:", json.dumps(vers))

    for sub in ("models", "data"):
        shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)

    golden = make_data(out / "data", random.Random(SEED))
    models = [make_model(name, n, out / "models" / name, golden) for n, name in enumerate(MODELS)]
    # MoE / MLA families (tools/moe_fixtures.py), numbered after the models above so their seeds are unchanged.
    import moe_fixtures
    moe = moe_fixtures.make_all(sys.modules[__name__], out / "models", golden, first_index=len(MODELS))
    # Then LATE_MODELS, numbered after the MoE fixtures.
    first_late = len(MODELS) + len(moe_fixtures.MOE_MODELS)
    late = [make_model(name, first_late + j, out / "models" / name, golden) for j, name in enumerate(LATE_MODELS)]
    assert [m["index"] for m in late] == [15], "gemma3 is model number 15"
    import gpt_oss_fixture  # GPT-OSS (MXFP4 experts), model number 16
    gpt_oss = gpt_oss_fixture.make(sys.modules[__name__], 16, out / "models" / gpt_oss_fixture.NAME, golden)
    import llama4_fixture  # Llama-4 text, model number 17
    llama4 = llama4_fixture.make(sys.modules[__name__], 17, out / "models" / llama4_fixture.NAME, golden)
    import gemma3_wrapper_fixture  # the gemma3 text model in Gemma-3's multimodal wrapper, model number 18
    wrapper = gemma3_wrapper_fixture.make(sys.modules[__name__], 18, out / "models" / gemma3_wrapper_fixture.NAME,
                                          golden, out / "models" / gemma3_wrapper_fixture.TEXT_FIXTURE)

    (out / "VERSIONS.json").write_text(json.dumps(vers, indent=2) + "\n")
    by_name = {m["name"]: m for m in late}
    write_readme(out, vers, models + late, moe_fixtures.readme_section(moe) + gemma3_section(by_name["gemma3"])
                 + gpt_oss_fixture.readme_section(gpt_oss) + llama4_fixture.readme_section(llama4)
                 + gemma3_wrapper_fixture.readme_section(wrapper))
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({total / 2**20:.2f} MiB)")


def generate_only(out, names):
    """generate() in a temporary directory; copy models/<name> of `names`, README.md and VERSIONS.json to `out`."""
    import gemma3_wrapper_fixture
    import gpt_oss_fixture
    import llama4_fixture
    import moe_fixtures
    known = list(MODELS) + list(moe_fixtures.MOE_MODELS) + list(LATE_MODELS) + [
        gpt_oss_fixture.NAME, llama4_fixture.NAME, gemma3_wrapper_fixture.NAME]
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"unknown fixture(s) {unknown}; known: {known}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        generate(tmp)
        for name in names:
            shutil.rmtree(out / "models" / name, ignore_errors=True)
            shutil.copytree(tmp / "models" / name, out / "models" / name)
        for fname in ("README.md", "VERSIONS.json"):
            shutil.copyfile(tmp / fname, out / fname)
        copied = {Path("models") / n for n in names}
        kept_differ = []
        for p in sorted(tmp.rglob("*")):
            rel = p.relative_to(tmp)
            if not p.is_file() or any(c in rel.parents for c in copied) or rel.name in ("README.md", "VERSIONS.json"):
                continue
            if not (out / rel).is_file() or (out / rel).read_bytes() != p.read_bytes():
                kept_differ.append(str(rel))
    print(f"copied models/{{{','.join(names)}}}, README.md, VERSIONS.json to {out}")
    if kept_differ:
        print(f"kept {len(kept_differ)} committed file(s) that this run made differently: " + ", ".join(kept_differ))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests" / "fixtures")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="replace only models/NAME (and README.md, VERSIONS.json); keep every other file")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    if args.only:
        generate_only(args.out, args.only)
    else:
        generate(args.out)


if __name__ == "__main__":
    main()
