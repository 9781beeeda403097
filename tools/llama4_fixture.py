"""The Llama-4 fixture of tools/make_fixtures.py: a tiny random Llama4ForCausalLM (the text model), saved by
transformers in bf16 as Meta publishes Llama-4 Scout/Maverick's text weights: routed experts stacked over experts
as `feed_forward.experts.gate_up_proj` [E, H, 2I] and `down_proj` [E, I, H] (x @ W), a shared expert, a router
without bias, dense layers of `intermediate_size_mlp` between the MoE ones (Maverick's interleaving).

Every Llama-4 part binds on the golden samples: NoPE layers (every other layer here) with the attention
temperature (floor_scale 4, so it grows within the samples), chunked attention on the RoPE layers (chunks of 8),
RoPE on interleaved pairs with llama3 scaling, the weightless q/k norm after RoPE, top-1 sigmoid routing that
scales the experts' input. Checked here: transformers' loader reads the files back to the same parameters and
states; routing margins; that each part changes the states.
"""

import copy

import torch
from transformers import AutoModelForCausalLM, Llama4ForCausalLM, Llama4TextConfig

NAME = "llama4"
MIN_MARGIN = 1e-4  # the chosen logit must beat the next by this much (float32 noise is ~1e-7)
ROUTER_STD = 0.3


def config(ctx):
    return Llama4TextConfig(
        vocab_size=ctx.VOCAB, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=1,
        interleave_moe_layer_step=2, no_rope_layer_interval=2, attention_chunk_size=8, floor_scale=4,
        attn_scale=0.1, attn_temperature_tuning=True, use_qk_norm=True, max_position_embeddings=ctx.MAX_POS,
        rms_norm_eps=1e-5, initializer_range=ctx.WEIGHT_STD, bos_token_id=1, eos_token_id=2, pad_token_id=None,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32})


def build(ctx, seed_build, seed_weights):
    torch.manual_seed(seed_build)
    cfg = config(ctx)
    cfg._attn_implementation = "eager"
    model = Llama4ForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(seed_weights)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() == 1:
                assert "norm" in name, name
                p.copy_(1.0 + ctx.NORM_STD * noise)
            elif name.endswith("router.weight"):
                p.copy_(ROUTER_STD * noise)
            else:
                p.copy_(ctx.WEIGHT_STD * noise)
            p.copy_(p.to(torch.bfloat16))  # the checkpoint's dtype; the reference computes in float32
    return model


def router_margins(model, golden):
    gaps = []

    def hook(module, args, output):
        logits = output[1]
        top = logits.topk(module.top_k + 1, dim=-1).values
        gaps.append((top[:, -2] - top[:, -1]).min().item())

    handles = [layer.feed_forward.router.register_forward_hook(hook) for layer in model.model.layers
               if layer.is_moe_layer]
    try:
        with torch.no_grad():
            for s in golden:
                model(input_ids=torch.tensor([s["input_ids"]]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return min(gaps)


def make(ctx, index, model_dir, golden):
    model = build(ctx, ctx.SEED + index, ctx.SEED + 100 + index)
    c = model.config
    checks = []
    to_save = copy.deepcopy(model).to(torch.bfloat16)
    to_save.config.dtype = torch.bfloat16
    to_save.save_pretrained(model_dir, safe_serialization=True)
    ctx.to_classic_rope(model_dir / "config.json")

    from safetensors import safe_open
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        gu = f.get_slice("model.layers.1.feed_forward.experts.gate_up_proj").get_shape()
        down = f.get_slice("model.layers.1.feed_forward.experts.down_proj").get_shape()
    H, I = c.hidden_size, c.intermediate_size
    assert gu == [c.num_local_experts, H, 2 * I] and down == [c.num_local_experts, I, H], (gu, down)
    assert "model.layers.1.feed_forward.shared_expert.gate_proj.weight" in names
    assert "model.layers.0.feed_forward.gate_proj.weight" in names and "model.layers.1.feed_forward.router.weight" in names
    checks.append(f"files: stacked experts gate_up_proj {gu}, down_proj {down} (x @ W), shared_expert, dense "
                  "feed_forward between MoE layers")

    loaded = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto", attn_implementation="eager")
    assert type(loaded) is Llama4ForCausalLM, type(loaded)
    loaded = loaded.float().eval()
    mem, lstate = model.state_dict(), loaded.state_dict()
    assert set(mem) == set(lstate), set(mem) ^ set(lstate)
    for k, v in mem.items():
        assert torch.equal(lstate[k].float(), v), f"{NAME}: from_pretrained {k} differs"

    tensors = {}
    for i, sample in enumerate(golden):
        ids = torch.tensor(sample["input_ids"], dtype=torch.long)
        states = ctx.capture_states(loaded, ids)
        assert torch.equal(states, ctx.capture_states(model, ids)), i
        tensors[f"sample{i}.states"] = states.contiguous()
        tensors[f"sample{i}.input_ids"] = ids.to(torch.int32)
    checks.append("from_pretrained: every parameter equal, states bit-identical to the in-memory model")
    L = c.num_hidden_layers
    ctx.save_reference(model_dir, tensors, L)

    margin = router_margins(model, golden)
    assert margin >= MIN_MARGIN, f"{NAME}: routing margin {margin:.3g} < {MIN_MARGIN}"
    checks.append(f"min routing margin {margin:.3g}")

    def effect(change):
        alt = copy.deepcopy(model)
        change(alt)
        return ctx.states_diff(alt, golden, tensors)

    def no_temperature(alt):
        for layer in alt.model.layers:
            layer.self_attn.attn_temperature_tuning = False

    def no_chunks(alt):
        alt.config.layer_types = ["full_attention"] * L

    def no_qk_norm(alt):
        for layer in alt.model.layers:
            if hasattr(layer.self_attn, "qk_norm"):
                del layer.self_attn.qk_norm

    def rope_everywhere(alt):
        for layer in alt.model.layers:
            layer.self_attn.use_rope = 1

    def output_weighted(alt):  # the routing weight on the expert's output instead of its input
        def forward(self, hidden_states):
            hidden_states = hidden_states.reshape(-1, self.hidden_dim)
            scores, logits = self.router(hidden_states)
            routed = self.experts(hidden_states.repeat(scores.shape[1], 1))
            routed = routed * scores.transpose(0, 1).reshape(-1, 1)
            out = self.shared_expert(hidden_states)
            out.add_(routed.reshape(scores.shape[1], -1, routed.shape[-1]).sum(dim=0))
            return out, logits
        for layer in alt.model.layers:
            if layer.is_moe_layer:
                layer.feed_forward.forward = forward.__get__(layer.feed_forward)

    effects = {"temperature": effect(no_temperature), "chunked attention": effect(no_chunks),
               "q/k norm": effect(no_qk_norm), "NoPE layers": effect(rope_everywhere),
               "input-weighted experts": effect(output_weighted)}
    for what, diff in effects.items():
        assert diff > 1e-3, f"{NAME}: the {what} do(es) not change the states ({diff:.3g})"
    checks.append("changes without each part: " + ", ".join(f"{k} {v:.3g}" for k, v in effects.items()))
    print(f"  {NAME}:\n    " + "\n    ".join(checks))
    return {"name": NAME, "index": index, "checks": checks, "hidden": H, "layers": L,
            "moe_layers": list(c.moe_layers), "no_rope_layers": list(c.no_rope_layers), "experts": c.num_local_experts,
            "inter": I, "inter_mlp": c.intermediate_size_mlp, "chunk": c.attention_chunk_size,
            "heads": c.num_attention_heads, "kv_heads": c.num_key_value_heads, "head_dim": c.head_dim}


def readme_section(d):
    checks = "\n".join(f"  - {c}" for c in d["checks"])
    return f"""
## Llama-4 (`{d['name']}`, model number {d['index']}; tools/llama4_fixture.py)

`Llama4ForCausalLM` (the text model): hidden {d['hidden']}, {d['layers']} layers, MoE layers {d['moe_layers']}
({d['experts']} experts of {d['inter']}, top 1, sigmoid of the logit scaling the expert's input, a shared expert;
dense layers of {d['inter_mlp']}), no_rope_layers {d['no_rope_layers']} (0: NoPE, with the attention temperature,
floor_scale 4), chunked attention of {d['chunk']} on the RoPE layers, RoPE on interleaved pairs (llama3 scaling),
the weightless q/k norm after RoPE; {d['heads']} heads / {d['kv_heads']} kv heads of {d['head_dim']}. Saved in
bf16 by transformers (experts stacked, x @ W), classic rope keys. Checks made when generated:
{checks}
"""
