"""layertap-prep on hostile and broken input (issue 18 item 7, issue 19 item 4).

A bad record is that record's refusal: reported by line number with one line saying why (on
stderr and in --report), counted, and every other record written exactly as a clean run writes
it, with the documented exit code (0, or 1 with --strict). A problem of the whole run (the input,
the tokenizer or the output cannot be used) is one line on stderr naming the file, no traceback,
exit code 2. Lines longer than --max-record-bytes are refused before they are decoded or parsed.
"""

import io
import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from helpers import CHATML, make_char_tokenizer, write_jsonl

from layertap import prep
from layertap.prep import DEFAULT_MAX_MESSAGES, DEFAULT_MAX_RECORD_BYTES, main

SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
LIMIT = 256 << 10          # --max-record-bytes for the table: the deep-nesting row fits under it
HOSTILE_LINE = 3           # every row's line sits after two good records and before a third


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return make_char_tokenizer(tmp_path_factory.mktemp("tok"), CHATML, SPECIALS, bos="<s>",
                               eos="<|im_end|>")


def conv(rid, q="Q", a="A", **extra):
    return {"id": rid, "messages": [{"role": "user", "content": q},
                                    {"role": "assistant", "content": a}], **extra}


def enc(rec) -> bytes:
    return json.dumps(rec).encode()


# distinct ids, so the good records write the same bytes wherever they sit in the file
GOOD = [enc(conv(f"good-{i}", q=f"Question {i}, 日本語?", a=f"Answer {i}.")) for i in range(3)]


def sized(n: int, rid: str) -> bytes:
    """A valid record of exactly n bytes (the padding is a key prep ignores: no rendering cost)."""
    base = enc(conv(rid, pad=""))
    line = enc(conv(rid, pad="x" * (n - len(base))))
    assert len(line) == n
    return line


def truncated_at_end() -> tuple[bytes, int]:
    """A record cut after a complete value, with non-ASCII text before the cut: json's column
    is one past the last character (characters, not bytes)."""
    line = json.dumps(conv("cut", q="Grüße aus Köln, 日本語", a="the answer"),
                      ensure_ascii=False)
    cut = line[:-2]                                  # ...{"role": "assistant", "content": "..."}
    assert len(cut.encode()) > len(cut)
    return cut.encode(), len(cut) + 1


CUT, CUT_COL = truncated_at_end()
MID = enc(conv("mid", a="an answer cut in its middle"))
MID_CUT = MID[:MID.index(b"cut in")]
MID_COL = MID.index(b'"an answer') + 1

SKIPPED, WRITTEN = "skipped", "written"

# (name, the hostile line's bytes, the reason its refusal must give, or SKIPPED / WRITTEN)
ROWS = [
    ("list_role", b'{"messages": [{"role": ["user"], "content": "Q"}, '
                  b'{"role": "assistant", "content": "A"}]}',
     '"role" must be a string, found an array'),
    ("int_role", b'{"messages": [{"role": 5, "content": "Q"}, '
                 b'{"role": "assistant", "content": "A"}]}',
     '"role" must be a string, found a number'),
    ("list_from", b'{"conversations": [{"from": ["human"], "value": "Q"}]}',
     '"from" must be a string, found an array'),
    ("invalid_utf8", GOOD[0].replace(b"Question 0", b"Question \xff\xfe"),
     "not valid UTF-8: byte 0xff at byte"),
    ("utf8_encoded_surrogate", GOOD[0].replace(b"Question 0", b"Question \xed\xa0\x80"),
     "not valid UTF-8: byte 0xed"),
    ("lone_surrogate_content", b'{"messages": [{"role": "user", "content": "Q\\ud800"}, '
                               b'{"role": "assistant", "content": "A"}]}',
     "messages[0].content: a lone surrogate"),
    ("lone_surrogate_id", enc(conv("x")).replace(b'"x"', b'"x\\udfff"'), "id: a lone surrogate"),
    ("lone_surrogate_key", enc(conv("k"))[:-1] + b', "\\udbff": 1}',
     "a key of the record: a lone surrogate"),
    ("nesting_100000_deep", b'{"messages": ' + b"[" * 100000 + b"]" * 100000 + b"}",
     "JSON nested too deeply to parse"),
    ("id_5000_digits", enc(conv(0)).replace(b'"id": 0', b'"id": ' + b"9" * 5000),
     "digits, more than Python reads"),
    ("id_beyond_64_bits", enc(conv(2**64)), "does not fit in 64 bits"),
    ("id_float", enc(conv(1.5)), '"id" must be a string or an integer, found a number'),
    ("truncated_after_a_value", CUT,
     f"malformed JSON at column {CUT_COL} (the line ends there): Expecting ',' delimiter"),
    ("truncated_inside_a_string", MID_CUT,
     f"malformed JSON at column {MID_COL} (the line ends inside this string): Unterminated string"),
    ("not_json", b"{not json", "malformed JSON at column 2"),
    ("non_object_array", b"[1, 2]", "expected a JSON object, found an array"),
    ("non_object_null", b"null", "expected a JSON object, found null"),
    ("non_object_string", b'"hello"', "expected a JSON object, found a string"),
    ("messages_a_string", b'{"messages": "hello"}',
     '"messages" must be a non-empty list, found a string'),
    ("content_dict_without_text", b'{"messages": [{"role": "user", "content": {"type": "text"}}, '
                                  b'{"role": "assistant", "content": "A"}]}',
     "content must be a string or a list of text parts, found an object"),
    ("text_part_without_text", b'{"messages": [{"role": "user", "content": [{"type": "text"}]}, '
                               b'{"role": "assistant", "content": "A"}]}',
     'a text part whose "text" is null'),
    ("huge_unknown_role", enc({"messages": [{"role": "r" * 100000, "content": "Q"}]}),
     "unknown role 'rrr"),
    ("terminal_escape_role", enc({"messages": [{"role": "\x1b]0;owned\x07\n", "content": "Q"}]}),
     "unknown role '\\x1b]0;owned\\x07\\n'"),
    ("tools_a_number", enc(conv("t", tools=5)), '"tools" must be a list of tool definitions, found a number'),
    ("tools_string_not_json", enc(conv("t", tools="[{")), '"tools" is a string that does not hold JSON'),
    ("tools_entry_not_an_object", enc(conv("t", tools=[{"type": "function"}, "f"])),
     "tools[1]: expected an object, found a string"),
    ("over_max_messages", enc({"messages": [{"role": ("user", "assistant")[i % 2], "content": "x"}
                                            for i in range(DEFAULT_MAX_MESSAGES + 1)]}),
     f"{DEFAULT_MAX_MESSAGES + 1} messages, over --max-messages {DEFAULT_MAX_MESSAGES}"),
    ("function_call_not_json", enc({"conversations": [{"from": "human", "value": "Q"},
                                                      {"from": "function_call", "value": "get(1)"}]}),
     'conversations[1]: a "function_call" value must be JSON text holding a call'),
    ("function_call_without_name", enc({"conversations": [
        {"from": "human", "value": "Q"}, {"from": "function_call", "value": '[{"arguments": {}}]'}]}),
     'conversations[1]: call 0 is not an object with a string "name" and "arguments"'),
    ("system_not_a_string", enc(conv("s", system=["be brief"])), '"system" must be a string, found an array'),
    ("system_twice", enc({"system": "A", "messages": [{"role": "system", "content": "B"},
                                                      {"role": "user", "content": "Q"},
                                                      {"role": "assistant", "content": "A"}]}),
     'has both a "system" and a system turn (messages[0])'),
    ("empty_line", b"", SKIPPED),
    ("whitespace_line", b" \t  \r", SKIPPED),
    ("crlf_line", enc(conv("crlf")) + b"\r", WRITTEN),
    ("just_below_max_record_bytes", sized(LIMIT, "at-limit"), WRITTEN),
    ("just_above_max_record_bytes", sized(LIMIT + 1, "over"),
     f"the line is {LIMIT + 1} bytes, over --max-record-bytes {LIMIT}; not parsed"),
]


def _file(path, hostile: bytes | None):
    lines = GOOD[:2] + ([hostile] if hostile is not None else []) + GOOD[2:]
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _run(tok_dir, src, tmp_path, *extra):
    out, rep = tmp_path / "out.jsonl", tmp_path / "report.json"
    rc = main(["--model", str(tok_dir), "--in", str(src), "--out", str(out), "--report", str(rep),
               "--max-record-bytes", str(LIMIT), *extra])
    return rc, out.read_bytes().splitlines(keepends=True), json.loads(rep.read_text())


@pytest.fixture(scope="module")
def clean(tok_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("clean")
    rc, out, report = _run(tok_dir, _file(d / "in.jsonl", None), d)
    assert rc == 0 and report["errors"] == [] and len(out) == 3
    return out


@pytest.mark.parametrize("name, line, why", ROWS, ids=[r[0] for r in ROWS])
def test_one_hostile_record(tok_dir, clean, tmp_path, capsys, name, line, why):
    src = _file(tmp_path / "in.jsonl", line)
    rc, out, report = _run(tok_dir, src, tmp_path)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert rc == 0                          # refusals exit 0 without --strict
    if why == SKIPPED:                      # not a record: nothing to refuse, nothing written
        assert (report["records"], report["errors"], out) == (3, [], clean)
        return
    assert report["records"] == 4
    if why == WRITTEN:
        assert report["errors"] == [] and out[:2] + out[3:] == clean
        assert json.loads(out[2])["id"] == json.loads(line)["id"]
        return
    assert out == clean, "the other records must be written as a clean run writes them"
    (e,) = report["errors"]
    assert e["line"] == HOSTILE_LINE and why in e["error"], e
    (msg,) = [m for m in err.splitlines() if f"{src}:{HOSTILE_LINE}" in m]
    assert why in msg and len(msg) < 700 and msg.isprintable(), msg


def test_every_row_at_once_with_workers(tok_dir, tmp_path):
    """All the hostile lines in one file: the same output and report order with 1 and 2
    workers, and as a process: no traceback, exit 0, and 1 with --strict."""
    lines = []
    for _, line, _ in ROWS:
        lines += [GOOD[0], line]
    src = tmp_path / "all.jsonl"
    src.write_bytes(b"".join(line + b"\n" for line in lines + [GOOD[1]]))
    refused = [2 * k + 2 for k, (_, _, why) in enumerate(ROWS) if why not in (SKIPPED, WRITTEN)]
    runs = []
    for w in ("1", "2"):
        rc, out, report = _run(tok_dir, src, tmp_path, "--workers", w)
        assert rc == 0
        assert [e["line"] for e in report["errors"]] == refused
        runs.append((out, report["errors"]))
    assert runs[0] == runs[1]
    r = subprocess.run([sys.executable, "-m", "layertap.prep", "--model", str(tok_dir),
                        "--in", str(src), "--out", str(tmp_path / "p.jsonl"), "--workers", "2",
                        "--max-record-bytes", str(LIMIT), "--strict"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert (tmp_path / "p.jsonl").read_bytes().splitlines(keepends=True) == runs[0][0]
    assert len(r.stderr.splitlines()) == len(refused) + 1          # one line each, and the summary


def test_max_messages_is_the_bound(tok_dir, tmp_path):
    """--max-messages N renders a conversation of N messages and refuses one of N + 1."""
    turns = lambda n: [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(n)]
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "six", "messages": turns(6)},
                                              {"id": "seven", "messages": turns(7)}])
    rc, out, report = _run(tok_dir, src, tmp_path, "--max-messages", "6")
    assert rc == 0 and [json.loads(l)["id"] for l in out] == ["six"]
    (e,) = report["errors"]
    assert e["line"] == 2 and "7 messages, over --max-messages 6" in e["error"], e
    assert report["max_messages"] == 6


def test_a_killed_worker_ends_the_run(tok_dir, tmp_path, monkeypatch, capsys):
    """A --workers process that dies (as the OOM killer ends one) ends the run in one line naming
    the lines it held, exit 2, no output and no .tmp left, instead of waiting for ever."""
    import signal

    parent, real = os.getpid(), prep._prepare_line

    def dies_on_line_40(renderer, max_tokens, line_no, line):     # forked workers inherit it
        if line_no == 40 and os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(renderer, max_tokens, line_no, line)

    monkeypatch.setattr(prep, "_prepare_line", dies_on_line_40)
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(enc(conv(f"r{i}")) + b"\n" for i in range(200)))
    out = tmp_path / "out.jsonl"
    def hung(*_):
        raise TimeoutError("the run still waits 120 s after its worker died")

    old = signal.signal(signal.SIGALRM, hung)  # a hang fails the test instead of stalling the suite
    signal.alarm(120)
    try:
        rc = main(["--model", str(tok_dir), "--in", str(src), "--out", str(out), "--workers", "2"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err = capsys.readouterr().err
    assert rc == 2, err
    (msg,) = err.splitlines()
    m = re.search(r"a --workers process died \(killed by a signal or out of memory\) while lines "
                  r"(\d+)-(\d+) were being rendered; nothing was written", msg)
    assert m and int(m[1]) <= 40 <= int(m[2]), msg
    assert not out.exists() and not os.path.exists(str(out) + ".tmp")


def test_a_50_mb_record_is_refused_before_parsing(tok_dir, tmp_path, monkeypatch):
    """The default bound (16 MiB): the 50 MB line is never decoded or parsed, and never held in
    memory whole; the records around it are written."""
    big = enc(conv("big", q="x" * 50_000_000))
    src = tmp_path / "in.jsonl"
    src.write_bytes(GOOD[0] + b"\n" + big + b"\n" + GOOD[1] + b"\n")
    seen = []
    real = json.loads

    def spy(s, *a, **kw):
        seen.append(len(s))
        return real(s, *a, **kw)

    monkeypatch.setattr(prep.json, "loads", spy)
    out, rep = tmp_path / "out.jsonl", tmp_path / "r.json"
    assert main(["--model", str(tok_dir), "--in", str(src), "--out", str(out),
                 "--report", str(rep)]) == 0
    assert max(seen) <= DEFAULT_MAX_RECORD_BYTES, "json.loads saw the 50 MB line"
    (e,) = json.loads(rep.read_text())["errors"]
    assert e == {"line": 2, "error": f"the line is {len(big)} bytes, over --max-record-bytes "
                                     f"{DEFAULT_MAX_RECORD_BYTES}; not parsed"}
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["good-0", "good-1"]
    # memory follows the bound, not the line: with a 1 MiB bound, a few MiB are ever allocated
    tracemalloc.start()
    try:
        assert main(["--model", str(tok_dir), "--in", str(src), "--out", str(out),
                     "--max-record-bytes", str(1 << 20)]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes traced for a 50 MB line under a 1 MiB bound"


@pytest.mark.parametrize("data, limit, want", [
    (b"", 4, []),
    (b"abcd", 4, [b"abcd"]),                       # the last line, no newline, at the limit
    (b"abcde", 4, [5]),                            # over it, no newline
    (b"abcd\nabcde\n\nab", 4, [b"abcd", 5, b"", b"ab"]),
    (b"a" * 10 + b"\n" + b"b" * (3 << 20) + b"\nc", 4, [10, 3 << 20, b"c"]),
    (b"\xef\xbb\xbfab\n\xef\xbb\xbfab\n", 8, [b"ab", b"\xef\xbb\xbfab"]),  # a BOM on line 1 only
], ids=["empty", "at-limit-eof", "over-eof", "mixed", "long-lines", "bom"])
def test_lines_are_bounded(tmp_path, data, limit, want):
    """The reader yields each line without its newline, or the length of one over the limit."""
    f = tmp_path / "x"
    f.write_bytes(data)
    with open(f, "rb") as fin:
        got = [(n, x.size if isinstance(x, prep._TooLarge) else x)
               for n, x in prep._lines(fin, limit, str(f))]
    assert got == list(enumerate(want, start=1))


# ---- problems of the whole run: one line naming the file, exit 2 ------------------------------
def _broken_tokenizer_json(d):
    t = d / "tokenizer.json"
    t.write_bytes(t.read_bytes()[:300])
    return t


def _model_file(name, text):
    """A row's break: the model directory's file `name` rewritten as `text`."""
    def breaks(m, w):
        t = m / name
        t.write_text(text)
        return {}, t
    return breaks


# (name, what to break: (model dir, work dir) -> (args to change, the path the line must name),
#  whether to run it as a process: the rows that fail before transformers is imported, and the
#  two tokenizer files the issue names; the rest run in-process, where importing is paid once)
RUN_ROWS = [
    ("missing_in", lambda m, w: ({"--in": w / "missing.jsonl"}, w / "missing.jsonl"), True),
    ("in_a_directory", lambda m, w: ({"--in": w}, w), True),
    ("out_dir_missing", lambda m, w: ({"--out": w / "nope" / "o.jsonl"}, w / "nope"), True),
    ("out_dir_a_file", lambda m, w: ({"--out": w / "in.jsonl" / "o.jsonl"}, w / "in.jsonl"), True),
    ("out_dir_read_only", lambda m, w: ({"--out": _read_only(w) / "o.jsonl"}, w / "ro"), True),
    ("out_a_directory", lambda m, w: ({"--out": w}, w), True),
    ("out_is_in", lambda m, w: ({"--out": w / "in.jsonl"}, w / "in.jsonl"), True),
    ("report_dir_missing", lambda m, w: ({"--report": w / "nope" / "r.json"}, w / "nope"), True),
    ("report_is_in", lambda m, w: ({"--report": w / "in.jsonl"}, w / "in.jsonl"), True),
    ("report_is_out", lambda m, w: ({"--report": w / "out.jsonl"}, w / "out.jsonl"), True),
    ("model_missing", lambda m, w: ({"--model": w / "nomodel"}, w / "nomodel"), True),
    ("max_record_bytes_zero", lambda m, w: ({"--max-record-bytes": 0}, "--max-record-bytes"), True),
    ("max_messages_zero", lambda m, w: ({"--max-messages": 0}, "--max-messages"), True),
    ("broken_tokenizer_json", lambda m, w: ({}, _broken_tokenizer_json(m)), True),
    ("tokenizer_config_not_json", _model_file("tokenizer_config.json", "{not json"), True),
    ("tokenizer_json_not_a_tokenizer", _model_file("tokenizer.json", "{}"), False),
    ("tokenizer_config_an_array", _model_file("tokenizer_config.json", "[]"), False),
    ("generation_config_not_json", _model_file("generation_config.json", '{"eos_token_id": [1, '),
     False),
    ("chat_template_not_jinja", _model_file("chat_template.jinja", "{% for m in messages %}{{ m.content "),
     False),
    ("tokenizer_shipped_as_code", lambda m, w: ({}, _code_model(m, w, "tokenizer")), False),
    # --eot: an id is compared by its digits, never converted when it has more than the vocabulary
    ("eot_5000_digits", lambda m, w: ({"--eot": "9" * 5000},
                                      "--eot 99999999999999999999... (5000 digits): not an id"), False),
    ("eot_beyond_the_vocabulary", lambda m, w: ({"--eot": "100000"}, "--eot 100000: not an id"),
     False),
    ("eot_not_a_token", lambda m, w: ({"--eot": "<|eot_id|>" * 1000},
                                      "is not a token of this tokenizer's vocabulary"), False),
    # --template-arg values are JSON: Python's spellings, bare words and non-JSON numbers are
    # refused before the tokenizer loads, naming the option
    ("template_arg_python_false", lambda m, w: ({"--template-arg": "enable_thinking=False"},
                                                "the value is not JSON; write enable_thinking=false"),
     True),
    ("template_arg_python_true", lambda m, w: ({"--template-arg": "enable_thinking=True"},
                                               "write enable_thinking=true"), False),
    ("template_arg_python_none", lambda m, w: ({"--template-arg": "x=None"}, "write x=null"), False),
    ("template_arg_upper_case", lambda m, w: ({"--template-arg": "x=FALSE"}, "write x=false"), False),
    ("template_arg_bare_word", lambda m, w: ({"--template-arg": "reasoning_effort=high"},
                                             "--template-arg 'reasoning_effort=high': the value is "
                                             "not JSON (Expecting value at character 0); a string is "
                                             "written in double quotes"), False),
    ("template_arg_misspelt", lambda m, w: ({"--template-arg": "enable_thinking=flase"},
                                            "the value is not JSON"), False),
    ("template_arg_empty", lambda m, w: ({"--template-arg": "x="}, "the value is not JSON"), False),
    ("template_arg_nan", lambda m, w: ({"--template-arg": "x=NaN"}, "NaN is not JSON"), False),
    ("template_arg_5000_digits", lambda m, w: ({"--template-arg": "x=" + "9" * 5000},
                                               "not JSON layertap-prep can read (Exceeds the limit"),
     False),
    ("template_arg_nested_too_deep", lambda m, w: ({"--template-arg": "x=" + "[" * 100000 + "]" * 100000},
                                                   "nested too deeply"), False),
    ("template_arg_no_key", lambda m, w: ({"--template-arg": "=false"}, "expected KEY=JSON"), False),
    ("template_arg_no_equals", lambda m, w: ({"--template-arg": "enable_thinking"},
                                             "expected KEY=JSON"), False),
    ("template_arg_sets_tokenize", lambda m, w: ({"--template-arg": "tokenize=true"},
                                                 "layertap-prep sets tokenize itself"), False),
]


def _code_model(m, w, where: str):
    """Make model directory m name code shipped with it: a Python file that creates the marker
    file w/MARKER when it is imported, named by auto_map in tokenizer_config.json (a tokenizer
    class transformers lacks: loading it needs the code) or in config.json (a config class of a
    model type transformers does not know, which the tokenizer does not need; or, with
    "config-tokenizer", the tokenizer class in config.json's auto_map)."""
    marker = w / "MARKER"
    (m / "marker_code.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from transformers import PreTrainedConfig, PreTrainedTokenizerFast\n"
        "class MarkerConfig(PreTrainedConfig):\n    model_type = 'layertap_marker'\n"
        "class MarkerTokenizer(PreTrainedTokenizerFast):\n    pass\n")
    if where == "tokenizer":
        conf = json.loads((m / "tokenizer_config.json").read_text())
        conf["tokenizer_class"] = "MarkerTokenizer"
        conf["auto_map"] = {"AutoTokenizer": [None, "marker_code.MarkerTokenizer"]}
        (m / "tokenizer_config.json").write_text(json.dumps(conf))
        return f"{m}: the tokenizer is code shipped with the model"
    if where == "config-tokenizer":
        # config.json's auto_map, which transformers 5 does not read for a tokenizer: it would
        # silently load the class of the model type (llama)
        conf = json.loads((m / "tokenizer_config.json").read_text())
        conf.pop("tokenizer_class", None)
        (m / "tokenizer_config.json").write_text(json.dumps(conf))
        (m / "config.json").write_text(json.dumps(
            {"model_type": "llama", "auto_map": {"AutoTokenizer": [None, "marker_code.MarkerTokenizer"]}}))
        return f"{m}: the tokenizer is code shipped with the model"
    (m / "config.json").write_text(json.dumps(
        {"model_type": "layertap_marker", "auto_map": {"AutoConfig": "marker_code.MarkerConfig"}}))
    return str(m)


def _read_only(w):
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only directory")
    d = w / "ro"
    d.mkdir()
    d.chmod(0o500)
    return d


@pytest.mark.parametrize("name, breaks, as_process", RUN_ROWS, ids=[r[0] for r in RUN_ROWS])
def test_whole_run_problem_is_one_line(tok_dir, tmp_path, capsys, name, breaks, as_process):
    model = tmp_path / "model"
    model.mkdir()
    for f in tok_dir.iterdir():
        (model / f.name).write_bytes(f.read_bytes())
    work = tmp_path / "work"
    work.mkdir()
    src = write_jsonl(work / "in.jsonl", [conv("a")])
    out = work / "out.jsonl"
    changes, named = breaks(model, work)
    args = {"--model": model, "--in": src, "--out": out, "--report": work / "r.json", **changes}
    argv = [str(x) for kv in args.items() for x in kv]
    if as_process:
        r = subprocess.run([sys.executable, "-m", "layertap.prep", *argv],
                           capture_output=True, text=True)
        rc, err = r.returncode, r.stderr
    else:
        rc, err = main(argv), capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("layertap-prep: ") and str(named) in lines[0], lines[0]
    assert not out.exists() and not os.path.exists(str(out) + ".tmp")
    assert src.read_text() == json.dumps(conv("a")) + "\n"


# ---- model code runs only with --trust-remote-code -------------------------------------------
def _copy_model(tok_dir, d):
    d.mkdir()
    for f in tok_dir.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    return d


def _prep_with_yes(argv, cwd):
    """layertap-prep as a process with `yes` on its standard input, as `yes | layertap-prep`: a
    prompt for running the model's code would be answered y."""
    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        return subprocess.run([sys.executable, "-m", "layertap.prep", *map(str, argv)],
                              stdin=yes.stdout, capture_output=True, text=True, cwd=cwd,
                              timeout=300)
    finally:
        yes.kill()
        yes.wait()


@pytest.mark.parametrize("where", ["tokenizer", "config-tokenizer", "config"])
def test_model_code_never_runs_unasked(tok_dir, tmp_path, where):
    """A model directory whose auto_map names a Python file (one that creates a marker file when
    imported), run with `yes |` on standard input and without --trust-remote-code: nothing
    prompts and the file is never imported. Where the tokenizer is that code, the run is refused
    in one line naming the directory and the flag, exit 2; where only config.json names code
    (for a config class), the tokenizer loads without it and the run writes what the directory
    without the auto_map writes. With --trust-remote-code the code runs (the marker proves the
    test would see it)."""
    plain = _copy_model(tok_dir, tmp_path / "plain")
    model = _copy_model(tok_dir, tmp_path / "model")
    work = tmp_path / "work"
    work.mkdir()
    _code_model(model, work, where)
    marker = work / "MARKER"
    src = write_jsonl(work / "in.jsonl", [conv("a"), conv("b", q="Why?", a="Because.")])
    out = work / "out.jsonl"
    r = _prep_with_yes(["--model", model, "--in", src, "--out", out], work)
    assert not marker.exists(), f"the model's code ran without --trust-remote-code: {r.stderr}"
    assert "Traceback" not in r.stderr and "[y/N]" not in r.stderr + r.stdout, r.stderr
    if where != "config":
        assert r.returncode == 2, r.stderr
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"layertap-prep: {model}: ") and "--trust-remote-code" in line, line
        assert not out.exists()
    else:
        assert r.returncode == 0, r.stderr
        assert main(["--model", str(plain), "--in", str(src), "--out", str(work / "plain.jsonl")]) == 0
        assert out.read_bytes() == (work / "plain.jsonl").read_bytes()
    r = _prep_with_yes(["--model", model, "--in", src, "--out", out, "--trust-remote-code"], work)
    # transformers 5 reads a tokenizer's auto_map from tokenizer_config.json only: with the flag
    # the config.json entry is still not imported (the run takes transformers' class)
    assert r.returncode == 0 and marker.exists() == (where != "config-tokenizer"), r.stderr


def test_loader_is_told_and_reads_no_stdin(tok_dir, tmp_path, monkeypatch, capsys):
    """transformers is given trust_remote_code=False explicitly (left out, it prompts), standard
    input is empty while it loads (an input() there ends at once), and its refusal to run code
    becomes one line naming the directory and --trust-remote-code, exit 2."""
    from transformers import AutoTokenizer

    seen = {}

    def asks(name, **kw):
        seen.update(kw)
        try:
            seen["answer"] = input("Do you wish to run the custom code? [y/N] ")
        except EOFError:
            seen["answer"] = EOFError
        raise ValueError(f"The repository {name} contains custom code which must be executed to "
                         "correctly load the model.\nPlease pass the argument "
                         "`trust_remote_code=True` to allow custom code to be run.")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", asks)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 100))
    src = write_jsonl(tmp_path / "in.jsonl", [conv("a")])
    rc = main(["--model", str(tok_dir), "--in", str(src), "--out", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert seen["trust_remote_code"] is False and seen["answer"] is EOFError, seen
    (line,) = err.splitlines()
    assert line == (f"layertap-prep: {tok_dir}: loading the tokenizer needs code shipped with the "
                    "model (auto_map in the model's files); pass --trust-remote-code to load it "
                    "(this runs the model directory's Python)"), line
    assert sys.stdin.read() == "y\n" * 100, "main() must give standard input back as it was"


# ---- --template-arg values are JSON -----------------------------------------------------------
@pytest.mark.parametrize("item, want", [
    ("enable_thinking=false", ("enable_thinking", False)),
    ("enable_thinking=true", ("enable_thinking", True)),
    ("enable_thinking= false ", ("enable_thinking", False)),
    ("x=null", ("x", None)),
    ("x=0", ("x", 0)),
    ("x=-1.5e3", ("x", -1500.0)),
    ('reasoning_effort="high"', ("reasoning_effort", "high")),
    ('x="False"', ("x", "False")),                   # a string, written as one, stays one
    ("x=a=b", None),                                  # refused: the value a=b is not JSON
    ('x="a=b"', ("x", "a=b")),
    ('tools=[{"type": "function"}]', ("tools", [{"type": "function"}])),
    ('x={"a": [1, null]}', ("x", {"a": [1, None]})),
])
def test_template_arg_values(item, want):
    if want is None:
        with pytest.raises(prep.RunError, match="the value is not JSON"):
            prep._template_arg(item)
    else:
        got = prep._template_arg(item)
        assert got == want and type(got[1]) is type(want[1])


def test_enable_thinking_false_reaches_the_template(tmp_path):
    """The no-think run renders without thinking: `enable_thinking=false` is JSON false, which
    the template reads as false; Python's `False` is refused rather than passed on as the string
    "False", which every template reads as true."""
    template = ("{{ 'think ' if enable_thinking is not defined or enable_thinking else 'nothink ' }}"
                + CHATML)
    d = make_char_tokenizer(tmp_path / "tok", template, SPECIALS, bos="<s>", eos="<|im_end|>")
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True, trust_remote_code=False)
    src = write_jsonl(tmp_path / "in.jsonl", [conv("a")])
    out = tmp_path / "o.jsonl"
    for arg, starts in (([], "think "), (["--template-arg", "enable_thinking=true"], "think "),
                        (["--template-arg", "enable_thinking=false"], "nothink "),
                        (["--template-arg", "enable_thinking=0"], "nothink ")):
        assert main(["--model", str(d), "--in", str(src), "--out", str(out), *arg]) == 0
        (rec,) = [json.loads(x) for x in out.read_text().splitlines()]
        text = "".join(tok.convert_ids_to_tokens(rec["input_ids"]))      # one token a character
        assert text.startswith(starts + "<|im_start|>user"), (arg, text)
    out.unlink()
    assert main(["--model", str(d), "--in", str(src), "--out", str(out),
                 "--template-arg", "enable_thinking=False"]) == 2
    assert not out.exists()


# ---- the installed wrappers (cmake/python_tool.sh.in) -----------------------------------------
WRAPPER = Path(__file__).resolve().parents[2] / "cmake" / "python_tool.sh.in"


def _wrapper(tmp_path, default_env):
    w = tmp_path / "layertap-prep"
    w.write_text(WRAPPER.read_text().replace("@LAYERTAP_TOOL@", "layertap-prep")
                 .replace("@LAYERTAP_PYENV@", str(default_env)))
    w.chmod(0o755)
    return w


def _env_with_tool(env, text, mode=0o755):
    (env / "bin").mkdir(parents=True)
    tool = env / "bin" / "layertap-prep"
    tool.write_text(text)
    tool.chmod(mode)
    return env


def _env_with_dangling_tool(env):
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "layertap-prep").symlink_to(env / "gone")
    return env


# pip's script for an interpreter path too long for #!: sh runs it, and it execs the Python
LONG_PATH_FORM = ("#!/bin/sh\n" + "'" * 3 + "exec' \"/no/such/python 3\" \"$0\" \"$@\"\n"
                  + "' " + "'" * 3 + "\nprint(1)\n")
WRAPPER_ROWS = [
    ("env_missing", lambda e: e, "is missing; create it with 'bash tools/python_env.sh'"),
    ("env_without_the_tool", lambda e: (e / "bin").mkdir(parents=True) or e,
     "has no executable bin/layertap-prep; remove it and create it again with "
     "'bash tools/python_env.sh'"),
    ("tool_not_executable", lambda e: _env_with_tool(e, "#!/bin/sh\n", 0o644),
     "has no executable bin/layertap-prep"),
    ("tool_a_dangling_link", _env_with_dangling_tool, "has no executable bin/layertap-prep"),
    ("interpreter_gone", lambda e: _env_with_tool(e, "#!/no/such/python3\nprint(1)\n"),
     "cannot run bin/layertap-prep: the interpreter it names, /no/such/python3, is missing"),
    ("interpreter_gone_with_an_argument", lambda e: _env_with_tool(e, "#! /no/such/python3 -E\n"),
     "the interpreter it names, /no/such/python3, is missing"),
    ("interpreter_gone_long_path_form", lambda e: _env_with_tool(e, LONG_PATH_FORM),
     "the interpreter it names, /no/such/python 3, is missing"),
]


@pytest.mark.parametrize("name, make, why", WRAPPER_ROWS, ids=[r[0] for r in WRAPPER_ROWS])
def test_wrapper_without_a_working_environment(tmp_path, name, make, why):
    """The installed wrapper, when its environment cannot run the tool: one line naming the
    environment and how to create it, exit 2, not the shell's 'exec: ...: not found' (127)."""
    env = make(tmp_path / "env")
    w = _wrapper(tmp_path, tmp_path / "default-env")
    r = subprocess.run(["sh", str(w), "--help"], capture_output=True, text=True,
                       env={**os.environ, "LAYERTAP_PYENV": str(env)})
    assert r.returncode == 2, (r.returncode, r.stderr)
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"layertap-prep: its Python environment {env} ") and why in line, line
    assert "not found" not in line and r.stdout == ""


def test_wrapper_runs_the_tool(tmp_path):
    """With a working environment the wrapper runs its tool with the arguments as given; without
    LAYERTAP_PYENV it uses the environment it was installed with."""
    env = _env_with_tool(tmp_path / "env", '#!/bin/sh\nprintf "%s|" "$@"; exit 7\n')
    w = _wrapper(tmp_path, env)
    environ = {k: v for k, v in os.environ.items() if k != "LAYERTAP_PYENV"}
    r = subprocess.run([str(w), "a b", "", "--x"], capture_output=True, text=True, env=environ)
    assert (r.returncode, r.stdout, r.stderr) == (7, "a b||--x|", "")
