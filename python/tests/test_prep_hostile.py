"""layertap-prep on hostile and broken input (issue 18 item 7, issue 19 item 4).

A bad record is that record's refusal: reported by line number with one line saying why (on
stderr and in --report), counted, and every other record written exactly as a clean run writes
it, with the documented exit code (0, or 1 with --strict). A problem of the whole run (the input,
the tokenizer or the output cannot be used) is one line on stderr naming the file, no traceback,
exit code 2. Lines longer than --max-record-bytes are refused before they are decoded or parsed.
"""

import json
import os
import re
import subprocess
import sys
import tracemalloc

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
]


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
