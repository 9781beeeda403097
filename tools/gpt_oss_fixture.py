"""The GPT-OSS fixture of tools/make_fixtures.py: a tiny random GptOssForCausalLM whose files are laid out as
OpenAI publishes gpt-oss-20b/120b: routed experts stacked over experts in MXFP4 (`*_blocks` e2m1 codes, two per
byte, low nibble first; `*_scales` e8m0 exponents, one per 32 inputs), everything else bf16, config.json with
`quantization_config: {quant_method: mxfp4}` and classic `rope_theta` + `rope_scaling` (YaRN, truncate false).

The expert weights are drawn, quantized to MXFP4 by this file's encoder, and the model computes with the decoded
values, so the float32 reference is exact for the stored bytes. Checked here: transformers' own MXFP4 loader
(dequantizing on the CPU) reads the files back to the same parameters, bit for bit; routing margins; that the
sinks, the clamp of the SwiGLU, the router and expert biases and the sliding window each change the states.
"""

import copy
import json

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, GptOssConfig, GptOssForCausalLM

NAME = "gpt_oss"
MIN_MARGIN = 1e-4  # the k-th chosen logit must beat the (k+1)-th by this much (float32 noise is ~1e-7)
ROUTER_STD = 0.3
SINK_MEAN, SINK_STD = 0.5, 1.0
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
# As published (openai/gpt-oss-20b config.json): the modules left in bf16.
NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def config(ctx):
    # 4 layers sliding/full alternately (the default layer_types); experts of 128 so that MXFP4's groups of 32
    # divide every --moe-split intermediate slice at TP 1, 2, 4; swiglu_limit 1 so the clamp binds often.
    return GptOssConfig(
        vocab_size=ctx.VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
        max_position_embeddings=ctx.MAX_POS, rms_norm_eps=1e-5, swiglu_limit=1.0, initializer_range=ctx.WEIGHT_STD,
        bos_token_id=1, eos_token_id=2, pad_token_id=None, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 8.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 64})


def mxfp4_encode(w):
    """w [..., out, in] float32 (in % 32 == 0) -> (blocks uint8 [..., out, in/32, 16], scales uint8 [..., out,
    in/32], decoded float32 [..., out, in]): per group of 32 the smallest power of two 2^e with amax / 2^e <= 6,
    each value rounded to the nearest e2m1 value (ties to the lower code; -0 for negatives)."""
    g = w.reshape(*w.shape[:-1], -1, 32)
    amax = g.abs().amax(-1)
    e = torch.ceil(torch.log2(amax / 6)).clamp(-127, 127)
    scaled = g / torch.exp2(e)[..., None]
    codes = (scaled[..., None] - E2M1).abs().argmin(-1).to(torch.uint8)  # [..., out, G, 32]
    codes[(codes == 0) & (scaled < 0)] = 8  # -0 for negatives that round to zero, as a sign-keeping encoder does
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    scales = (e + 127).to(torch.uint8)
    return blocks.contiguous(), scales.contiguous(), mxfp4_decode(blocks, scales)


def mxfp4_decode(blocks, scales):
    """The format's definition: element 2j of a group is the low nibble of byte j, 2j+1 the high one; value
    E2M1[code] * 2^(scale - 127)."""
    codes = torch.stack([blocks & 0xF, blocks >> 4], -1).reshape(*blocks.shape[:-1], 32).long()
    vals = E2M1[codes] * torch.exp2(scales.float() - 127)[..., None]
    return vals.reshape(*vals.shape[:-2], -1)


def build(ctx, seed_build, seed_weights):
    torch.manual_seed(seed_build)
    cfg = config(ctx)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    model = GptOssForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(seed_weights)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("sinks"):
                p.copy_(SINK_MEAN + SINK_STD * noise)
            elif name.endswith("bias"):
                p.copy_(ctx.BIAS_STD * noise)
            elif p.dim() == 1:
                assert "norm" in name, name
                p.copy_(1.0 + ctx.NORM_STD * noise)
            elif name.endswith("router.weight"):
                p.copy_(ROUTER_STD * noise)
            else:
                p.copy_(ctx.WEIGHT_STD * noise)
        for p in model.parameters():  # every plain tensor is stored bf16
            p.copy_(p.to(torch.bfloat16))
        stored = {}
        for i, layer in enumerate(model.model.layers):
            ex = layer.mlp.experts
            for proj in ("gate_up_proj", "down_proj"):
                param = getattr(ex, proj)  # [E, in, out]: transformers computes x @ W
                blocks, scales, decoded = mxfp4_encode(param.transpose(1, 2).float())
                param.copy_(decoded.transpose(1, 2))
                stored[f"model.layers.{i}.mlp.experts.{proj}_blocks"] = blocks
                stored[f"model.layers.{i}.mlp.experts.{proj}_scales"] = scales
    return model, stored


def write_checkpoint(model, stored, model_dir):
    model_dir.mkdir(parents=True)
    tensors = {}
    for k, v in model.state_dict().items():
        if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"):
            continue  # stored as MXFP4 blocks and scales
        tensors[k] = v.to(torch.bfloat16).contiguous()
    tensors.update(stored)
    save_file(tensors, model_dir / "model.safetensors", metadata={"format": "pt"})
    cfg = model.config.to_dict()
    for k in ("_attn_implementation", "_experts_implementation", "_attn_implementation_autoset"):
        cfg.pop(k, None)
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope
    cfg["architectures"] = ["GptOssForCausalLM"]
    cfg["dtype"] = "bfloat16"
    cfg["quantization_config"] = {"modules_to_not_convert": NOT_CONVERTED, "quant_method": "mxfp4"}
    (model_dir / "config.json").write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")
    return tensors


def router_margins(model, golden):
    """The smallest gap between the k-th and (k+1)-th router logit over every token of every MoE call."""
    gaps = []

    def hook(module, args, output):
        logits = output[0]
        top = logits.topk(module.top_k + 1, dim=-1).values
        gaps.append((top[:, -2] - top[:, -1]).min().item())

    handles = [layer.mlp.router.register_forward_hook(hook) for layer in model.model.layers]
    try:
        with torch.no_grad():
            for s in golden:
                model(input_ids=torch.tensor([s["input_ids"]]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return min(gaps)


def make(ctx, index, model_dir, golden):
    model, stored = build(ctx, ctx.SEED + index, ctx.SEED + 100 + index)
    files = write_checkpoint(model, stored, model_dir)
    checks = []

    # The format: our encoder's bytes decode (by the definition, and by transformers' decoder) to the parameters.
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    for i, layer in enumerate(model.model.layers):
        for proj in ("gate_up_proj", "down_proj"):
            b, s = stored[f"model.layers.{i}.mlp.experts.{proj}_blocks"], stored[f"model.layers.{i}.mlp.experts.{proj}_scales"]
            theirs = convert_moe_packed_tensors(b, s, dtype=torch.float32)
            assert torch.equal(theirs, getattr(layer.mlp.experts, proj)), (i, proj)
    n_codes = torch.cat([torch.cat([b & 0xF, b >> 4]).flatten() for k, b in stored.items() if k.endswith("_blocks")])
    assert len(set(n_codes.tolist())) == 16, "every e2m1 code occurs"
    checks.append("MXFP4: transformers' convert_moe_packed_tensors == the parameters (exact); all 16 codes occur")

    # transformers' loader, from the files (MXFP4 dequantized on the CPU), gives the same parameters.
    loaded = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    assert type(loaded) is GptOssForCausalLM, type(loaded)
    loaded_state, mem = loaded.state_dict(), model.state_dict()
    assert set(loaded_state) == set(mem), set(loaded_state) ^ set(mem)
    for k, v in mem.items():
        assert torch.equal(loaded_state[k].float(), v), f"{NAME}: from_pretrained {k} differs"
    checks.append("from_pretrained (MXFP4 dequantized): every parameter equal to the in-memory model, "
                  "states bit-identical")

    tensors = {}
    for i, sample in enumerate(golden):
        ids = torch.tensor(sample["input_ids"], dtype=torch.long)
        tensors[f"sample{i}.states"] = ctx.capture_states(model, ids).contiguous()
        assert torch.equal(ctx.capture_states(loaded.float().eval(), ids), tensors[f"sample{i}.states"]), i
        tensors[f"sample{i}.input_ids"] = ids.to(torch.int32)
    L = model.config.num_hidden_layers
    ctx.save_reference(model_dir, tensors, L)

    margin = router_margins(model, golden)
    assert margin >= MIN_MARGIN, f"{NAME}: routing margin {margin:.3g} < {MIN_MARGIN}"
    checks.append(f"min routing margin {margin:.3g}")

    # Each part matters on these samples: removing it changes the longest sample's states.
    def effect(change):
        alt = copy.deepcopy(model)
        change(alt)
        return ctx.states_diff(alt, golden, tensors)

    def zero(names):
        def change(alt):
            with torch.no_grad():
                for n, p in alt.named_parameters():
                    if any(n.endswith(x) for x in names):
                        p.fill_(-1e9 if n.endswith("sinks") else 0.0)
        return change

    def unclamp(alt):
        for layer in alt.model.layers:
            layer.mlp.experts.limit = 1e9

    def full_attention(alt):
        for layer in alt.model.layers:
            layer.self_attn.sliding_window = None
        alt.config.layer_types = ["full_attention"] * L

    effects = {"sinks": effect(zero(["sinks"])), "swiglu clamp": effect(unclamp),
               "router bias": effect(zero(["router.bias"])),
               "expert biases": effect(zero(["gate_up_proj_bias", "down_proj_bias"])),
               "sliding window": effect(full_attention)}
    for what, diff in effects.items():
        assert diff > 1e-3, f"{NAME}: the {what} do(es) not change the states ({diff:.3g})"
    checks.append("changes without each part: " + ", ".join(f"{k} {v:.3g}" for k, v in effects.items()))
    print(f"  {NAME}:\n    " + "\n    ".join(checks))
    c = model.config
    return {"name": NAME, "index": index, "files": sorted(files), "checks": checks, "hidden": c.hidden_size,
            "layers": L, "experts": c.num_local_experts, "top_k": c.num_experts_per_tok,
            "intermediate": c.intermediate_size, "heads": c.num_attention_heads, "kv_heads": c.num_key_value_heads,
            "head_dim": c.head_dim, "window": c.sliding_window, "layer_types": c.layer_types,
            "swiglu": (c.swiglu_alpha, c.swiglu_limit)}


def readme_section(d):
    checks = "\n".join(f"  - {c}" for c in d["checks"])
    return f"""
## GPT-OSS (`{d['name']}`, model number {d['index']}; tools/gpt_oss_fixture.py)

`GptOssForCausalLM` as OpenAI publishes it: hidden {d['hidden']}, {d['layers']} layers ({', '.join(d['layer_types'])};
window {d['window']}), {d['heads']} heads / {d['kv_heads']} kv heads of {d['head_dim']}, attention biases and sinks,
{d['experts']} experts (top {d['top_k']}) of intermediate {d['intermediate']}, clamped SwiGLU (alpha, limit) =
{d['swiglu']} (limit 1 so the clamp binds), router and expert biases, YaRN (factor 8, truncate false). Routed
experts stored stacked in MXFP4 (`mlp.experts.{{gate_up,down}}_proj_blocks` uint8 [E, out, in/32, 16],
`_scales` uint8 [E, out, in/32], gate and up rows interleaved), `_bias` and every other tensor bf16; config.json
with `quantization_config` {{quant_method: mxfp4}} and classic rope keys. The reference computes in float32 with
the decoded expert weights. Checks made when generated:
{checks}
"""
