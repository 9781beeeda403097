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
from safetensors.torch import save_file
from transformers import (
    AutoModelForCausalLM,
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
NORM_STD = 0.1  # RMSNorm weights = 1 + NORM_STD * randn
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
TP_SIZES = (1, 2, 4)  # llama_tp must shard at each of these


def randomize_weights(model, seed):
    """Re-initialize every parameter from a seeded generator (matrices N(0, WEIGHT_STD),
    biases N(0, BIAS_STD), RMSNorm weights 1 + N(0, NORM_STD))."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied parameters are listed once
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(BIAS_STD * noise)
            elif p.dim() == 1:  # every 1-D weight of these models is an RMSNorm weight
                assert "norm" in name, name
                p.copy_(1.0 + NORM_STD * noise)
            else:
                p.copy_(WEIGHT_STD * noise)


def to_classic_rope(config_path):
    """Rewrite config.json with top-level `rope_theta` / `rope_scaling` instead of `rope_parameters`."""
    cfg = json.loads(config_path.read_text())
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
    config_path.write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")


def capture_states(model, input_ids):
    """Run one sample; return float32 [L+2, T, H]: inputs of layers 0..L-1, output of layer L-1,
    output of the final norm. Asserts agreement with output_hidden_states where they overlap."""
    layers = model.model.layers
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
    handles.append(model.model.norm.register_forward_hook(norm_hook))
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
    cls, config, save_dtype, rope_form, save_kwargs = MODELS[name]
    torch.manual_seed(SEED + index)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    randomize_weights(model, SEED + 100 + index)
    with torch.no_grad():  # round the weights to the checkpoint dtype, keep computing in float32
        for p in model.parameters():
            p.copy_(p.to(save_dtype))
    # Cast a copy for saving: casting `model` itself would also round its RoPE inv_freq buffer.
    to_save = copy.deepcopy(model).to(save_dtype)
    to_save.config.dtype = save_dtype
    to_save.save_pretrained(model_dir, safe_serialization=True, **save_kwargs)
    if rope_form == "classic":
        to_classic_rope(model_dir / "config.json")
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
    n_layers = loaded.config.num_hidden_layers
    # One metadata key only: safetensors does not keep the order of several, which would make the
    # file bytes differ between runs.
    layout = (f"sample<i>.states[k]: k<{n_layers} input of decoder layer k; k={n_layers} output of "
              f"last layer (pre final norm); k={n_layers + 1} after final norm; sample<i>.input_ids int32")
    save_file(tensors, model_dir / "reference.safetensors", metadata={"layout": layout})

    checks = [f"reloaded==in-memory {'bit-exact' if exact else 'within 1e-6'}"]
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
    if name == "llama_tp":
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
    return describe(name, model_dir, save_dtype)


def describe(name, model_dir, save_dtype):
    cfg = json.loads((model_dir / "config.json").read_text())
    rope_keys = {k: cfg[k] for k in ("rope_parameters", "rope_theta", "rope_scaling") if k in cfg}
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


def write_readme(out, vers, models, moe_section=""):
    def cell(value):  # JSON spelling (true/null), bare strings unquoted
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

    columns = ("architecture", "dtype", "hidden", "heads", "kv_heads", "head_dim", "layers",
               "intermediate", "vocab", "tied", "rms_norm_eps", "sliding_window")
    rows = "\n".join(
        f"| `{m['name']}` | " + " | ".join(cell(m[c]) for c in columns) + f" | `{cell(m['rope'])}` |"
        for m in models)
    tp_cfg = MODELS["llama_tp"][1]
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
N(0, {WEIGHT_STD}), biases N(0, {BIAS_STD}), every RMSNorm weight 1 + {NORM_STD}*N(0, 1). All accept token ids < {VOCAB}.
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
and `sliding_window: null`; the mistral config has `sliding_window: 8` and no `layer_types`.
`llama_tp` is for tensor-parallel tests at TP = {", ".join(map(str, TP_SIZES))}: its {tp_cfg.num_attention_heads} q heads and intermediate
size {tp_cfg.intermediate_size} divide evenly by each, while its {tp_cfg.num_key_value_heads} kv heads force key/value-head replication at
TP {max(TP_SIZES)} (each kv head on {max(TP_SIZES) // tp_cfg.num_key_value_heads} ranks). It is listed last (model number {list(MODELS).index("llama_tp")}, weight seed
{SEED}+100+{list(MODELS).index("llama_tp")}), so adding it changed no other fixture.

Semantics the references follow (transformers eager attention): scores are scaled by `head_dim ** -0.5`
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

    (out / "VERSIONS.json").write_text(json.dumps(vers, indent=2) + "\n")
    write_readme(out, vers, models, moe_fixtures.readme_section(moe))
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({total / 2**20:.2f} MiB)")


def generate_only(out, names):
    """generate() in a temporary directory; copy models/<name> of `names`, README.md and VERSIONS.json to `out`."""
    import moe_fixtures
    known = list(MODELS) + list(moe_fixtures.MOE_MODELS)
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
