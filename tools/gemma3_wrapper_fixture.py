"""The Gemma-3 multimodal-wrapper fixture of tools/make_fixtures.py: the `gemma3` fixture's text model (same
weights) inside a `Gemma3ForConditionalGeneration` with a tiny random SigLIP vision tower, saved by transformers in
bf16 (text tensors under `language_model.model.`, as google/gemma-3-4b/12b/27b-it ship), with config.json rewritten
the way those checkpoints write it: the text model's config under `text_config`, naming only the keys whose values
differ from transformers' Gemma3TextConfig defaults (so a reader must know the defaults), classic rope keys.

Checked here: transformers loads the rewritten config to the same text config as the one built in memory; on text
input the wrapper's states equal the `gemma3` fixture's references (the same text model).
"""

import copy
import json

import torch
from transformers import (Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig)

NAME = "gemma3_wrapper"
TEXT_FIXTURE = "gemma3"
# Above every dataset id (make_fixtures.MAX_TOKEN_ID), below the vocab: samples never hold the image token.
BOI_TOKEN, EOI_TOKEN, IMAGE_TOKEN = 153, 154, 155


def text_model(model):
    """The decoder of a Gemma-3 wrapper (capture_states' `text`)."""
    return model.model.language_model


def hub_config(cfg):
    """config.json as google/gemma-3-*-it write it: text_config with only the keys that differ from
    Gemma3TextConfig's defaults (and model_type), rope as rope_scaling (full layers) / rope_theta /
    rope_local_base_freq, torch_dtype at the top."""
    defaults = Gemma3TextConfig().to_dict()
    text = dict(cfg["text_config"])
    rope = text.pop("rope_parameters")
    full, local = dict(rope["full_attention"]), dict(rope["sliding_attention"])
    assert local == {"rope_type": "default", "rope_theta": local["rope_theta"]}, local
    pattern = text.pop("_sliding_window_pattern")
    assert text["layer_types"] == ["sliding_attention" if (i + 1) % pattern else "full_attention"
                                   for i in range(text["num_hidden_layers"])], text["layer_types"]
    sparse = {k: v for k, v in text.items() if k == "model_type" or (
        k in defaults and k not in ("layer_types", "dtype", "_name_or_path") and v != defaults[k])}
    theta = full.pop("rope_theta")
    if theta != 1e6:
        sparse["rope_theta"] = theta
    if local["rope_theta"] != 1e4:
        sparse["rope_local_base_freq"] = local["rope_theta"]
    if full.get("rope_type", "default") != "default":
        sparse["rope_scaling"] = full
    if pattern != 6:
        sparse["sliding_window_pattern"] = pattern
    out = {k: v for k, v in cfg.items() if k not in ("dtype", "text_config")}
    out["torch_dtype"] = cfg["dtype"]
    out["text_config"] = dict(sorted(sparse.items()))
    return dict(sorted(out.items()))


def make(ctx, index, model_dir, golden, text_dir):
    """Writes the fixture to `model_dir` from the `gemma3` fixture already written to `text_dir`."""
    checks = []
    text = ctx.AutoModelForCausalLM.from_pretrained(text_dir, dtype="auto", attn_implementation="eager")
    tc = copy.deepcopy(text.config)
    tc.architectures = None
    vc = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                            image_size=28, patch_size=14)
    cfg = Gemma3Config(text_config=tc, vision_config=vc, mm_tokens_per_image=4, boi_token_index=BOI_TOKEN,
                       eoi_token_index=EOI_TOKEN, image_token_index=IMAGE_TOKEN)
    torch.manual_seed(ctx.SEED + index)
    model = Gemma3ForConditionalGeneration(cfg).eval()
    gen = torch.Generator().manual_seed(ctx.SEED + 100 + index)
    with torch.no_grad():
        for name, p in model.named_parameters():  # the vision tower and projector: random
            p.copy_((ctx.WEIGHT_STD * torch.randn(p.shape, generator=gen)).to(torch.bfloat16))
        text_model(model).load_state_dict(text.model.state_dict())
    model = model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(model_dir, safe_serialization=True)
    path = model_dir / "config.json"
    path.write_text(json.dumps(hub_config(json.loads(path.read_text())), indent=2) + "\n")
    written = json.loads(path.read_text())["text_config"]
    checks.append("text_config names only " + ", ".join(k for k in written if k != "model_type"))

    from safetensors import safe_open
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "language_model.model.layers.0.self_attn.q_proj.weight" in names and not any(
        n.startswith("model.") for n in names), sorted(names)[:5]

    loaded = Gemma3ForConditionalGeneration.from_pretrained(model_dir, dtype="auto", attn_implementation="eager")
    assert all(p.dtype == torch.bfloat16 for p in loaded.parameters())
    loaded = loaded.float().eval()
    lt, t = loaded.config.text_config, text.config
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "head_dim", "vocab_size", "query_pre_attn_scalar", "sliding_window", "layer_types", "rms_norm_eps",
                "rope_parameters", "hidden_activation", "max_position_embeddings", "tie_word_embeddings"):
        assert getattr(lt, key) == getattr(t, key), (key, getattr(lt, key), getattr(t, key))
    checks.append("transformers reads the sparse text_config back to the gemma3 fixture's text config")

    reference = ctx.load_reference(text_dir)
    tensors = {}
    for i, sample in enumerate(golden):
        ids = torch.tensor(sample["input_ids"], dtype=torch.long)
        states = ctx.capture_states(loaded, ids, text=text_model(loaded))
        assert torch.equal(states, reference[f"sample{i}.states"]), f"{NAME} sample {i}: differs from {TEXT_FIXTURE}"
        tensors[f"sample{i}.states"] = states.contiguous()
        tensors[f"sample{i}.input_ids"] = ids.to(torch.int32)
    ctx.save_reference(model_dir, tensors, tc.num_hidden_layers)
    checks.append(f"states on the golden samples bit-identical to {TEXT_FIXTURE}'s references")
    print(f"  {NAME}:\n    " + "\n    ".join(checks))
    return {"name": NAME, "index": index, "checks": checks}


def readme_section(d):
    checks = "\n".join(f"  - {c}" for c in d["checks"])
    return f"""
## Gemma-3 multimodal wrapper (`{d['name']}`, model number {d['index']}; tools/gemma3_wrapper_fixture.py)

`Gemma3ForConditionalGeneration`: the `{TEXT_FIXTURE}` fixture's text model (same weights) with a tiny random SigLIP
vision tower (never read by layertap), saved by transformers in bf16; text tensors under `language_model.model.`;
config.json as google/gemma-3-4b/12b/27b-it write it (the text model under `text_config`, only keys that differ
from Gemma3TextConfig's defaults, classic rope keys, `image_token_index` {IMAGE_TOKEN}). Checks made when generated:
{checks}
"""
