"""A model directory whose tokenizer is shipped as code, like Kimi-K2.5's: the tiktoken-based
class of fixtures/kimi-tokenizer/tokenization_kimi.py named by auto_map, a byte-level BPE merge
table learnt here from a small corpus (this repository's docs/TRAINING.md), Kimi's special
tokens, and <|im_end|> as the end of turn in generation_config.json (the EOS is [EOS])."""

from __future__ import annotations

import base64
import json
import shutil
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLASS_FILE = HERE / "fixtures" / "kimi-tokenizer" / "tokenization_kimi.py"
CORPUS = HERE.parents[1] / "docs" / "TRAINING.md"

SPECIALS = ["[BOS]", "[EOS]", "[UNK]", "[PAD]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>",
            "<|im_system|>", "<|im_middle|>", "<think>", "</think>", "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
            "<|tool_call_end|>"]


def learn_merges(text: str, n_merges: int) -> dict[bytes, int]:
    """Byte-level BPE: every byte is a token, then the most frequent adjacent pair inside the
    pre-tokenizer's pieces is merged, n_merges times (ties broken by the pair's bytes)."""
    import regex

    from importlib.util import module_from_spec, spec_from_file_location

    from layertap.prep import provide_moved_names
    provide_moved_names()          # the class file imports what Kimi's does
    spec = spec_from_file_location("tokenization_kimi", CLASS_FILE)
    mod = module_from_spec(spec)
    spec.loader.exec_module(mod)
    words = Counter(tuple(bytes([b]) for b in w.encode("utf-8")) for w in regex.findall(mod.PAT, text))
    ranks = {bytes([b]): b for b in range(256)}
    for _ in range(n_merges):
        pairs: Counter = Counter()
        for w, c in words.items():
            for x, y in zip(w, w[1:]):
                pairs[x, y] += c
        if not pairs:
            break
        (x, y), count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if count < 2:
            break
        ranks.setdefault(x + y, len(ranks))
        merged = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == x and w[i + 1] == y:
                    out.append(x + y)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return ranks


def make_kimi_model(directory, chat_template: str, n_merges: int = 300) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ranks = learn_merges(CORPUS.read_text(encoding="utf-8")[:12000], n_merges)
    with open(d / "tiktoken.model", "w") as f:
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(tok).decode()} {rank}\n")
    shutil.copy(CLASS_FILE, d / CLASS_FILE.name)
    ids = {s: len(ranks) + k for k, s in enumerate(SPECIALS)}
    (d / "tokenizer_config.json").write_text(json.dumps({
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "tokenizer_class": "TikTokenTokenizer",
        "bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]", "pad_token": "[PAD]",
        "added_tokens_decoder": {str(i): {"content": s, "special": True, "lstrip": False,
                                          "rstrip": False, "normalized": False, "single_word": False}
                                 for s, i in ids.items()},
        "model_max_length": 1 << 20,
    }, indent=1))
    (d / "chat_template.jinja").write_text(chat_template)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": ids["<|im_end|>"]}))
    return d
