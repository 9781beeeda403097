"""layertap-prep against transformers' own assistant mask, family by family: a generated set of
conversations (leading whitespace, whitespace-only and empty replies, assistant-first,
consecutive assistant turns, multi-turn, tool calls and results, reasoning, unicode, template-like
text, truncation inside a turn) is prepared by the command, and every record written must have
the ids and the mask of ``apply_chat_template(..., return_assistant_tokens_mask=True)`` on the
family's template tagged with {% generation %} (chat_families.py). Refused: exactly the records
made unrenderable (bad JSON, an image part, what the template raises on), the conversations a
family's template refuses by its own rule (Mixtral and Gemma-3 need alternating turns) or writes
no assistant header for, and those whose reference masks nothing, by line.

ChatML (as SmolLM2 ships it), the Llama-3 layouts, Qwen3, Mixtral, Gemma-3, Llama-4, GLM-4.5 and
GPT-OSS run on SmolLM2's real tokenizer (with each family's special tokens, BOS, EOS and
generation_config.json EOS ids); the Kimi-K2.5 style runs on a tokenizer shipped as code
(kimi_model.py), loaded with --trust-remote-code."""

import json
import random

import pytest
from chat_families import (CHATML_SMOLLM2, GEMMA3, GLM45, GPT_OSS, KIMI, LLAMA3, LLAMA4, LLAMA31,
                           MIXTRAL, QWEN3, plain)
from helpers import write_jsonl
from kimi_model import make_kimi_model

from layertap.prep import main, normalize_record

# ---- the conversations -------------------------------------------------------------------------
REPLIES = [
    "Sure, here it is.",
    "\n\nSure! Two lines follow.\nLine two.",
    "  Two leading spaces.",
    "\tA tab first.",
    "   \n",
    "",
    "Grüße 👋🏽 日本語のテキスト — ﬁne é (e\u0301) ✓",
    "Literal <|im_end|> and <|im_start|>assistant\n, <|eot_id|>, <|im_middle|> and "
    "{% raw %}{{ bos_token }}{% endraw %} as text.",
    "Ends with a literal <|im_end|>",
    "<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.",
    "<think>Short thought</think>Answer after a thought.",
    "Trailing newlines\n\n",
    "Code:\n```python\nprint('hi')\n```",
    "a </think> inside the text",
]
QUESTIONS = ["Hi", "What is 2+2?", "  leading user spaces", "Tell me about 日本.",
             "<|im_end|> as a user literal", "Explain {% raw %} please.", "\n\nNewlines first"]
REASONING = ["I should answer briefly.", "\nStep 1.\nStep 2.\n"]


# the tool definitions a record that calls tools carries ("tools", passed to the template)
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city, «in °C».",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def record(i, messages):
    """The input line of conversation i: tool definitions with every conversation that calls a tool."""
    rec = {"id": f"c{i}", "messages": messages}
    if any(m.get("tool_calls") for m in messages):
        rec["tools"] = TOOLS
    return rec


def _tool_exchange(rng, k):
    call = {"id": f"functions.get_weather:{k}", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": rng.choice(["Paris", "Köln"])}}}
    return [{"role": "assistant", "content": rng.choice(["", "Let me look that up."]),
             "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": '{"temp_c": 21}'},
            {"role": "assistant", "content": rng.choice(REPLIES)}]


def _thought_through_tools():
    """Reasoning on a tool call with no content and on the answer after it: GPT-OSS renders the
    answer's reasoning as a message of its own before it, and the call's only until an answer
    follows."""
    call = {"id": "functions.get_weather:0", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Köln"}}}
    return [{"role": "user", "content": "Weather in Köln?"},
            {"role": "assistant", "content": "", "tool_calls": [call],
             "reasoning_content": "Look it up.", "thinking": "Look it up."},
            {"role": "tool", "tool_call_id": call["id"], "content": '{"temp_c": 21}'},
            {"role": "assistant", "content": "It is 21 °C.", "reasoning_content": "It said 21.",
             "thinking": "It said 21."}]


def _reply(rng):
    m = {"role": "assistant", "content": rng.choice(REPLIES)}
    if rng.random() < 0.3:     # GPT-OSS's template reads the reasoning as "thinking"
        m["reasoning_content"] = m["thinking"] = rng.choice(REASONING)
    return m


def conversations(n_random=30, seed=16):
    """The fixed cases (each reply alone, and the shapes the issue lists), then random mixes."""
    convs = [[{"role": "user", "content": "Q?"}, {"role": "assistant", "content": r}] for r in REPLIES]
    convs += [
        [{"role": "assistant", "content": "Hello, how can I help?"}, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "\n\nGood."}],                                    # assistant first
        [{"role": "user", "content": "Two answers?"}, {"role": "assistant", "content": "First."},
         {"role": "assistant", "content": "<think>more</think>Second."}],                   # consecutive
        [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "r"},
         {"role": "assistant", "content": "B"}],                                            # consecutive
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1?"},
         {"role": "assistant", "content": "<think>one</think>One."}, {"role": "user", "content": "2?"},
         {"role": "assistant", "content": "  Two."}, {"role": "user", "content": "3?"},
         {"role": "assistant", "content": "\tThree.", "reasoning_content": "count"}],         # multi-turn
        [{"role": "user", "content": "Weather in Paris?"}] + _tool_exchange(random.Random(1), 0),
        [{"role": "user", "content": "Weather twice?"}]
        + _tool_exchange(random.Random(2), 0)[:2] + _tool_exchange(random.Random(3), 1),
        _thought_through_tools(),
    ]
    rng = random.Random(seed)
    for _ in range(n_random):
        msgs = [{"role": "system", "content": "You are terse."}] if rng.random() < 0.3 else []
        if rng.random() < 0.1:
            msgs.append(_reply(rng))
        for k in range(rng.randint(1, 3)):
            msgs.append({"role": "user", "content": rng.choice(QUESTIONS)})
            msgs += _tool_exchange(rng, k) if rng.random() < 0.2 else [_reply(rng)]
            if rng.random() < 0.15:
                msgs.append(_reply(rng))
        convs.append(msgs)
    return convs


# what each family's template raises on (chat_families.py), appended to the set
RAISES = {
    "chatml": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]}],
    "llama3": [{"role": "user", "content": "Q"}, {"role": "system", "content": "late"},
               {"role": "assistant", "content": "A"}],
    "qwen3": [{"role": "tool", "tool_call_id": "x", "content": "{}"}, {"role": "assistant", "content": "A"}],
    "kimi": [{"role": "user", "content": "Q"}, {"role": "tool", "content": "{}"},
             {"role": "assistant", "content": "A"}],
}
RAISES["llama31"] = RAISES["llama3"]
RAISES["mixtral"] = [{"role": "user", "content": "Q"}, {"role": "tool", "content": "{}"},
                     {"role": "assistant", "content": "A"}]
RAISES["gemma3"] = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"},
                    {"role": "assistant", "content": "B"}]
RAISES["llama4"] = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c", "name": "f", "arguments": {}}]}]        # a call not wrapped in "function"
RAISES["glm45"] = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"city": "Paris"}'}}]}]
RAISES["gptoss"] = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "Calling.",
                                                      "thinking": "t", "tool_calls": [
    {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]}]


def _alternates(msgs):
    """Mixtral's and Gemma-3's rule: after an optional system message, user first, then
    alternating (any role but user counts as the assistant's turn)."""
    rest = msgs[1:] if msgs[0]["role"] == "system" else msgs
    return all((m["role"] == "user") == (k % 2 == 0) for k, m in enumerate(rest))


def _assistant_first_with_tools(msgs):
    rest = msgs[1:] if msgs[0]["role"] == "system" else msgs
    return rest[0]["role"] == "assistant" and any(m.get("tool_calls") for m in msgs)


# the generated conversations a family refuses, with prep's reason: the template's own rule, or
# no assistant header (Llama-4 writes the first message as the user's when tools are given)
REFUSED = {
    "mixtral": [(lambda msgs: not _alternates(msgs) or any(
        m["role"] not in ("user", "assistant") for m in msgs[1:]), "chat template refused")],
    "gemma3": [(lambda msgs: not _alternates(msgs), "chat template refused")],
    "llama4": [(_assistant_first_with_tools, "no assistant header")],
}
IMAGE = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                      {"role": "assistant", "content": "A cat."}]}


# ---- the families ------------------------------------------------------------------------------
# special tokens, BOS (GLM writes its prefix as text), EOS and generation_config.json's EOS ids as
# the models ship them (<|endoftext|> is SmolLM2's own)
TOKENS = {
    "mixtral": (["<s>", "</s>"], "<s>", "</s>", ["</s>"]),
    "gemma3": (["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>",
               ["<eos>", "<end_of_turn>"]),
    "llama4": (["<|begin_of_text|>", "<|end_of_text|>", "<|header_start|>", "<|header_end|>", "<|eot|>",
                "<|eom|>", "<|python_start|>", "<|python_end|>"], "<|begin_of_text|>", "<|eot|>",
               ["<|end_of_text|>", "<|eom|>", "<|eot|>"]),
    "glm45": (["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
               "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
               "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>"],
              None, "<|endoftext|>", ["<|endoftext|>", "<|user|>", "<|observation|>"]),
    "gptoss": (["<|startoftext|>", "<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|return|>",
                "<|call|>", "<|constrain|>"], "<|startoftext|>", "<|return|>",
               ["<|return|>", "<|endoftext|>", "<|call|>"]),
}

@pytest.fixture(scope="module")
def family_dirs(smollm2_tokenizer_dir, tmp_path_factory):
    """name -> (model directory, tagged template, template args)."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("families")
    out = {"chatml": (smollm2_tokenizer_dir, CHATML_SMOLLM2, {})}
    for name, template, extra in [("llama3", LLAMA3, True), ("llama31", LLAMA31, True), ("qwen3", QWEN3, False)]:
        tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_dir))
        if extra:
            tok.add_special_tokens({"additional_special_tokens": [
                "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]})
        tok.chat_template = plain(template)
        d = root / name
        tok.save_pretrained(str(d))
        if extra:
            (d / "generation_config.json").write_text(json.dumps(
                {"eos_token_id": [tok.eos_token_id, tok.convert_tokens_to_ids("<|eot_id|>")]}))
        out[name] = (d, template, {})
    out["qwen3-nothink"] = (out["qwen3"][0], QWEN3, {"enable_thinking": False})
    for name, template in [("mixtral", MIXTRAL), ("gemma3", GEMMA3), ("llama4", LLAMA4),
                           ("glm45", GLM45), ("gptoss", GPT_OSS)]:
        specials, bos, eos, eos_ids = TOKENS[name]
        tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_dir))
        tok.add_special_tokens({"additional_special_tokens": specials})
        tok.add_special_tokens({"eos_token": eos, **({"bos_token": bos} if bos else {})})
        tok.chat_template = plain(template)
        for t in specials:      # one token each, as the models have them
            assert len(tok(t, add_special_tokens=False)["input_ids"]) == 1, t
        d = root / name
        tok.save_pretrained(str(d))
        (d / "generation_config.json").write_text(json.dumps(
            {"eos_token_id": [tok.convert_tokens_to_ids(t) for t in eos_ids]}))
        out[name] = (d, template, {})
    out["glm45-nothink"] = (out["glm45"][0], GLM45, {"enable_thinking": False})
    out["kimi"] = (make_kimi_model(root / "kimi", plain(KIMI)), KIMI, {})
    out["kimi-nothink"] = (out["kimi"][0], KIMI, {"thinking": False})
    return out


def reference(tok, messages, tagged, kw, tools=None):
    """ids, mask and text from transformers' {% generation %} tracking. For a slow tokenizer
    (no offsets in transformers) the spans are mapped to tokens with tiktoken's own offsets and
    transformers' rule (a token with any character in a span)."""
    if getattr(tok, "is_fast", False):
        enc = tok.apply_chat_template(messages, tools=tools, chat_template=tagged, tokenize=True,
                                      return_dict=True, return_assistant_tokens_mask=True, **kw)
        text = tok.apply_chat_template(messages, tools=tools, chat_template=tagged, tokenize=False, **kw)
        return list(enc["input_ids"]), list(enc["assistant_masks"]), text
    from transformers.utils.chat_template_utils import render_jinja_template

    msgs = [{k: v for k, v in m.items() if v is not None} for m in messages]
    (text,), (spans,) = render_jinja_template(conversations=[msgs], tools=tools, chat_template=tagged,
                                              return_assistant_tokens_mask=True,
                                              **tok.special_tokens_map, **kw)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    decoded, starts = tok.model.decode_with_offsets(ids)
    assert decoded == text
    pieces = [tok.model.decode_single_token_bytes(i) for i in ids]
    ends = [len(b"".join(pieces[:k + 1]).decode("utf-8", "replace")) for k in range(len(ids))]
    mask = [int(any(e > a and s < b for a, b in spans)) for s, e in zip(starts, ends)]
    return ids, mask, text


def _load(d, name):
    from layertap.prep import load_tokenizer
    return load_tokenizer(d, trust_remote_code=name.startswith("kimi"))


def _args(d, name, kw):
    args = ["--model", str(d)]
    if name.startswith("kimi"):
        args.append("--trust-remote-code")
    for k, v in kw.items():
        args += ["--template-arg", f"{k}={json.dumps(v)}"]
    return args


FAMILIES = ["chatml", "llama3", "llama31", "qwen3", "qwen3-nothink", "kimi", "kimi-nothink", "mixtral",
            "gemma3", "llama4", "glm45", "glm45-nothink", "gptoss"]


@pytest.mark.parametrize("name", FAMILIES)
def test_family_matches_generation_reference(family_dirs, name, tmp_path):
    d, tagged, kw = family_dirs[name]
    tok = _load(d, name)
    convs = conversations()
    lines = [record(i, m) for i, m in enumerate(convs)]
    family = name.split("-")[0]
    # what each line must give: its reference, or the reason it is refused (the family's rule,
    # or a reference with nothing to mask: GLM without thinking generates nothing visible for
    # an empty reply)
    refs, bad = {}, {}
    for n, m in enumerate(convs, 1):
        why = next((r for rule, r in REFUSED.get(family, []) if rule(m)), None)
        if why is None:
            messages, _, tools = normalize_record(lines[n - 1])
            refs[n] = reference(tok, messages, tagged, kw, tools)
            if not any(refs[n][1]):
                why = "no assistant token"
                del refs[n]
        if why:
            bad[n] = why
    bad.update({len(lines) + 1: "malformed JSON", len(lines) + 2: "only text",
                len(lines) + 3: "chat template refused"})
    lines += ["{\"messages\": [", IMAGE, {"id": "raises", "messages": RAISES[family]}]
    src = write_jsonl(tmp_path / "in.jsonl", lines)
    out, rep = tmp_path / "out.jsonl", tmp_path / "report.json"
    assert main([*_args(d, name, kw), "--in", str(src), "--out", str(out), "--report", str(rep)]) == 0
    report = json.loads(rep.read_text())
    assert report["rejected"] == len(bad) and report["written"] == len(refs) >= 20, report["errors"]
    if family in TOKENS:       # the EOS and generation_config.json's EOS ids end turns
        _, _, eos, eos_ids = TOKENS[family]
        assert report["end_of_turn_ids"] == sorted({tok.convert_tokens_to_ids(t)
                                                    for t in [eos, *eos_ids]})
    assert {e["line"]: e["error"] for e in report["errors"]}.keys() == bad.keys()
    for e in report["errors"]:
        assert bad[e["line"]] in e["error"], e
    got = [json.loads(l) for l in out.read_text().splitlines()]
    if name == "chatml":       # the shipped template renders as its tagged copy does
        for m in convs:
            assert tok.apply_chat_template(m, tokenize=False) == \
                tok.apply_chat_template(m, tokenize=False, chat_template=plain(tagged))
    assert sum("tools" in rec for rec in lines[:len(convs)]) >= 2
    assert len(got) == len(refs)
    for rec, (ids, mask, text) in zip(got, refs.values()):
        assert rec["input_ids"] == ids, (rec["id"], text)
        assert rec["loss_mask"] == mask, (rec["id"], text, _diff(tok, ids, rec["loss_mask"], mask))


def _diff(tok, ids, got, want):
    return [(t, tok.decode([ids[t]]), got[t], want[t]) for t in range(len(ids)) if got[t] != want[t]]


@pytest.mark.parametrize("name", ["chatml", "qwen3", "kimi", "mixtral", "gemma3", "llama4", "glm45",
                                  "gptoss"])
def test_truncation_inside_an_assistant_turn(family_dirs, name, tmp_path):
    """--max-tokens N cuts inside the last assistant turn: the first N ids and mask entries of
    the reference; a conversation whose assistant tokens all lie past N is refused."""
    d, tagged, kw = family_dirs[name]
    tok = _load(d, name)
    msgs = [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "Short."},
            {"role": "user", "content": "Q2"},
            {"role": "assistant", "content": "\n\nA long answer, " + "word " * 20}]
    ids, mask, _ = reference(tok, msgs, tagged, kw)
    last_turn = max(t for t in range(len(mask)) if mask[t] and not mask[t - 1])
    n = last_turn + 5
    late = [{"role": "user", "content": "word " * (n + 10)}, {"role": "assistant", "content": "A"}]
    src = write_jsonl(tmp_path / "in.jsonl", [{"messages": msgs}, {"messages": late}])
    out, rep = tmp_path / "out.jsonl", tmp_path / "r.json"
    assert main([*_args(d, name, kw), "--in", str(src), "--out", str(out), "--max-tokens", str(n),
                 "--report", str(rep)]) == 0
    (rec,) = [json.loads(l) for l in out.read_text().splitlines()]
    assert rec["input_ids"] == ids[:n] and rec["loss_mask"] == mask[:n]
    assert rec["loss_mask"][-5:] == [1] * 5
    errors = json.loads(rep.read_text())["errors"]
    assert [e["line"] for e in errors] == [2] and f"within the first {n}" in errors[0]["error"]


@pytest.mark.parametrize("name", ["qwen3", "llama3"])
def test_sharegpt_function_calls_equal_openai_tool_calls(family_dirs, name, tmp_path):
    """LLaMA-Factory's ShareGPT tool format (a "system" and a "tools" string beside the turns,
    "function_call" turns holding the call as JSON text, "observation" results) is prepared as
    the OpenAI record it stands for, and both match the {% generation %} reference, the call
    masked as generated."""
    d, tagged, kw = family_dirs[name]
    call = {"name": "get_weather", "arguments": {"city": "Köln"}}
    sharegpt = {"id": "t", "system": "Be brief.", "tools": json.dumps(TOOLS), "conversations": [
        {"from": "human", "value": "Weather in Köln?"},
        {"from": "function_call", "value": json.dumps(call)},
        {"from": "observation", "value": '{"temp_c": 21}'},
        {"from": "gpt", "value": "It is 21 °C."}]}
    openai = {"id": "t", "tools": TOOLS, "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Köln?"},
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": call}]},
        {"role": "tool", "content": '{"temp_c": 21}'},
        {"role": "assistant", "content": "It is 21 °C."}]}
    outs = []
    for k, rec in enumerate([sharegpt, openai]):
        src, out = write_jsonl(tmp_path / f"in{k}.jsonl", [rec]), tmp_path / f"out{k}.jsonl"
        assert main([*_args(d, name, kw), "--in", str(src), "--out", str(out)]) == 0
        outs.append(out.read_text())
    assert outs[0] == outs[1]
    got = json.loads(outs[0])
    tok = _load(d, name)
    ids, mask, _ = reference(tok, openai["messages"], tagged, kw, TOOLS)
    assert (got["input_ids"], got["loss_mask"]) == (ids, mask)
    masked = tok.decode([i for i, m in zip(ids, mask) if m])
    assert "get_weather" in masked and "It is 21" in masked


def test_workers_write_the_same_bytes(family_dirs, tmp_path):
    d, _, _ = family_dirs["chatml"]
    lines = [record(i, m) for i, m in enumerate(conversations(n_random=150))]
    lines.insert(7, "not json")
    src = write_jsonl(tmp_path / "in.jsonl", lines)
    outs = []
    for w in (1, 3):
        out, rep = tmp_path / f"out{w}.jsonl", tmp_path / f"r{w}.json"
        assert main(["--model", str(d), "--in", str(src), "--out", str(out), "--report", str(rep),
                     "--workers", str(w)]) == 0
        report = json.loads(rep.read_text())
        outs.append((out.read_bytes(), report["errors"], report["written"]))
    assert outs[0] == outs[1]
    assert outs[0][1][0]["line"] == 8


def test_kimi_tokenizer_loads_in_a_fresh_process(family_dirs, tmp_path):
    """The class file imports bytes_to_unicode from transformers' GPT-2 module, as Kimi-K2.5's
    tokenization_kimi.py does; transformers 5 moved it, and a fresh layertap-prep process (no
    test module has provided the name) must still load the tokenizer and write the record as
    the in-process reference has it."""
    import subprocess
    import sys

    d, tagged, kw = family_dirs["kimi"]
    msgs = [{"role": "user", "content": "Weather?"}] + _tool_exchange(random.Random(4), 0)
    src = write_jsonl(tmp_path / "in.jsonl", [record(0, msgs)])
    out = tmp_path / "o.jsonl"
    r = subprocess.run([sys.executable, "-m", "layertap.prep", *_args(d, "kimi", kw), "--in", str(src),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (rec,) = [json.loads(l) for l in out.read_text().splitlines()]
    ids, mask, _ = reference(_load(d, "kimi"), msgs, tagged, kw, TOOLS)
    assert (rec["input_ids"], rec["loss_mask"]) == (ids, mask)


def test_remote_code_tokenizer_needs_the_flag(family_dirs, tmp_path, capsys):
    d, _, _ = family_dirs["kimi"]
    src = write_jsonl(tmp_path / "in.jsonl", [{"messages": [{"role": "user", "content": "Q"},
                                                            {"role": "assistant", "content": "A"}]}])
    assert main(["--model", str(d), "--in", str(src), "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "tokenization_kimi.TikTokenTokenizer" in err and "--trust-remote-code" in err
