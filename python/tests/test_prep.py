"""layertap-prep: token ids as the chat template renders them, masks exactly on the assistant's
tokens (content and end-of-turn token), malformed records reported by line and counted."""

import json
import subprocess
import sys

import pytest
from chat_families import QWEN3, plain
from helpers import (CHATML, CHATML_GENERATION, GEMMA, LLAMA2, LLAMA3, QWEN3ISH, make_char_tokenizer,
                     pieces_to_expected, write_jsonl)

from layertap.prep import (Renderer, RecordError, end_of_turn_ids, load_tokenizer, main,
                           normalize_record)

SYS_DEFAULT = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


# ---- SmolLM2's real tokenizer (GGUF) -------------------------------------------------------
@pytest.fixture(scope="module")
def smol(smollm2_tokenizer_dir):
    tok = load_tokenizer(smollm2_tokenizer_dir)
    return tok, Renderer(tok, end_of_turn_ids(tok, smollm2_tokenizer_dir))


def _decode_masked(tok, r):
    runs, cur = [], []
    for t, m in zip(r.input_ids, r.loss_mask):
        if m:
            cur.append(t)
        elif cur:
            runs.append(tok.decode(cur))
            cur = []
    if cur:
        runs.append(tok.decode(cur))
    return runs


def test_smollm2_multiturn_openai(smol):
    tok, render = smol
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4."},
            {"role": "user", "content": "And times 3?"},
            {"role": "assistant", "content": "12, since 4 x 3 = 12."}]
    r = render(msgs)
    assert r.input_ids == tok.apply_chat_template(msgs, tokenize=True)["input_ids"]
    assert _decode_masked(tok, r) == ["4.<|im_end|>", "12, since 4 x 3 = 12.<|im_end|>"]
    # the role header and the newline after <|im_end|> are not masked
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    for first, last in r.turns:
        assert r.input_ids[last] == im_end
        assert r.loss_mask[first - 1] == 0 and r.loss_mask[last + 1] == 0
        assert tok.decode(r.input_ids[first - 3:first]) == "assistant\n"


def test_smollm2_matches_transformers_generation_mask(smol):
    """Cross-check against transformers' own assistant mask ({% generation %} around the
    content and <|im_end|> of the same ChatML template)."""
    tok, render = smol
    msgs = [{"role": "user", "content": "Name three colours."},
            {"role": "assistant", "content": "Red, green and blue."},
            {"role": "user", "content": "One more?"},
            {"role": "assistant", "content": " Yellow  "}]
    enc = tok.apply_chat_template(msgs, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True,
                                  chat_template=SYS_ONCE + CHATML_GENERATION)
    r = render(msgs)
    assert r.input_ids == enc["input_ids"]
    assert r.loss_mask == enc["assistant_masks"]


SYS_ONCE = ("{% if messages[0]['role'] != 'system' %}{{ '" + SYS_DEFAULT.replace("\n", "\\n")
            + "' }}{% endif %}")


def test_smollm2_sharegpt_equals_openai(smol):
    tok, render = smol
    share = {"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Hi"},
                               {"from": "gpt", "value": "Hello!"}]}
    openai = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": [{"type": "text", "text": "Hel"},
                                                             {"type": "text", "text": "lo!"}]}]}
    a, b = render(normalize_record(share)[0]), render(normalize_record(openai)[0])
    assert a.input_ids == b.input_ids and a.loss_mask == b.loss_mask
    assert _decode_masked(tok, a) == ["Hello!<|im_end|>"]


def test_smollm2_reply_starting_with_newlines(smol):
    """"\n\nSure" after "assistant\n": SmolLM2 spells the three newlines as "\n\n" + "\n", so
    the first token holds the header's newline and the reply's first one. It is masked (a token
    with any generated character is), as in transformers' {% generation %} mask."""
    tok, render = smol
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "\n\nSure"}]
    r = render(msgs)
    enc = tok.apply_chat_template(msgs, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True,
                                  chat_template=SYS_ONCE + CHATML_GENERATION)
    assert (r.input_ids, r.loss_mask) == (enc["input_ids"], enc["assistant_masks"])
    first = r.turns[0][0]
    assert tok.decode(r.input_ids[first]) == "\n\n"
    assert _decode_masked(tok, r) == ["\n\n\nSure<|im_end|>"]


def test_eot_takes_any_vocabulary_token_or_id(smol):
    """SmolLM2's <|endoftext|> is also its unk token (id 0): still a token of the vocabulary."""
    tok, _ = smol
    assert (tok.unk_token, tok.unk_token_id) == ("<|endoftext|>", 0)
    assert 0 in end_of_turn_ids(tok, None, ["<|endoftext|>"])
    assert end_of_turn_ids(tok, None, ["0"]) == end_of_turn_ids(tok, None, ["<|endoftext|>"])
    assert tok.convert_tokens_to_ids("<|im_end|>") in end_of_turn_ids(tok, None, ["<|im_end|>"])
    with pytest.raises(ValueError, match=r"'<\|nope\|>' is not a token"):
        end_of_turn_ids(tok, None, ["<|nope|>"])
    with pytest.raises(ValueError, match="not an id"):
        end_of_turn_ids(tok, None, [str(len(tok))])


def test_cli_from_gguf_directory(smollm2_gguf_dir, tmp_path):
    """--model pointing at the directory that holds only the GGUF file."""
    src = write_jsonl(tmp_path / "conv.jsonl", [
        {"id": "a", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hey"}]},
        "{not json",
        {"id": 7, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
    ])
    out, report = tmp_path / "tok.jsonl", tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "layertap.prep", "--model", str(smollm2_gguf_dir),
                        "--in", str(src), "--out", str(out), "--report", str(report)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    recs = [json.loads(l) for l in out.read_text().splitlines()]
    assert [x["id"] for x in recs] == ["a", 7]
    assert "conv.jsonl:2: malformed JSON" in r.stderr
    rep = json.loads(report.read_text())
    assert rep["rejected"] == 1 and rep["errors"][0]["line"] == 2


# ---- templates of other families, on character-level tokenizers -----------------------------
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>", "<start_of_turn>", "<end_of_turn>"]


def _tok(tmp_path, template, eos, bos="<s>"):
    d = make_char_tokenizer(tmp_path / "tok", template, SPECIALS, bos=bos, eos=eos)
    return d, load_tokenizer(d)


CONV = [{"role": "system", "content": "Sys."}, {"role": "user", "content": "Q1?"},
        {"role": "assistant", "content": "A1."}, {"role": "user", "content": "Q2?"},
        {"role": "assistant", "content": "A2!"}]


def _check(tok, render, msgs, pieces):
    ids, mask = pieces_to_expected(tok, pieces)
    r = render(msgs)
    assert r.input_ids == tok.apply_chat_template(msgs, tokenize=True)["input_ids"]
    assert r.input_ids == ids
    assert r.loss_mask == mask


def test_chatml(tmp_path):
    d, tok = _tok(tmp_path, CHATML, "<|im_end|>")
    _check(tok, Renderer(tok, end_of_turn_ids(tok, d)), CONV, [
        ("<|im_start|>system\nSys.<|im_end|>\n<|im_start|>user\nQ1?<|im_end|>\n<|im_start|>assistant\n", 0),
        ("A1.<|im_end|>", 1), ("\n<|im_start|>user\nQ2?<|im_end|>\n<|im_start|>assistant\n", 0),
        ("A2!<|im_end|>", 1), ("\n", 0)])


def test_llama3(tmp_path):
    d, tok = _tok(tmp_path, LLAMA3, "<|eot_id|>")
    msgs = [dict(m) for m in CONV]
    msgs[2]["content"] = "  A1.\n"          # the template trims: the mask follows the rendering
    h = "<|start_header_id|>{}<|end_header_id|>\n\n"
    _check(tok, Renderer(tok, end_of_turn_ids(tok, d)), msgs, [
        ("<s>" + h.format("system") + "Sys.<|eot_id|>" + h.format("user") + "Q1?<|eot_id|>"
         + h.format("assistant"), 0), ("A1.<|eot_id|>", 1),
        (h.format("user") + "Q2?<|eot_id|>" + h.format("assistant"), 0), ("A2!<|eot_id|>", 1)])


def test_llama2_system_folded(tmp_path):
    d, tok = _tok(tmp_path, LLAMA2, "</s>")
    _check(tok, Renderer(tok, end_of_turn_ids(tok, d)), CONV, [
        ("<s>[INST] <<SYS>>\nSys.\n<</SYS>>\n\nQ1? [/INST]", 0), (" A1.</s>", 1),
        ("[INST] Q2? [/INST]", 0), (" A2!</s>", 1)])


def test_gemma_end_of_turn_from_generation_config(tmp_path):
    d, tok = _tok(tmp_path, GEMMA, "</s>")
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, eot]}))
    msgs = CONV[1:]
    h = "<start_of_turn>{}\n"
    _check(tok, Renderer(tok, end_of_turn_ids(tok, d)), msgs, [
        ("<s>" + h.format("user") + "Q1?<end_of_turn>\n" + h.format("model"), 0),
        ("A1.<end_of_turn>", 1), ("\n" + h.format("user") + "Q2?<end_of_turn>\n" + h.format("model"), 0),
        ("A2!<end_of_turn>", 1), ("\n", 0)])
    # without knowing <end_of_turn>, a turn has no end-of-turn token and is masked whole
    r = Renderer(tok, {2})(msgs)
    assert r.loss_mask[-1] == 1


def test_reasoning_dropped_from_earlier_turns(tmp_path):
    """A turn that renders differently once later turns follow: the mask covers what the full
    rendering holds for it (the answer without the dropped reasoning) up to <|im_end|>."""
    d, tok = _tok(tmp_path, QWEN3ISH, "<|im_end|>")
    msgs = [{"role": "user", "content": "Q1?"},
            {"role": "assistant", "content": "<think>hmm</think>\n\nA1."},
            {"role": "user", "content": "Q2?"},
            {"role": "assistant", "content": "<think>ok</think>\n\nA2."}]
    _check(tok, Renderer(tok, end_of_turn_ids(tok, d)), msgs, [
        ("<|im_start|>user\nQ1?<|im_end|>\n<|im_start|>assistant\n", 0), ("A1.<|im_end|>", 1),
        ("\n<|im_start|>user\nQ2?<|im_end|>\n<|im_start|>assistant\n", 0),
        ("<think>ok</think>\n\nA2.<|im_end|>", 1), ("\n", 0)])


def test_assistant_first_and_consecutive_turns(tmp_path):
    d, tok = _tok(tmp_path, CHATML, "<|im_end|>")
    msgs = [{"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "A1."}, {"role": "assistant", "content": "A2."}]
    _check(tok, Renderer(tok, end_of_turn_ids(tok, d)), msgs, [
        ("<|im_start|>assistant\n", 0), ("Hi!<|im_end|>", 1),
        ("\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n", 0), ("A1.<|im_end|>", 1),
        ("\n<|im_start|>assistant\n", 0), ("A2.<|im_end|>", 1), ("\n", 0)])


@pytest.mark.parametrize("thinking", [True, False])
def test_qwen3_generation_prompt_is_not_generated(tmp_path, thinking):
    """enable_thinking=false prompts with an empty think block that the earlier turn lacks: the
    earlier turn starts after its header, the last after the empty block the prompt holds. With
    thinking, the last turn's think block is generated."""
    d, tok = _tok(tmp_path, plain(QWEN3), "<|im_end|>")
    msgs = [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}]
    kw = {} if thinking else {"enable_thinking": False}
    head = "\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n"
    last = [(head, 0), ("<think>\n\n</think>\n\nA2<|im_end|>", 1)] if thinking else [
        (head + "<think>\n\n</think>\n\n", 0), ("A2<|im_end|>", 1)]
    ids, mask = pieces_to_expected(tok, [("<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n", 0),
                                         ("A1<|im_end|>", 1)] + last + [("\n", 0)])
    r = Renderer(tok, end_of_turn_ids(tok, d), kw)(msgs)
    assert (r.input_ids, r.loss_mask) == (ids, mask)


@pytest.mark.parametrize("template, why", [
    # the assistant's content is never written: nothing says where the turn is
    ("{% for m in messages %}{% set c = 'OK' if m['role'] == 'assistant' else m['content'] %}"
     "{{ '<|im_start|>' + m['role'] + '\\n' + c + '<|im_end|>\\n' }}{% endfor %}",
     "does not render this assistant turn's content"),
    # text before the turn derived from it (its first character up front)
    ("{{ messages[-1]['content'][:1] }}" + CHATML, "derives other text from it"),
    # text before the turn that depends on what the content holds
    ("{{ '!' if '?' in messages[-1]['content'] }}" + CHATML, "depends on its content"),
])
def test_undecidable_templates_are_refused_by_name(tmp_path, template, why):
    d, tok = _tok(tmp_path, template, "<|im_end|>")
    with pytest.raises(RecordError, match=why):
        Renderer(tok, end_of_turn_ids(tok, d))([CONV[1], {"role": "assistant", "content": "A?"}])


def test_template_errors_are_record_errors(tmp_path):
    d, tok = _tok(tmp_path, LLAMA2, "</s>")
    bad = [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"},
           {"role": "assistant", "content": "c"}]
    with pytest.raises(RecordError, match="chat template refused"):
        Renderer(tok, end_of_turn_ids(tok, d))(bad)


# ---- records, truncation, reporting ---------------------------------------------------------
@pytest.mark.parametrize("rec, why", [
    ({"conversation": []}, "no \"conversations\""),
    ({"messages": []}, "non-empty list"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant turn"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "unknown role"),
    ({"conversations": [{"from": "alien", "value": "x"}]}, "unknown \"from\""),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]},
                   {"role": "assistant", "content": "y"}]}, "only text"),
    ({"messages": [{"role": "assistant", "content": 5}]}, "string or a list"),
    ({"messages": [{"role": "assistant"}]}, "no \"content\""),
    ({"messages": [], "conversations": []}, "both"),
    ([1, 2], "expected a JSON object"),
])
def test_malformed_records(rec, why):
    with pytest.raises(RecordError, match=why):
        normalize_record(rec)


def test_tools_as_a_list_or_a_json_string():
    """A record's tool definitions reach the template as a list: given as one, or as a string
    holding one (ShareGPT function-calling sets); a record without them has None."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    turns = [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]
    assert normalize_record({"conversations": turns, "tools": tools})[2] == tools
    assert normalize_record({"conversations": turns, "tools": json.dumps(tools)})[2] == tools
    assert normalize_record({"conversations": turns})[2] is None


def test_cli_counts_reports_and_truncates(tmp_path):
    d, _ = _tok(tmp_path, CHATML, "<|im_end|>")
    conv = lambda a: {"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": a}]}
    lines = [conv("short"), "", "[1, 2", {"messages": [{"role": "user", "content": "only"}]},
             {"id": "long", **conv("x" * 50)}, conv("y")]
    src = write_jsonl(tmp_path / "c.jsonl", lines)
    out, rep = tmp_path / "t.jsonl", tmp_path / "r.json"
    # header "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n" is 20 tokens
    rc = main(["--model", str(d), "--in", str(src), "--out", str(out), "--max-tokens", "24",
               "--report", str(rep)])
    assert rc == 0
    recs = [json.loads(l) for l in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == ["line-1", "long", "line-6"]
    for r in recs:
        assert len(r["input_ids"]) == len(r["loss_mask"]) <= 24
    # the long one keeps its first 24 tokens: 20 header tokens, then 4 of the answer
    assert recs[1]["loss_mask"] == [0] * 20 + [1] * 4
    report = json.loads(rep.read_text())
    assert report["records"] == 5 and report["written"] == 3 and report["rejected"] == 2
    assert report["truncated"] == 2
    assert [(e["line"], e["error"][:14]) for e in report["errors"]] == [
        (3, "malformed JSON"), (4, "no assistant t")]
    assert main(["--model", str(d), "--in", str(src), "--out", str(out), "--strict"]) == 1


def test_truncation_that_removes_every_assistant_token_rejects(tmp_path):
    d, _ = _tok(tmp_path, CHATML, "<|im_end|>")
    src = write_jsonl(tmp_path / "c.jsonl", [
        {"messages": [{"role": "user", "content": "a long question"}, {"role": "assistant", "content": "b"}]},
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}]}])
    rep = tmp_path / "r.json"
    assert main(["--model", str(d), "--in", str(src), "--out", str(tmp_path / "o.jsonl"),
                 "--max-tokens", "24", "--report", str(rep)]) == 0
    errors = json.loads(rep.read_text())["errors"]
    assert len(errors) == 1
    assert errors[0]["line"] == 1 and "no assistant token within the first 24" in errors[0]["error"]
