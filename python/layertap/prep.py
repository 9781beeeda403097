"""layertap-prep: conversations to the token JSONL that `layertap extract` reads.

Input: JSON Lines, one conversation a line, either ShareGPT
(``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}``, with
LLaMA-Factory's ``function_call`` and ``observation`` tool turns) or
OpenAI-style (``{"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": ...}]}``),
with an optional ``id`` (or ``conversation_id``), an optional ``system`` prompt (a string, the
conversation's first message) and an optional ``tools`` list of tool definitions, passed to the
template as ``apply_chat_template(..., tools=...)`` does.

Each conversation is rendered with the model directory's own tokenizer and chat template (local
files only) and tokenized as ``apply_chat_template(..., tokenize=True)`` would
(``add_special_tokens=False``: the template writes any BOS itself).

The loss mask is 1 exactly on what the assistant generates, decided on that full rendering and
found by rendering, never by patterns of a template. For assistant turn j:

1. Where its content lies: the full conversation is rendered again twice with turn j's content
   replaced by two different strings; the text that changes is the content as the template
   writes it (``[a, b)``). Varying the whole conversation, not a prefix, is what keeps this true
   for templates that rewrite earlier turns once later ones follow (Qwen3 drops reasoning). The
   two stand-ins must render as themselves at one place with nothing else changed. A tool-call
   turn whose content the template does not write, or whose stand-ins it refuses (GPT-OSS drops
   a call's analysis once an answer follows, and refuses content beside "thinking"), is placed
   the same way by its first call's arguments.
2. Where the turn starts: after its role header, which is the generation prompt
   (``add_generation_prompt`` of the conversation before turn j) as far as the finished turn
   agrees with it, character by character, and never past ``a``. A finished turn may lack part
   of the prompt (Qwen3 with ``enable_thinking=false`` prompts with an empty think block that
   earlier turns do not have); what the prompt holds is never generated (Kimi-K2.5 prompts with
   ``<think>``, so the reasoning after it is). The header is looked for where the conversation
   before turn j ends in the full rendering; when the template renders that part differently
   (consecutive assistant turns, assistant-first conversations) it is the longest match of the
   prompt before ``a``: the first after the previous message's end where that is known (a turn
   may open with the prompt more than once: GPT-OSS writes reasoning and answer as two
   messages), else the closest. A match shorter than what the prompt shares with a finished
   turn's header is none, and a turn with no header is refused. A template without a
   generation prompt (Llama-2) starts the turn where the previous message ends.
3. Where the turn ends: through the first end-of-turn token from ``b`` on (the tokenizer's EOS,
   the EOS ids of ``generation_config.json``, ``--eot``), so tool calls and closing tags the
   template writes after the content belong to the turn, and an end-of-turn token written as
   text inside the content does not end it. A turn with no end-of-turn token of its own ends
   with the one that opens the next message, if it opens with one (GLM's turns end by
   generating the next role token, ``<|user|>`` or ``<|observation|>``), else where the next
   message starts.
4. A token is 1 when any of its characters lies in a turn (transformers' rule for
   ``{% generation %}`` spans): a token that straddles the header and the content (``"\\n\\n"``
   after ``assistant\\n``) is 1.

Truncation (``--max-tokens N``): a longer conversation keeps its first N tokens and mask
entries; it is then rejected if no assistant token remains. Rejected and malformed records are
reported by line number (on stderr and in ``--report``) and counted; none is dropped silently.
A record is a line of bytes, checked against ``--max-record-bytes`` before it is decoded or
parsed; invalid UTF-8, lone surrogates, numbers Python cannot read and nesting too deep to parse
are that record's refusal, never the run's. A problem of the whole run (an input, model or output
path that cannot be used, a broken tokenizer file) is one line naming the file, with exit code 2.
No Python of the model directory runs without ``--trust-remote-code`` (transformers is told
``trust_remote_code=False``, and standard input is empty, so nothing prompts). ``--template-arg``
values are JSON; anything else, Python's ``False`` included, is refused.
``--workers N`` renders in N forked processes; the output is the same bytes in the same order.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import io
import json
import multiprocessing
import os
import re
import reprlib
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["load_tokenizer", "provide_moved_names", "end_of_turn_ids", "normalize_record",
           "Renderer", "RecordError", "RunError", "prepare", "main", "DEFAULT_MAX_RECORD_BYTES",
           "DEFAULT_MAX_MESSAGES"]

SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "model": "assistant",
    "bard": "assistant", "bing": "assistant",
    "system": "system",
    "tool": "tool", "function": "tool", "observation": "tool",
    "function_call": "assistant",     # its value holds tool calls (LLaMA-Factory): _sharegpt_calls
}
OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool"}
# Two stand-ins for an assistant's content that differ in their first and last characters, so
# the text that differs from the real rendering in either is exactly what the content decides.
VARIANTS = ("Xq7", "Jw4")


# A record is at most this many bytes (its line, without the newline) unless --max-record-bytes
# says otherwise; longer lines are refused before they are decoded or parsed.
DEFAULT_MAX_RECORD_BYTES = 16 << 20
# A conversation has at most this many messages unless --max-messages says otherwise: every
# assistant turn renders the whole conversation again, so the time grows with the square of the
# length (400 user/assistant pairs: 7 s on one core; 100,000 tiny turns fit in 16 MiB).
DEFAULT_MAX_MESSAGES = 4096


class RecordError(ValueError):
    """A conversation that cannot be prepared; the message says why."""


class RunError(Exception):
    """A problem of the whole run (a path that cannot be read or written, a broken tokenizer
    file): one line naming the file, exit code 2."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxdict = 4
_REPR.maxlevel = 3


def _short(v: Any) -> str:
    """A bounded repr of a value from the input, for messages (a role may be a 10 MB list)."""
    return _REPR.repr(v)


def _json_type(v: Any) -> str:
    """What a decoded JSON value is, in JSON's words."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _one_line(msg: str, limit: int = 500) -> str:
    """A message as one bounded line: control characters (newlines from a template's error,
    escapes from the input) written as Python escapes."""
    msg = str(msg)
    if len(msg) > limit:
        msg = msg[:limit] + "..."
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in msg)


# ---- tokenizer -------------------------------------------------------------------------------
def _tokenizer_code(d: Path) -> tuple[str, str] | None:
    """The class a model directory ships as code for its tokenizer and the file naming it, when
    transformers has no class of that name to load instead: ``auto_map`` ``AutoTokenizer`` in
    tokenizer_config.json, or, where that file names no tokenizer class transformers has, in
    config.json (which transformers 5 does not read for tokenizers: it silently loads another
    class)."""
    import transformers

    def read(name: str) -> dict:
        try:
            conf = json.loads((d / name).read_bytes().decode("utf-8-sig")) if (d / name).is_file() else {}
        except (ValueError, OSError, RecursionError):
            return {}         # a broken file: loading it says which
        return conf if isinstance(conf, dict) else {}

    def known(conf: dict) -> bool:
        own = conf.get("tokenizer_class")
        return isinstance(own, str) and hasattr(transformers, own)

    tok_conf = read("tokenizer_config.json")
    for name, conf in (("tokenizer_config.json", tok_conf), ("config.json", read("config.json"))):
        auto = conf.get("auto_map")
        names = auto.get("AutoTokenizer") if isinstance(auto, dict) else None
        if isinstance(names, list):
            names = next((n for n in names if isinstance(n, str) and n), None)
        if isinstance(names, str) and not known(conf):
            return names, name
        if known(tok_conf):
            return None     # tokenizer_config.json names a class transformers has: it loads that
    return None


def provide_moved_names() -> None:
    """Give tokenizers shipped as code the transformers names they import that transformers 5
    moved: Kimi-K2 and Kimi-K2.5's tokenization_kimi.py imports ``bytes_to_unicode`` (GPT-2's
    byte-to-printable-character table) from the GPT-2 tokenizer module, which no longer defines
    it; ``transformers.convert_slow_tokenizer`` keeps the same table. Only a missing name is
    added; nothing transformers defines is replaced."""
    import transformers.models.gpt2.tokenization_gpt2 as gpt2

    if not hasattr(gpt2, "bytes_to_unicode"):
        from transformers.convert_slow_tokenizer import bytes_to_unicode
        gpt2.bytes_to_unicode = bytes_to_unicode


class _NoStdin(io.TextIOBase):
    """Standard input while layertap-prep runs: empty, so nothing can prompt and wait for an
    answer (transformers asks "Do you wish to run the custom code? [y/N]" when it is not told,
    and a ``yes |`` would answer it); ``input()`` raises EOFError. ``--in /dev/stdin`` still
    reads file descriptor 0."""

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        return ""

    def readline(self, size: int | None = -1) -> str:
        return ""


@contextlib.contextmanager
def _stdin_closed():
    saved = sys.stdin
    sys.stdin = _NoStdin()
    try:
        yield
    finally:
        sys.stdin = saved


def _code_files(d: Path) -> list[str]:
    """The files of a model directory that name code shipped with it (an ``auto_map``)."""
    names = []
    for name in ("tokenizer_config.json", "config.json"):
        try:
            conf = json.loads((d / name).read_bytes().decode("utf-8-sig"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(conf, dict) and conf.get("auto_map"):
            names.append(name)
    return names


def load_tokenizer(model_dir: str | os.PathLike, gguf_file: str | None = None,
                   trust_remote_code: bool = False):
    """The model directory's tokenizer, from local files only. A directory holding a single
    ``.gguf`` file and no tokenizer files is read through transformers' GGUF support. A tokenizer
    shipped as code (``auto_map`` in tokenizer_config.json or config.json) needs ``trust_remote_code``. No code
    of the directory runs without it: transformers is told ``trust_remote_code=False``
    explicitly (it would otherwise ask on standard input), so an ``auto_map`` in config.json
    for a config class the tokenizer does not need is not imported, and standard input is
    empty while it loads."""
    d = Path(model_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"--model {d}: not a directory")
    from transformers import AutoTokenizer

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
    code = _tokenizer_code(d)
    if code and not trust_remote_code and code[1] == "config.json":
        raise ValueError(f"{d}: the tokenizer is code shipped with the model ({code[0]}, named by "
                         "auto_map in config.json), which transformers does not load from "
                         "config.json: it would silently load another class; move the entry to "
                         "tokenizer_config.json's auto_map, or pass --trust-remote-code to take "
                         "the class transformers picks")
    if code and not trust_remote_code:
        raise ValueError(f"{d}: the tokenizer is code shipped with the model ({code[0]}, named by "
                         f"auto_map in {code[1]}); pass --trust-remote-code to load "
                         "it (this runs the model directory's Python)")
    # trust_remote_code is always passed: left out (None), transformers prompts on stdin
    kw: dict[str, Any] = {"local_files_only": True, "trust_remote_code": bool(trust_remote_code)}
    if gguf_file:
        kw["gguf_file"] = gguf_file
    if trust_remote_code:
        provide_moved_names()
    try:
        with _stdin_closed():
            tok = AutoTokenizer.from_pretrained(str(d), **kw)
    except Exception as e:      # transformers and tokenizers raise anything, naming no file
        if not trust_remote_code and "trust_remote_code" in str(e):
            files = " and ".join(_code_files(d)) or "the model's files"
            raise ValueError(f"{d}: loading the tokenizer needs code shipped with the model "
                             f"(auto_map in {files}); pass --trust-remote-code to load it (this "
                             "runs the model directory's Python)") from None
        raise ValueError(_why_tokenizer_fails(d, gguf_file, e)) from None
    if not getattr(tok, "is_fast", False) and _byte_source(tok) is None:
        raise ValueError(f"{d}: the tokenizer is neither a fast (Rust) tokenizer nor a tiktoken "
                         "or byte-level one; layertap-prep needs each token's characters to "
                         "place turns")
    if not tok.chat_template:
        raise ValueError(f"{d}: the tokenizer has no chat template")
    _check_template(tok, d, gguf_file)
    return tok


# the files a tokenizer is loaded from that must be JSON objects
_TOKENIZER_JSON = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json",
                   "added_tokens.json", "chat_template.json", "config.json")


def _json_file_problem(path: Path) -> str | None:
    """Why a JSON file cannot be read as an object, or None."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"{path}: cannot be read ({e.strerror or e})"
    try:
        obj = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        return f"{path}: not valid UTF-8 (byte {e.start})"
    except json.JSONDecodeError as e:
        ends = ("; the file ends inside this string" if e.msg.startswith("Unterminated string")
                else "; the file ends there" if e.pos >= len(e.doc) else "")
        return f"{path}: not valid JSON (line {e.lineno} column {e.colno}: {e.msg}{ends})"
    except (ValueError, RecursionError) as e:
        return f"{path}: not readable JSON ({e})"
    if not isinstance(obj, dict):
        return f"{path}: expected a JSON object, found {_json_type(obj)}"
    return None


def _why_tokenizer_fails(d: Path, gguf_file: str | None, err: Exception) -> str:
    """One line naming the file that keeps the tokenizer from loading: the first tokenizer file
    that is not a JSON object, or tokenizer.json if the tokenizers library cannot read it; else
    the directory and transformers' own message."""
    for name in _TOKENIZER_JSON:
        f = d / name
        if f.is_file() and (why := _json_file_problem(f)):
            return why
    if (d / "tokenizer.json").is_file() and not gguf_file:
        try:
            from tokenizers import Tokenizer
            Tokenizer.from_file(str(d / "tokenizer.json"))
        except Exception as e:
            return f"{d / 'tokenizer.json'}: not a tokenizer the tokenizers library can read ({e})"
    where = d / gguf_file if gguf_file else d
    return f"{where}: the tokenizer cannot be loaded ({type(err).__name__}: {err})"


def _check_template(tok, d: Path, gguf_file: str | None) -> None:
    """A chat template that is not valid Jinja is the run's problem, named by its file, not a
    refusal of every record."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:            # another transformers: the records will say it
        return
    templates = tok.chat_template
    templates = templates.values() if isinstance(templates, dict) else [templates]
    for t in templates:
        if not isinstance(t, str):
            continue
        try:
            _compile_jinja_template(t)
        except Exception as e:
            where = next((d / n for n in ("chat_template.jinja", "chat_template.json")
                          if (d / n).is_file()),
                         d / gguf_file if gguf_file else d / "tokenizer_config.json")
            line = getattr(e, "lineno", None)
            raise ValueError(f"{where}: the chat template is not valid Jinja"
                             f"{f' (line {line})' if line else ''}: {e}") from None


def _byte_source(tok):
    """How a slow tokenizer spells a token id as bytes: a tiktoken Encoding (``tok.model``, as
    Kimi's TikTokenTokenizer keeps it) or a GPT-2 style byte decoder; None if neither."""
    enc = getattr(tok, "model", None)
    if callable(getattr(enc, "decode_single_token_bytes", None)):
        return ("tiktoken", enc)
    if isinstance(getattr(tok, "byte_decoder", None), dict):
        return ("bytelevel", tok.byte_decoder)
    return None


def end_of_turn_ids(tok, model_dir: str | os.PathLike | None = None,
                    extra: list[str] | None = None) -> set[int]:
    """Token ids that end an assistant turn: the tokenizer's EOS, the EOS ids of the model's
    generation_config.json, and ``extra`` (token strings of the vocabulary, or ids)."""
    ids: set[int] = set()
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    if model_dir is not None:
        gc = Path(model_dir) / "generation_config.json"
        if gc.is_file():
            if why := _json_file_problem(gc):
                raise ValueError(why)
            eos = json.loads(gc.read_bytes().decode("utf-8-sig")).get("eos_token_id")
            if isinstance(eos, int) and not isinstance(eos, bool):
                ids.add(eos)
            elif isinstance(eos, list):
                ids.update(int(e) for e in eos if isinstance(e, int) and not isinstance(e, bool))
    vocab = None
    for e in extra or []:
        e = str(e)
        if e.isascii() and e.isdigit():       # a number is an id
            # compared by its digits first: int() refuses more than 4,300 of them, naming no option
            digits = e.lstrip("0") or "0"
            if len(digits) > len(str(len(tok))) or int(digits) >= len(tok):
                shown = e if len(e) <= 40 else f"{e[:20]}... ({len(e)} digits)"
                raise ValueError(f"--eot {shown}: not an id of this tokenizer (it has {len(tok)})")
            ids.add(int(digits))
            continue
        if vocab is None:
            vocab = {**tok.get_vocab(), **getattr(tok, "added_tokens_encoder", {})}
        # looked up in the vocabulary, not through convert_tokens_to_ids: that maps unknown
        # strings to the unk id, which is also a real token (SmolLM2's <|endoftext|> is id 0)
        if e not in vocab:
            raise ValueError(f"--eot {_short(e)} is not a token of this tokenizer's vocabulary")
        ids.add(int(vocab[e]))
    return ids


# ---- records ---------------------------------------------------------------------------------
def _text(content: Any, where: str) -> str | None:
    if content is None:        # OpenAI tool-call turns: the template sees no content
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and part.get("type") == "text":
                raise RecordError(f"{where}: content part {k} is a text part whose \"text\" is "
                                  f"{_json_type(part.get('text'))}, not a string")
            else:
                if not isinstance(part, dict):
                    kind = _json_type(part)
                elif isinstance(part.get("type"), str):
                    kind = _short(part["type"])
                else:
                    kind = f"an object whose \"type\" is {_json_type(part.get('type'))}"
                raise RecordError(f"{where}: content part {k} is {kind}; only text is supported")
        return "".join(parts)
    raise RecordError(f"{where}: content must be a string or a list of text parts, "
                      f"found {_json_type(content)}")


def _sharegpt_calls(value: Any, where: str) -> list[dict]:
    """The tool calls of a ShareGPT ``function_call`` turn (LLaMA-Factory's tool format): its
    value holds, as JSON text, one call ``{"name": ..., "arguments": ...}`` or a list of them;
    they become the OpenAI ``tool_calls`` of an assistant turn without content."""
    try:
        calls = json.loads(value) if isinstance(value, str) else None
    except (json.JSONDecodeError, RecursionError, ValueError):
        calls = None
    if isinstance(calls, dict):
        calls = [calls]
    if not isinstance(calls, list) or not calls:
        raise RecordError(f"{where}: a \"function_call\" value must be JSON text holding a call "
                          "{\"name\": ..., \"arguments\": ...} or a list of them")
    out = []
    for k, c in enumerate(calls):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or "arguments" not in c:
            raise RecordError(f"{where}: call {k} is not an object with a string \"name\" and "
                              "\"arguments\"")
        out.append({"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}})
    return out


def _tools(rec: dict) -> list | None:
    """The record's tool definitions (``tools``: a list of objects, or a string holding one, as
    ShareGPT function-calling sets store it), or None where it has none."""
    tools = rec.get("tools")
    if tools is None:
        return None
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except (json.JSONDecodeError, RecursionError, ValueError):
            raise RecordError("\"tools\" is a string that does not hold JSON") from None
    if not isinstance(tools, list):
        raise RecordError(f"\"tools\" must be a list of tool definitions, found {_json_type(tools)}")
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise RecordError(f"tools[{i}]: expected an object, found {_json_type(t)}")
    return tools


def normalize_record(rec: Any) -> tuple[list[dict], Any, list | None]:
    """(messages with ``role``/``content``, id or None, tool definitions or None) for a ShareGPT
    or OpenAI-style record."""
    if not isinstance(rec, dict):
        raise RecordError(f"expected a JSON object, found {_json_type(rec)}")
    if "messages" in rec and "conversations" in rec:
        raise RecordError("has both \"messages\" and \"conversations\"")
    key = "messages" if "messages" in rec else "conversations" if "conversations" in rec else None
    if key is None:
        raise RecordError("no \"conversations\" (ShareGPT) or \"messages\" (OpenAI) list")
    turns = rec[key]
    if not isinstance(turns, list) or not turns:
        raise RecordError(f"\"{key}\" must be a non-empty list, found "
                          f"{'an empty array' if turns == [] else _json_type(turns)}")
    messages = []
    for i, t in enumerate(turns):
        where = f"{key}[{i}]"
        if not isinstance(t, dict):
            raise RecordError(f"{where}: expected an object, found {_json_type(t)}")
        if "role" in t:
            role = t["role"]
            if not isinstance(role, str):
                raise RecordError(f"{where}: \"role\" must be a string, found {_json_type(role)}")
            if role not in OPENAI_ROLES:
                raise RecordError(f"{where}: unknown role {_short(role)}")
            role = "system" if role == "developer" else role
            if "content" not in t:
                raise RecordError(f"{where}: no \"content\"")
            msg = {k: v for k, v in t.items() if k not in ("role", "content")}
            msg.update(role=role, content=_text(t["content"], where))
        elif "from" in t:
            frm = t["from"]
            if not isinstance(frm, str):
                raise RecordError(f"{where}: \"from\" must be a string, found {_json_type(frm)}")
            role = SHAREGPT_ROLES.get(frm.lower())
            if role is None:
                raise RecordError(f"{where}: unknown \"from\" {_short(frm)}")
            if "value" not in t:
                raise RecordError(f"{where}: no \"value\"")
            if frm.lower() == "function_call":
                msg = {"role": "assistant", "content": None,
                       "tool_calls": _sharegpt_calls(t["value"], where)}
            else:
                msg = {"role": role, "content": _text(t["value"], where)}
        else:
            raise RecordError(f"{where}: neither \"role\"/\"content\" nor \"from\"/\"value\"")
        messages.append(msg)
    system = rec.get("system")
    if system is not None:            # LLaMA-Factory's ShareGPT: the system prompt as a column
        if not isinstance(system, str):
            raise RecordError(f"\"system\" must be a string, found {_json_type(system)}")
        if messages[0]["role"] == "system":
            raise RecordError(f"has both a \"system\" and a system turn ({key}[0]); which one "
                              "the conversation was held with is not known")
        messages.insert(0, {"role": "system", "content": system})
    if not any(m["role"] == "assistant" for m in messages):
        raise RecordError("no assistant turn")
    rid = rec.get("id", rec.get("conversation_id"))
    if rid is not None and not isinstance(rid, (str, int)) or isinstance(rid, bool):
        raise RecordError(f"\"id\" must be a string or an integer, found {_json_type(rid)}")
    if isinstance(rid, int) and not -2**63 <= rid < 2**64:
        raise RecordError(f"\"id\" {_short(rid)} does not fit in 64 bits, as layertap extract "
                          "reads integer ids; write it as a string")
    return messages, rid, _tools(rec)


# JSON escapes that can decode to a surrogate (a lone one is not text: no tokenizer, no UTF-8
# output can take it); only lines holding one are searched after parsing
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(rec: Any) -> str | None:
    """Where a parsed record holds a string (a value or a key) with a lone surrogate, or None.
    Iterative, so no nesting depth json accepted can exhaust the stack."""
    stack = [(rec, "the record")]
    while stack:
        v, where = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return where
        elif isinstance(v, dict):
            for k, x in v.items():
                if _SURROGATE.search(k):
                    return f"a key of {where}"
                stack.append((x, k if where == "the record" else f"{where}.{k}"))
        elif isinstance(v, list):
            stack.extend((x, f"{where}[{i}]") for i, x in enumerate(v))
    return None


# ---- rendering -------------------------------------------------------------------------------
def _common_prefix(a: str, b: str, limit: int | None = None) -> int:
    """Length of the common prefix of a and b (at most ``limit``), by bisection on C-level
    slice comparisons rather than a Python loop over characters."""
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n                                 # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _common_suffix(a: str, b: str, limit: int) -> int:
    la, lb = len(a), len(b)
    n = min(la, lb, limit)
    if a[la - n:] == b[lb - n:]:
        return n
    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[la - mid:la - lo] == b[lb - mid:lb - lo]:
            lo = mid
        else:
            hi = mid
    return lo


_CONTINUATION = bytes(range(0x80, 0xC0))


@dataclass
class Rendered:
    input_ids: list[int]
    loss_mask: list[int]
    text: str
    turns: list[tuple[int, int]] = field(default_factory=list)   # token [first, last] masked
    spans: list[tuple[int, int]] = field(default_factory=list)   # characters [start, end)


_DERIVED = ("writes this assistant turn's content more than once or derives other text from it, "
            "so the turn cannot be located")


def _with_content(m: dict, v: str) -> dict:
    return {**m, "content": v}


def _first_call(m: dict) -> dict | None:
    calls = m.get("tool_calls")
    return calls[0] if isinstance(calls, list) and calls and isinstance(calls[0], dict) else None


def _with_arguments(m: dict, v: str) -> dict:
    """The message with its first tool call's arguments replaced by {"x": v}."""
    call = _first_call(m)
    fn = call.get("function")
    call = ({**call, "function": {**fn, "arguments": {"x": v}}} if isinstance(fn, dict)
            else {**call, "arguments": {"x": v}})
    return {**m, "tool_calls": [call, *m["tool_calls"][1:]]}


class Renderer:
    """Renders conversations with a tokenizer's chat template and derives the assistant mask."""

    def __init__(self, tok, eot_ids: set[int], template_kwargs: dict | None = None,
                 max_messages: int = DEFAULT_MAX_MESSAGES):
        self.tok = tok
        self.max_messages = max_messages
        self.eot_ids = set(eot_ids)
        self.kw = dict(template_kwargs or {})
        self.fast = bool(getattr(tok, "is_fast", False))
        self.bytes_of = None if self.fast else _byte_source(tok)
        # the generation prompt of a one-message conversation: the header of a turn whose
        # preceding conversation cannot be rendered alone (an assistant-first conversation)
        self.probe_prompt = ""
        try:
            probe = [{"role": "user", "content": "x"}]
            q, p = self.render_text(probe, False), self.render_text(probe, True)
            if p.startswith(q):
                self.probe_prompt = p[len(q):]
        except Exception:
            pass
        # the header of a finished turn that a user message follows: a match of the generation
        # prompt shorter than it shares with this is no header (Llama-4 writes the first message
        # as the user's when tools are given, whatever its role); None where it cannot be rendered
        self.finished_header = None
        try:
            probe = [{"role": "user", "content": "x"}]
            q = self.render_text(probe, False)
            r = self.render_text(probe + [{"role": "assistant", "content": VARIANTS[0]},
                                          {"role": "user", "content": "y"}], False)
            at = r.find(VARIANTS[0], len(q)) if r.startswith(q) else -1
            if at >= 0:
                self.finished_header = r[len(q):at]
        except Exception:
            pass

    def render_text(self, messages: list[dict], generation_prompt: bool, tools: list | None = None) -> str:
        # a record's own tools win over a run-wide --template-arg tools=[...]
        kw = self.kw if tools is None else {**self.kw, "tools": tools}
        return self.tok.apply_chat_template(messages, tokenize=False,
                                            add_generation_prompt=generation_prompt, **kw)

    # -- tokens and their characters
    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        if self.fast:
            enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
            return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        ids = list(self.tok(text, add_special_tokens=False)["input_ids"])
        kind, src = self.bytes_of
        pieces = []
        for i in ids:
            try:
                if kind == "tiktoken":
                    b = src.decode_single_token_bytes(i)
                else:
                    b = bytes(src[c] for c in self.tok.convert_ids_to_tokens(i))
            except (KeyError, ValueError):           # an added token outside the byte vocabulary
                b = str(self.tok.convert_ids_to_tokens(i)).encode("utf-8")
            pieces.append(b)
        if b"".join(pieces) != text.encode("utf-8"):
            raise RecordError("the tokenizer's tokens do not spell the rendered text, so their "
                              "characters are unknown")
        # a token's characters: those its bytes start or continue (a character split between
        # tokens belongs to both, as in the fast tokenizers' byte-level offsets)
        offsets, chars = [], 0
        for b in pieces:
            started = len(b.translate(None, _CONTINUATION))
            start = chars - 1 if b and 0x80 <= b[0] < 0xC0 else chars
            chars += started
            offsets.append((max(start, 0), chars))
        return ids, offsets

    # -- where assistant turn j lies in the full rendering: its content, else its first tool call
    def _content_span(self, messages: list[dict], j: int, full: str, tools) -> tuple[int, int]:
        span, why = self._varied_span(messages, j, full, tools, _with_content)
        if span is None and why is not _DERIVED and _first_call(messages[j]) is not None:
            # no content rendered (GPT-OSS drops a tool call's analysis once an answer follows)
            # or a stand-in refused (GPT-OSS: content beside thinking in a tool call): the call's
            # arguments, which are the turn's too, place it instead
            span = self._varied_span(messages, j, full, tools, _with_arguments)[0]
        if span is None:
            raise RecordError(f"turn {j}: the chat template {why}")
        return span

    def _varied_span(self, messages: list[dict], k: int, full: str, tools, stand_in):
        """([a, b), None): the characters of the full rendering that message k decides through
        what ``stand_in`` replaces by two different strings; or (None, why not)."""
        others = []
        for v in VARIANTS:
            alt = list(messages)
            alt[k] = stand_in(messages[k], v)
            try:
                others.append(self.render_text(alt, False, tools))
            except Exception as e:
                return None, (f"fails when this assistant turn's content is changed ({e}), so the "
                              "content cannot be located")
        (x, y), (vx, vy) = others, VARIANTS
        if x == y:
            return None, "does not render this assistant turn's content, so the turn cannot be located"
        # the two stand-ins must render as themselves, once, with nothing else changed: else the
        # text that differs is not only this turn's content
        at = _common_prefix(x, y)
        if x[at:at + len(vx)] != vx or y[at:at + len(vy)] != vy or x[at + len(vx):] != y[at + len(vy):]:
            return None, _DERIVED
        cp, cs = len(full), len(full)
        for other in others:
            p = _common_prefix(full, other)
            cp = min(cp, p)
            cs = min(cs, _common_suffix(full, other, min(len(full), len(other)) - p))
        return (cp, len(full) - cs), None

    def _prompt(self, messages: list[dict], j: int, full: str, tools, cache: dict):
        """(the generation prompt before turn j, where the conversation before turn j ends in
        the full rendering, or None where the full rendering does not begin with it)."""
        if j == 0:
            return self.probe_prompt, None
        q, p = (self._render_cached(messages, j, False, tools, cache),
                self._render_cached(messages, j, True, tools, cache))
        start = len(q) if q is not None and full.startswith(q) else None
        if q is not None and p is not None and p.startswith(q):
            return p[len(q):], start
        return self.probe_prompt, start

    def _header_end(self, messages, j, full, tools, prompt, prev_end, a) -> int:
        """Where turn j's header ends when the full rendering does not begin with the
        conversation before it: after the longest match of the generation prompt (at least what
        it shares with a finished turn's header) before the content. Where the previous
        message's end is known (an assistant turn's, or a message whose content varies in place),
        the first match after it, as a turn may open with the prompt more than once (GPT-OSS
        writes its reasoning and its answer as two messages); else the closest before the
        content."""
        if not prompt:
            return a                    # no header (Llama-2): the turn starts at its content
        left, first = prev_end, False
        if j > 0 and messages[j - 1]["role"] == "assistant":
            first = True
        elif j > 0 and isinstance(messages[j - 1].get("content"), str):
            span = self._varied_span(messages, j - 1, full, tools, _with_content)[0]
            if span is not None and prev_end <= span[1] <= a:
                left, first = span[1], True
        seg = full[left:a]
        least = 1 if self.finished_header is None else max(
            1, _common_prefix(prompt, self.finished_header))
        for k in range(len(prompt), least - 1, -1):
            at = seg.find(prompt[:k]) if first else seg.rfind(prompt[:k])
            if at >= 0:
                return left + at + k
        raise RecordError(f"turn {j}: the chat template writes no assistant header before this "
                          "turn, so where the turn starts is not defined")

    def _render_cached(self, messages, k, gen, tools, cache):
        if (k, gen) not in cache:
            try:
                cache[k, gen] = self.render_text(messages[:k], gen, tools)
            except Exception:           # a prefix the template refuses (roles must alternate)
                cache[k, gen] = None
        return cache[k, gen]

    def __call__(self, messages: list[dict], tools: list | None = None) -> Rendered:
        if len(messages) > self.max_messages:
            raise RecordError(f"{len(messages)} messages, over --max-messages {self.max_messages} "
                              "(each assistant turn renders the whole conversation again); not "
                              "rendered")
        try:
            full = self.render_text(messages, False, tools)
        except Exception as e:  # jinja raise_exception, missing keys, ...
            raise RecordError(f"the chat template refused the conversation: {e}") from None
        ids, offsets = self.encode(full)
        if not ids:
            raise RecordError("the conversation renders to no tokens")
        starts = [s for s, _ in offsets]
        cache: dict = {}
        turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
        content = {j: self._content_span(messages, j, full, tools) for j in turns}
        spans, prev_end = [], 0
        for n, j in enumerate(turns):
            a, b = content[j]
            prompt, start = self._prompt(messages, j, full, tools, cache)
            if a < prev_end or (start is not None and start > a):
                raise RecordError(f"turn {j}: the template writes text before this assistant turn "
                                  "that depends on its content, so where the turn starts is not "
                                  "defined")
            if start is not None:
                head = start if not prompt else start + _common_prefix(prompt, full[start:a])
                if prompt and head == start:
                    head = a                   # a header unlike the generation prompt
            else:
                head = self._header_end(messages, j, full, tools, prompt, prev_end, a)
            # the turn's end: the first end-of-turn token from b on, before the next message
            # (where the conversation up to this turn ends in the full rendering, or failing
            # that, before the next assistant content)
            turn_end = len(full)
            if j + 1 < len(messages):
                nxt = self._render_cached(messages, j + 1, False, tools, cache)
                turn_end = len(nxt) if nxt is not None and full.startswith(nxt) and len(nxt) >= b else None
            bound = turn_end if turn_end is not None else (
                content[turns[n + 1]][0] if n + 1 < len(turns) else len(full))
            end = None
            for t in range(bisect.bisect_left(starts, b), len(ids)):
                if starts[t] >= bound:
                    break
                if ids[t] in self.eot_ids:
                    end = offsets[t][1]
                    break
            if end is None and turn_end is not None:
                # none in the turn: the one opening the next message, if any, is the turn's own
                # (GLM ends a turn by generating <|user|> or <|observation|>)
                t = bisect.bisect_left(starts, turn_end)
                if t < len(ids) and starts[t] == turn_end and ids[t] in self.eot_ids:
                    end = offsets[t][1]
            if end is None:                   # no end-of-turn token: the whole turn
                end = turn_end if turn_end is not None else b
            if end > head:
                spans.append((head, end))
            prev_end = max(end, prev_end)
        mask, turn_tokens = self._mask(offsets, spans)
        if not turn_tokens:
            raise RecordError("no assistant token in the rendering (every assistant turn renders "
                              "to nothing)")
        return Rendered(ids, mask, full, turn_tokens, spans)

    @staticmethod
    def _mask(offsets, spans):
        """1 on every token with a character in a span, as transformers marks {% generation %}
        spans. Token offsets are in order, so a span's tokens are the run from the first one
        ending after its start to the last one starting before its end."""
        mask = [0] * len(offsets)
        starts = [s for s, _ in offsets]
        ends = [e for _, e in offsets]
        turns = []
        if starts != sorted(starts) or ends != sorted(ends):      # not in order: token by token
            for begin, end in spans:
                hit = [t for t, (s, e) in enumerate(offsets) if e > begin and s < end]
                for t in hit:
                    mask[t] = 1
                if hit:
                    turns.append((hit[0], hit[-1]))
            return mask, turns
        for begin, end in spans:
            t0, t1 = bisect.bisect_right(ends, begin), bisect.bisect_left(starts, end)
            if t1 > t0:
                mask[t0:t1] = [1] * (t1 - t0)
                turns.append((t0, t1 - 1))
        return mask, turns


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


@dataclass(frozen=True)
class _TooLarge:
    """A line longer than --max-record-bytes, read past without being kept."""
    size: int
    limit: int


_BOM = b"\xef\xbb\xbf"


def _parse_line(data: bytes) -> Any:
    """One line's bytes (without its newline) to the JSON value it holds, or RecordError saying
    why not. Columns are json's own, in characters of this line."""
    if data.endswith(b"\r"):
        data = data[:-1]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(f"not valid UTF-8: byte 0x{data[e.start]:02x} at byte {e.start + 1} of "
                          "the line") from None
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as e:
        ends = (" (the line ends inside this string)" if e.msg.startswith("Unterminated string")
                else " (the line ends there)" if e.pos >= len(text) else "")
        where = f"column {e.colno}" if e.lineno == 1 else f"line {e.lineno} column {e.colno}"
        raise RecordError(f"malformed JSON at {where}{ends}: {e.msg}") from None
    except RecursionError:
        raise RecordError("JSON nested too deeply to parse") from None
    except ValueError as e:          # an integer longer than Python converts
        if "integer string conversion" in str(e):
            raise RecordError(f"a number with more than {sys.get_int_max_str_digits()} digits, "
                              "more than Python reads") from None
        raise RecordError(f"unreadable JSON: {e}") from None
    if _SURROGATE_ESCAPE.search(data) and (where := _lone_surrogate(rec)) is not None:
        raise RecordError(f"{where}: a lone surrogate (an unpaired \\ud800-\\udfff escape), "
                          "which is not text")
    return rec


def _prepare_line(renderer: Renderer, max_tokens: int | None, line_no: int, line):
    """One input line (bytes without its newline, or _TooLarge) to ("ok", line_no, output line,
    tokens, masked, truncated) or ("error", line_no, id, message). Whatever the line holds, it
    is this line's result: nothing a record does ends the run."""
    rid = None
    try:
        if isinstance(line, _TooLarge):
            raise RecordError(f"the line is {line.size} bytes, over --max-record-bytes "
                              f"{line.limit}; not parsed")
        rec = _parse_line(line)
        messages, rid, tools = normalize_record(rec)
        r = renderer(messages, tools)
        ids, mask = r.input_ids, r.loss_mask
        truncated = max_tokens is not None and len(ids) > max_tokens
        if truncated:
            ids, mask = ids[:max_tokens], mask[:max_tokens]
            if not any(mask):
                raise RecordError(f"no assistant token within the first {max_tokens} "
                                  f"tokens (the conversation has {len(r.input_ids)})")
        out = {"id": rid if rid is not None else f"line-{line_no}", "input_ids": ids,
               "loss_mask": mask}
        text = json.dumps(out, separators=(",", ":")) + "\n"
    except RecordError as e:
        return ("error", line_no, rid, _one_line(e))
    except Exception as e:       # a tokenizer or template failing in a way of its own
        return ("error", line_no, rid,
                _one_line(f"cannot be prepared ({type(e).__name__}: {e})"))
    return ("ok", line_no, text, len(ids), sum(mask), truncated)


# A forked worker's renderer: set in the parent before the pool forks, so every worker starts
# with the tokenizer already loaded (nothing is pickled or loaded again).
_WORKER: tuple[Renderer, int | None] | None = None


def _prepare_chunk(chunk):
    renderer, max_tokens = _WORKER
    return [_prepare_line(renderer, max_tokens, n, line) for n, line in chunk]


def _lines(fin, limit: int, name: str):
    """(line number, bytes without the newline) for every line of a binary file, or
    (line number, _TooLarge) for a line over ``limit`` bytes: read past in pieces, so memory
    stays within ``limit`` whatever a line holds. A leading UTF-8 byte-order mark is dropped."""
    line_no = 0
    while True:
        try:
            data = fin.readline(limit + 1)
            if not data:
                return
            line_no += 1
            if line_no == 1 and data.startswith(_BOM):
                data = data[len(_BOM):]
            if data.endswith(b"\n"):
                yield line_no, data[:-1]
            elif len(data) <= limit:            # the last line, without a newline
                yield line_no, data
            else:                               # over the limit: skip to its end
                size = len(data)
                while True:
                    piece = fin.readline(1 << 20)
                    size += len(piece)
                    if not piece or piece.endswith(b"\n"):
                        break
                if piece.endswith(b"\n"):
                    size -= 1
                yield line_no, _TooLarge(size, limit)
        except OSError as e:
            raise RunError(f"--in {name}: cannot be read ({e.strerror or e})") from None


def _chunks(lines, size, max_bytes=1 << 20):
    """Chunks of at most ``size`` records and, beyond the first record, ``max_bytes`` bytes;
    empty and whitespace-only lines are no records (their numbers still count)."""
    chunk, nbytes = [], 0
    for line_no, line in lines:
        if isinstance(line, bytes) and not line.strip():
            continue
        chunk.append((line_no, line))
        nbytes += len(line) if isinstance(line, bytes) else 0
        if len(chunk) == size or nbytes >= max_bytes:
            yield chunk
            chunk, nbytes = [], 0
    if chunk:
        yield chunk


def _results(lines, renderer, max_tokens, workers, chunk_size=32):
    """Every result in input order; with workers > 1, chunks are rendered in forked processes,
    at most 4 chunks a worker in flight so memory stays bounded on any input size. A worker that
    dies (the OOM killer, a signal) ends the run with RunError naming the lines it held, rather
    than leaving the run waiting for results that never come."""
    global _WORKER
    if workers <= 1:
        for chunk in _chunks(lines, chunk_size):
            for n, line in chunk:
                yield _prepare_line(renderer, max_tokens, n, line)
        return
    _WORKER = (renderer, max_tokens)
    pending: deque = deque()

    def first_of_pending():
        future, chunk = pending[0]
        try:
            result = future.result()
        except BrokenProcessPool:      # which worker held which chunk is not known: name them all
            first, last = chunk[0][0], pending[-1][1][-1][0]
            raise RunError(f"a --workers process died (killed by a signal or out of memory) while "
                           f"lines {first}-{last} were being rendered; nothing was written") from None
        pending.popleft()
        return result

    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        for chunk in _chunks(lines, chunk_size):
            pending.append((pool.submit(_prepare_chunk, chunk), chunk))
            if len(pending) >= 4 * workers:
                yield from first_of_pending()
        while pending:
            yield from first_of_pending()
    finally:
        pool.shutdown(cancel_futures=True)     # a run ended early renders no more chunks
        _WORKER = None


def _open_input(in_path: str):
    try:
        return open(in_path, "rb")     # a directory is refused here (IsADirectoryError)
    except OSError as e:
        raise RunError(f"--in {in_path}: {e.strerror or e}") from None


def _check_output(path: str, what: str, create: bool) -> None:
    """Refuse an output path before any work: a directory, a missing or unwritable parent."""
    p = Path(path)
    if p.is_dir():
        raise RunError(f"{what} {path}: is a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise RunError(f"{what} {path}: {parent} is not a directory"
                       f"{'' if parent.exists() else ' (it does not exist)'}")
    if create:                  # really create the temporary file: access() says yes to root
        tmp = path + ".tmp"
        try:
            open(tmp, "wb").close()
            os.unlink(tmp)
        except OSError as e:
            raise RunError(f"{what} {path}: cannot write {tmp} ({e.strerror or e})") from None
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise RunError(f"{what} {path}: {parent} is not writable")


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:                 # one of them does not exist yet
        return False


def prepare(in_path: str, out_path: str, renderer: Renderer, max_tokens: int | None = None,
            log=None, progress_every: float = 5.0, workers: int = 1,
            max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Summary:
    """Every record of ``in_path`` to ``out_path`` (written to ``out_path.tmp``, then renamed).
    A record's problem is reported (on ``log``, stderr by default) and counted; a problem of the
    run (a file that cannot be read or written) is RunError, and leaves no ``.tmp`` behind."""
    log = sys.stderr if log is None else log
    summary = Summary()
    tmp = out_path + ".tmp"
    t0 = last = time.monotonic()
    with _open_input(in_path) as fin:
        try:
            fout = open(tmp, "w", encoding="utf-8")
        except OSError as e:
            raise RunError(f"--out {out_path}: cannot write {tmp} ({e.strerror or e})") from None
        try:
            with fout:
                lines = _lines(fin, max_record_bytes, in_path)
                for res in _results(lines, renderer, max_tokens, workers):
                    summary.records += 1
                    if res[0] == "error":
                        _, line_no, rid, msg = res
                        summary.rejected += 1
                        err = {"line": line_no, "error": msg}
                        if rid is not None:
                            err["id"] = rid
                        summary.errors.append(err)
                        print(f"layertap-prep: {in_path}:{line_no}"
                              f"{' (id ' + _short(rid) + ')' if rid is not None else ''}: {msg}",
                              file=log)
                        continue
                    _, line_no, text, n_tokens, n_masked, truncated = res
                    try:
                        fout.write(text)
                    except OSError as e:
                        raise RunError(f"--out {out_path}: cannot write {tmp} "
                                       f"({e.strerror or e})") from None
                    summary.written += 1
                    summary.tokens += n_tokens
                    summary.assistant_tokens += n_masked
                    summary.truncated += truncated
                    now = time.monotonic()
                    if progress_every and now - last >= progress_every:
                        last = now
                        print(f"layertap-prep: {summary.records} records, {summary.written} "
                              f"written, {summary.rejected} rejected "
                              f"({summary.records / (now - t0):.0f}/s)", file=log)
                try:
                    fout.flush()
                    os.fsync(fout.fileno())
                except OSError as e:
                    raise RunError(f"--out {out_path}: cannot write {tmp} "
                                   f"({e.strerror or e})") from None
            try:
                os.replace(tmp, out_path)
            except OSError as e:
                raise RunError(f"--out {out_path}: cannot rename {tmp} to it "
                               f"({e.strerror or e})") from None
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    return summary


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="layertap-prep",
        description="Render conversations (ShareGPT or OpenAI messages JSONL, with an "
                    "optional \"tools\" list of tool definitions) with a model's "
                    "tokenizer and chat template into layertap's token JSONL "
                    "({id, input_ids, loss_mask}); loss_mask is 1 exactly on the tokens the "
                    "assistant generates (its content, the reasoning and tool calls the "
                    "rendering keeps, and the end-of-turn token; a token partly in the turn "
                    "counts), decided on the rendering of the whole conversation.")
    p.add_argument("--model", required=True, help="model directory (tokenizer and chat template; "
                   "local files only; a directory with one .gguf file and no tokenizer files is "
                   "read through its GGUF tokenizer)")
    p.add_argument("--gguf", help="GGUF file inside --model to take the tokenizer from")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="load a tokenizer the model directory ships as code (auto_map in "
                        "tokenizer_config.json, e.g. Kimi-K2's tokenization_kimi.py); this runs "
                        "the model directory's Python, which without it never runs (nothing "
                        "prompts: transformers is told trust_remote_code=False)")
    p.add_argument("--in", dest="inp", required=True, help="conversations, JSON Lines")
    p.add_argument("--out", required=True, help="token JSONL to write")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="keep the first N tokens of longer conversations (a conversation left "
                        "with no assistant token is rejected)")
    p.add_argument("--eot", action="append", default=[],
                   help="an extra end-of-turn token: a token string of the vocabulary, or an id "
                        "(a number is an id); repeatable")
    p.add_argument("--template-arg", action="append", default=[], metavar="KEY=JSON",
                   help="extra chat-template variable whose value is JSON, e.g. "
                        "enable_thinking=false (not False), reasoning_effort='\"high\"' (a "
                        "string in double quotes), tools=[...] for every record without its own "
                        "\"tools\"; a value that is not JSON is refused; repeatable")
    p.add_argument("--workers", type=int, default=1,
                   help="processes rendering conversations (each starts with the loaded "
                        "tokenizer); the output is the same in any case, in input order")
    p.add_argument("--max-record-bytes", type=int, default=DEFAULT_MAX_RECORD_BYTES,
                   metavar="N",
                   help="refuse a line longer than N bytes (without its newline) before it is "
                        f"decoded or parsed (default {DEFAULT_MAX_RECORD_BYTES}, 16 MiB)")
    p.add_argument("--max-messages", type=int, default=DEFAULT_MAX_MESSAGES, metavar="N",
                   help="refuse a conversation of more than N messages before rendering it "
                        "(each assistant turn renders the whole conversation again, so the "
                        f"time grows with the square of the length; default {DEFAULT_MAX_MESSAGES})")
    p.add_argument("--report", help="write a JSON summary with every rejected line here")
    p.add_argument("--strict", action="store_true",
                   help="exit with status 1 when any record is rejected")
    return p


# the arguments of apply_chat_template that layertap-prep gives itself on every rendering
_RENDER_ARGS = ("conversation", "tokenize", "add_generation_prompt")
# Python's spellings of JSON's words: a template reads the string "False" as true
_PYTHON_WORDS = {"true": "true", "false": "false", "none": "null", "null": "null"}


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _template_arg(item: str) -> tuple[str, Any]:
    """``KEY=JSON`` of --template-arg as (key, value). The value must be JSON: ``false``,
    ``true``, ``null``, a number, a string in double quotes, an array or an object. A bare word is
    refused rather than taken as a string, so that ``False`` (Python's spelling) or a misspelt
    ``flase`` cannot pass as a string every template reads as true."""
    k, sep, v = item.partition("=")
    if not sep or not k:
        raise RunError(f"--template-arg {_short(item)}: expected KEY=JSON")
    if k in _RENDER_ARGS:
        raise RunError(f"--template-arg {_short(k)}: layertap-prep sets {k} itself on every "
                       "rendering")
    where = f"--template-arg {_short(item)}"
    word = v.strip()
    try:
        return k, json.loads(v, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        if word.lower() in _PYTHON_WORDS:
            raise RunError(f"{where}: the value is not JSON; write {k}={_PYTHON_WORDS[word.lower()]} "
                           f"(JSON's {_PYTHON_WORDS[word.lower()]}, in lower case)") from None
        raise RunError(f"{where}: the value is not JSON ({e.msg} at character {e.pos}); a string "
                       f"is written in double quotes, e.g. {k}='\"text\"' in a shell") from None
    except RecursionError:
        raise RunError(f"{where}: the value is JSON nested too deeply to parse") from None
    except ValueError as e:                     # NaN, Infinity; a number of over 4,300 digits
        raise RunError(f"{where}: the value is not JSON layertap-prep can read "
                       f"({_one_line(str(e).split(';')[0], 120)})") from None


def main(argv: list[str] | None = None) -> int:
    try:
        with _stdin_closed():          # a batch tool reads no answer to any prompt
            return _main(argv)
    except RunError as e:
        print(f"layertap-prep: {_one_line(e, 2000)}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    t_start = time.monotonic()
    args = build_parser().parse_args(argv)
    if args.max_tokens is not None and args.max_tokens < 1:
        raise RunError("--max-tokens must be at least 1")
    if args.workers < 1:
        raise RunError("--workers must be at least 1")
    if args.max_record_bytes < 1:
        raise RunError("--max-record-bytes must be at least 1")
    if args.max_messages < 1:
        raise RunError("--max-messages must be at least 1")
    kw = dict(_template_arg(item) for item in args.template_arg)
    # the paths first: a typo is found before the tokenizer loads
    _open_input(args.inp).close()
    _check_output(args.out, "--out", create=True)
    if args.report:
        _check_output(args.report, "--report", create=False)
    for opt, path, other, what in (("--out", args.out, args.inp, "the --in file"),
                                   ("--report", args.report, args.inp, "the --in file"),
                                   ("--report", args.report, args.out, "the --out file")):
        if path and _same_file(path, other):
            raise RunError(f"{opt} {path}: is {what}")
    try:
        tok = load_tokenizer(args.model, args.gguf, args.trust_remote_code)
        eot = end_of_turn_ids(tok, args.model, args.eot)
        renderer = Renderer(tok, eot, kw, args.max_messages)
    except (OSError, ValueError, ImportError) as e:   # ImportError: a tokenizer's own code
        raise RunError(str(e)) from None
    except Exception as e:
        raise RunError(f"--model {args.model}: {type(e).__name__}: {e}") from None
    t_loaded = time.monotonic()
    s = prepare(args.inp, args.out, renderer, args.max_tokens, workers=args.workers,
                max_record_bytes=args.max_record_bytes)
    t_done = time.monotonic()
    rate = s.records / max(t_done - t_loaded, 1e-9)
    print(f"layertap-prep: {s.records} records: {s.written} written to {args.out} "
          f"({s.tokens} tokens, {s.assistant_tokens} in the loss mask), {s.rejected} rejected, "
          f"{s.truncated} truncated to --max-tokens; start-up {t_loaded - t_start:.1f} s, "
          f"{rate:.0f} records/s on {args.workers} worker{'s' if args.workers > 1 else ''}",
          file=sys.stderr)
    if args.report:
        try:
            Path(args.report).write_text(json.dumps({
                "input": args.inp, "output": args.out, "records": s.records,
                "written": s.written, "rejected": s.rejected, "truncated": s.truncated,
                "tokens": s.tokens, "assistant_tokens": s.assistant_tokens,
                "max_tokens": args.max_tokens, "max_record_bytes": args.max_record_bytes,
                "max_messages": args.max_messages,
                "end_of_turn_ids": sorted(eot), "workers": args.workers,
                "startup_seconds": round(t_loaded - t_start, 3),
                "prepare_seconds": round(t_done - t_loaded, 3), "errors": s.errors},
                indent=1) + "\n")
        except OSError as e:
            raise RunError(f"--report {args.report}: cannot be written "
                           f"({e.strerror or e})") from None
    if s.written == 0:
        print("layertap-prep: no record could be prepared", file=sys.stderr)
        return 1
    return 1 if (args.strict and s.rejected) else 0


if __name__ == "__main__":
    sys.exit(main())
