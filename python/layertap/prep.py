"""layertap-prep: conversations to the token JSONL that `layertap extract` reads.

Input: JSON Lines, one conversation a line, either ShareGPT
(``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}``) or
OpenAI-style (``{"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": ...}]}``),
with an optional ``id`` (or ``conversation_id``).

Each conversation is rendered with the model directory's own tokenizer and chat template (local
files only) and tokenized as ``apply_chat_template(..., tokenize=True)`` would
(``add_special_tokens=False``: the template writes any BOS itself).

The loss mask is derived by rendering, not by patterns over the template. For assistant turn j:

1. ``P`` = the conversation up to turn j rendered with ``add_generation_prompt=True``: the text
   before the assistant starts producing (the role header included). The full rendering must
   begin with ``P``.
2. ``A`` = the conversation up to and including turn j. When the full rendering begins with
   ``A``, the turn is the characters ``[len(P), len(A))``; otherwise (a template that renders
   earlier turns differently once later ones follow) the turn runs from ``len(P)`` to its first
   end-of-turn token.
3. A token belongs to the turn when its first character does. In the turn, the mask is 1 on
   every token up to and including the first end-of-turn token (the tokenizer's EOS and the
   model's ``generation_config.json`` EOS ids, plus ``--eot``), and 0 on what the template
   writes after it (for ChatML the newline after ``<|im_end|>``). A turn with no end-of-turn
   token is masked whole.

Truncation (``--max-tokens N``): a longer conversation keeps its first N tokens and mask
entries; it is then rejected if no assistant token remains. Rejected and malformed records are
reported by line number (on stderr and in ``--report``) and counted; none is dropped silently.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["load_tokenizer", "end_of_turn_ids", "normalize_record", "Renderer", "RecordError",
           "prepare", "main"]

SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "model": "assistant",
    "bard": "assistant", "bing": "assistant",
    "system": "system",
    "tool": "tool", "function": "tool", "observation": "tool",
}
OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool"}


class RecordError(ValueError):
    """A conversation that cannot be prepared; the message says why."""


# ---- tokenizer -------------------------------------------------------------------------------
def load_tokenizer(model_dir: str | os.PathLike, gguf_file: str | None = None):
    """The model directory's tokenizer, from local files only. A directory holding a single
    ``.gguf`` file and no tokenizer files is read through transformers' GGUF support."""
    from transformers import AutoTokenizer

    d = Path(model_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"--model {d}: not a directory")
    if gguf_file is None:
        has_tok = any((d / n).exists() for n in ("tokenizer.json", "tokenizer_config.json",
                                                "tokenizer.model", "vocab.json"))
        ggufs = sorted(p.name for p in d.glob("*.gguf"))
        if not has_tok and len(ggufs) == 1:
            gguf_file = ggufs[0]
        elif not has_tok:
            raise FileNotFoundError(
                f"--model {d}: no tokenizer files (tokenizer.json, tokenizer_config.json) "
                f"{'and several .gguf files: pass --gguf' if ggufs else 'and no .gguf file'}")
    kw = {"local_files_only": True}
    if gguf_file:
        kw["gguf_file"] = gguf_file
    tok = AutoTokenizer.from_pretrained(str(d), **kw)
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"{d}: the tokenizer is not a fast (Rust) tokenizer; layertap-prep "
                         "needs character offsets to place turns")
    if not tok.chat_template:
        raise ValueError(f"{d}: the tokenizer has no chat template")
    return tok


def end_of_turn_ids(tok, model_dir: str | os.PathLike | None = None,
                    extra: list[str] | None = None) -> set[int]:
    """Token ids that end an assistant turn: the tokenizer's EOS, the EOS ids of the model's
    generation_config.json, and ``extra`` (token strings or ids)."""
    ids: set[int] = set()
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    if model_dir is not None:
        gc = Path(model_dir) / "generation_config.json"
        if gc.is_file():
            eos = json.loads(gc.read_text()).get("eos_token_id")
            if isinstance(eos, int):
                ids.add(eos)
            elif isinstance(eos, list):
                ids.update(int(e) for e in eos if isinstance(e, int))
    for e in extra or []:
        if str(e).isdigit():
            ids.add(int(e))
            continue
        i = tok.convert_tokens_to_ids(e)
        if i is None or i == tok.unk_token_id:
            raise ValueError(f"--eot {e!r} is not a token of this tokenizer")
        ids.add(int(i))
    return ids


# ---- records ---------------------------------------------------------------------------------
def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RecordError(f"{where}: content part {k} is {kind!r}; only text is supported")
        return "".join(parts)
    raise RecordError(f"{where}: content must be a string or a list of text parts, "
                      f"found {type(content).__name__}")


def normalize_record(rec: Any) -> tuple[list[dict], Any]:
    """(messages with ``role``/``content``, id or None) for a ShareGPT or OpenAI-style record."""
    if not isinstance(rec, dict):
        raise RecordError(f"expected a JSON object, found {type(rec).__name__}")
    if "messages" in rec and "conversations" in rec:
        raise RecordError("has both \"messages\" and \"conversations\"")
    key = "messages" if "messages" in rec else "conversations" if "conversations" in rec else None
    if key is None:
        raise RecordError("no \"conversations\" (ShareGPT) or \"messages\" (OpenAI) list")
    turns = rec[key]
    if not isinstance(turns, list) or not turns:
        raise RecordError(f"\"{key}\" must be a non-empty list")
    messages = []
    for i, t in enumerate(turns):
        where = f"{key}[{i}]"
        if not isinstance(t, dict):
            raise RecordError(f"{where}: expected an object, found {type(t).__name__}")
        if "role" in t:
            role = t["role"]
            if role not in OPENAI_ROLES:
                raise RecordError(f"{where}: unknown role {role!r}")
            role = "system" if role == "developer" else role
            if "content" not in t:
                raise RecordError(f"{where}: no \"content\"")
            msg = {k: v for k, v in t.items() if k not in ("role", "content")}
            msg.update(role=role, content=_text(t["content"], where))
        elif "from" in t:
            frm = t["from"]
            role = SHAREGPT_ROLES.get(str(frm).lower()) if isinstance(frm, str) else None
            if role is None:
                raise RecordError(f"{where}: unknown \"from\" {frm!r}")
            if "value" not in t:
                raise RecordError(f"{where}: no \"value\"")
            msg = {"role": role, "content": _text(t["value"], where)}
        else:
            raise RecordError(f"{where}: neither \"role\"/\"content\" nor \"from\"/\"value\"")
        messages.append(msg)
    if not any(m["role"] == "assistant" for m in messages):
        raise RecordError("no assistant turn")
    rid = rec.get("id", rec.get("conversation_id"))
    if rid is not None and not isinstance(rid, (str, int)) or isinstance(rid, bool):
        raise RecordError(f"\"id\" must be a string or an integer, found {type(rid).__name__}")
    return messages, rid


# ---- rendering -------------------------------------------------------------------------------
@dataclass
class Rendered:
    input_ids: list[int]
    loss_mask: list[int]
    text: str
    turns: list[tuple[int, int]] = field(default_factory=list)   # token [first, last] masked


class Renderer:
    """Renders conversations with a tokenizer's chat template and derives the assistant mask."""

    def __init__(self, tok, eot_ids: set[int], template_kwargs: dict | None = None):
        self.tok = tok
        self.eot_ids = set(eot_ids)
        self.kw = dict(template_kwargs or {})

    def render_text(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False,
                                            add_generation_prompt=generation_prompt, **self.kw)

    def __call__(self, messages: list[dict]) -> Rendered:
        try:
            full = self.render_text(messages, False)
        except Exception as e:  # jinja raise_exception, missing keys, ...
            raise RecordError(f"the chat template refused the conversation: {e}") from None
        enc = self.tok(full, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        offsets = [tuple(o) for o in enc["offset_mapping"]]
        if not ids:
            raise RecordError("the conversation renders to no tokens")
        starts = [s for s, _ in offsets]
        mask = [0] * len(ids)
        turns = []
        for j, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            try:
                prefix = self.render_text(messages[:j], True)
            except Exception as e:
                raise RecordError(f"turn {j}: the chat template cannot render the conversation "
                                  f"before it with a generation prompt ({e})") from None
            if not full.startswith(prefix):
                raise RecordError(
                    f"turn {j}: the template renders the conversation before this assistant "
                    "turn (with its generation prompt) differently from the full conversation, "
                    "so where the turn starts is not defined")
            begin = len(prefix)
            try:
                upto = self.render_text(messages[: j + 1], False)
            except Exception:
                upto = None
            end = len(upto) if upto is not None and full.startswith(upto) and len(upto) > begin else None
            # tokens whose first character lies in the turn
            first = next((t for t, s in enumerate(starts) if s >= begin), len(ids))
            if first > 0 and offsets[first - 1][1] > begin and offsets[first - 1][0] < begin:
                raise RecordError(f"turn {j}: token {first - 1} spans the role header and the "
                                  "content; the turn cannot be separated at a token boundary")
            if end is not None:
                last = first
                while last < len(ids) and starts[last] < end:
                    last += 1
                span = range(first, last)                       # [first, last)
                stop = next((t for t in span if ids[t] in self.eot_ids), None)
                if stop is not None:
                    span = range(first, stop + 1)
            else:
                stop = next((t for t in range(first, len(ids)) if ids[t] in self.eot_ids), None)
                if stop is None:
                    raise RecordError(
                        f"turn {j}: the template renders it differently once later turns follow, "
                        "and no end-of-turn token closes it (add one with --eot)")
                span = range(first, stop + 1)
            if len(span) == 0:
                raise RecordError(f"turn {j}: the assistant turn renders to no tokens")
            for t in span:
                mask[t] = 1
            turns.append((span.start, span.stop - 1))
        return Rendered(ids, mask, full, turns)


# ---- the command -----------------------------------------------------------------------------
@dataclass
class Summary:
    records: int = 0
    written: int = 0
    rejected: int = 0
    truncated: int = 0
    tokens: int = 0
    assistant_tokens: int = 0
    errors: list[dict] = field(default_factory=list)


def prepare(in_path: str, out_path: str, renderer: Renderer, max_tokens: int | None = None,
            log=sys.stderr, progress_every: float = 5.0) -> Summary:
    summary = Summary()
    tmp = out_path + ".tmp"
    t0 = last = time.monotonic()
    with open(in_path, "r", encoding="utf-8") as fin, open(tmp, "w", encoding="utf-8") as fout:
        for line_no, line in enumerate(fin, start=1):
            if not line.strip():
                continue
            summary.records += 1
            rid = None
            try:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise RecordError(f"malformed JSON at column {e.colno}: {e.msg}") from None
                messages, rid = normalize_record(rec)
                r = renderer(messages)
                ids, mask = r.input_ids, r.loss_mask
                if max_tokens is not None and len(ids) > max_tokens:
                    ids, mask = ids[:max_tokens], mask[:max_tokens]
                    summary.truncated += 1
                    if not any(mask):
                        raise RecordError(f"no assistant token within the first {max_tokens} "
                                          f"tokens (the conversation has {len(r.input_ids)})")
            except RecordError as e:
                summary.rejected += 1
                err = {"line": line_no, "error": str(e)}
                if rid is not None:
                    err["id"] = rid
                summary.errors.append(err)
                print(f"layertap-prep: {in_path}:{line_no}"
                      f"{' (id ' + repr(rid) + ')' if rid is not None else ''}: {e}", file=log)
                continue
            out = {"id": rid if rid is not None else f"line-{line_no}",
                   "input_ids": ids, "loss_mask": mask}
            fout.write(json.dumps(out, separators=(",", ":")) + "\n")
            summary.written += 1
            summary.tokens += len(ids)
            summary.assistant_tokens += sum(mask)
            now = time.monotonic()
            if progress_every and now - last >= progress_every:
                last = now
                print(f"layertap-prep: {summary.records} records, {summary.written} written, "
                      f"{summary.rejected} rejected ({summary.records / (now - t0):.0f}/s)",
                      file=log)
        fout.flush()
        os.fsync(fout.fileno())
    os.replace(tmp, out_path)
    return summary


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="layertap-prep",
        description="Render conversations (ShareGPT or OpenAI messages JSONL) with a model's "
                    "tokenizer and chat template into layertap's token JSONL "
                    "({id, input_ids, loss_mask}); loss_mask is 1 exactly on the tokens the "
                    "assistant turns produce (content and end-of-turn token).")
    p.add_argument("--model", required=True, help="model directory (tokenizer and chat template; "
                   "local files only; a directory with one .gguf file and no tokenizer files is "
                   "read through its GGUF tokenizer)")
    p.add_argument("--gguf", help="GGUF file inside --model to take the tokenizer from")
    p.add_argument("--in", dest="inp", required=True, help="conversations, JSON Lines")
    p.add_argument("--out", required=True, help="token JSONL to write")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="keep the first N tokens of longer conversations (a conversation left "
                        "with no assistant token is rejected)")
    p.add_argument("--eot", action="append", default=[],
                   help="an extra end-of-turn token (string or id); repeatable")
    p.add_argument("--template-arg", action="append", default=[], metavar="KEY=JSON",
                   help="extra chat-template variable, e.g. enable_thinking=false; repeatable")
    p.add_argument("--report", help="write a JSON summary with every rejected line here")
    p.add_argument("--strict", action="store_true",
                   help="exit with status 1 when any record is rejected")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_tokens is not None and args.max_tokens < 1:
        print("layertap-prep: --max-tokens must be at least 1", file=sys.stderr)
        return 2
    kw = {}
    for item in args.template_arg:
        k, sep, v = item.partition("=")
        if not sep:
            print(f"layertap-prep: --template-arg {item!r}: expected KEY=JSON", file=sys.stderr)
            return 2
        try:
            kw[k] = json.loads(v)
        except json.JSONDecodeError:
            kw[k] = v
    try:
        tok = load_tokenizer(args.model, args.gguf)
        eot = end_of_turn_ids(tok, args.model, args.eot)
    except (OSError, ValueError) as e:
        print(f"layertap-prep: {e}", file=sys.stderr)
        return 2
    s = prepare(args.inp, args.out, Renderer(tok, eot, kw), args.max_tokens)
    print(f"layertap-prep: {s.records} records: {s.written} written to {args.out} "
          f"({s.tokens} tokens, {s.assistant_tokens} in the loss mask), {s.rejected} rejected, "
          f"{s.truncated} truncated to --max-tokens", file=sys.stderr)
    if args.report:
        Path(args.report).write_text(json.dumps({
            "input": args.inp, "output": args.out, "records": s.records, "written": s.written,
            "rejected": s.rejected, "truncated": s.truncated, "tokens": s.tokens,
            "assistant_tokens": s.assistant_tokens, "max_tokens": args.max_tokens,
            "end_of_turn_ids": sorted(eot), "errors": s.errors}, indent=1) + "\n")
    if s.written == 0:
        print("layertap-prep: no record could be prepared", file=sys.stderr)
        return 1
    return 1 if (args.strict and s.rejected) else 0


if __name__ == "__main__":
    sys.exit(main())
