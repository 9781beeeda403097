"""Test helpers: character-level tokenizers with any chat template (so expected masks can be
built piece by piece), and chat templates in the styles of common model families."""

from __future__ import annotations

import json
import string
from pathlib import Path

CHARS = string.ascii_letters + string.digits + " \n.,!?'\":;-()+=*/<>|_#"


def make_char_tokenizer(directory, template: str, specials: list[str], bos: str | None,
                        eos: str, max_vocab: int | None = None):
    """A fast tokenizer: the special tokens first (ids 0..), then one token per character of
    CHARS; unknown characters map to the first special (the unk)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {}
    for s in specials:
        vocab[s] = len(vocab)
    for c in CHARS:
        vocab.setdefault(c, len(vocab))
    if max_vocab is not None:
        assert len(vocab) <= max_vocab, (len(vocab), max_vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=specials[0]))
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=specials[0],
                                   bos_token=bos, eos_token=eos)
    fast.chat_template = template
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(d))
    return d


def pieces_to_expected(tok, pieces: list[tuple[str, int]]):
    """Token ids and mask of text pieces tokenized one by one (exact for the char tokenizer)."""
    ids, mask = [], []
    for text, flag in pieces:
        t = tok(text, add_special_tokens=False)["input_ids"]
        ids += t
        mask += [flag] * len(t)
    return ids, mask


CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

CHATML_GENERATION = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + "
    "m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

# Llama-2 / Mistral style: system folded into the first user turn, no role header for the
# assistant, which ends with the EOS token.
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}"
    "{% set msgs = messages[1:] %}{% else %}{% set sys = none %}{% set msgs = messages %}{% endif %}"
    "{{ bos_token }}{% for m in msgs %}{% if m['role'] == 'user' %}"
    "{% if loop.first and sys %}{{ '[INST] <<SYS>>\n' + sys + '\n<</SYS>>\n\n' + m['content'] + ' [/INST]' }}"
    "{% else %}{{ '[INST] ' + m['content'] + ' [/INST]' }}{% endif %}"
    "{% elif m['role'] == 'assistant' %}{{ ' ' + m['content'] + eos_token }}"
    "{% else %}{{ raise_exception('roles must alternate user/assistant') }}{% endif %}{% endfor %}")

# Gemma style: the assistant is called "model" and turns end with <end_of_turn>, which is not
# the tokenizer's EOS.
GEMMA = (
    "{{ bos_token }}{% for m in messages %}{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + m['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")

# Qwen3 style: reasoning is dropped from earlier assistant turns once a later turn follows, so a
# turn renders differently in a prefix of the conversation than in the whole conversation.
QWEN3ISH = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}{% set c = m['content'] %}"
    "{% if not loop.last and '</think>' in c %}{% set c = c.split('</think>')[-1] | trim %}{% endif %}"
    "{{ '<|im_start|>assistant\n' + c + '<|im_end|>\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path
