#!/usr/bin/env python3
"""Every command's --help tells the truth about its parser, and the docs about --help:
  - extract, verify: every --option the help text mentions (usage line and prose) is one of the
    options its table lists, a usage line that spells options out lists them all, and every listed
    option parses (an unknown one is refused);
  - bench (CUDA builds): every --option its help mentions is one its table lists and is accepted
    by its parser (only a missing or bad value is reported, never "unknown option"), and an unknown
    one is refused;
  - README.md and docs/*.md: every --option written after `layertap <command>` on a line is one
    that command's help lists (a doc that shows a removed or misspelt option fails here).
"""
import functools
import re
import subprocess
import unittest
from pathlib import Path

from e2e_common import ARGS, run_tests

OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")


@functools.cache  # each command's help is read once (a layertap start costs an MPI start-up)
def help_text(*cmd):
    r = subprocess.run([ARGS.layertap, *cmd, "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def table_options(text):
    """Options a Boost.Program_options table lists: lines starting with '--name'."""
    return set(re.findall(r"^\s+(?:-\w \[ )?--([a-z][a-z0-9-]*)", text, re.M))


@functools.cache
def commands():
    names = ["extract", "inspect", "verify"]
    # bench is listed everywhere but runs in CUDA builds only.
    if subprocess.run([ARGS.layertap, "bench", "--help"], capture_output=True).returncode == 0:
        names.append("bench")
    return tuple(names)


class Help(unittest.TestCase):
    def test_mentioned_options_are_listed(self):
        for cmd in ("extract", "verify"):
            with self.subTest(cmd=cmd):
                text = help_text(cmd)
                listed = table_options(text)
                self.assertGreater(len(listed), 3, text)
                self.assertEqual(set(OPTION.findall(text)) - listed, set(), f"{cmd} --help mentions unlisted options")
                # A usage line that spells options out spells out all of them.
                usage = text.split("\n\n")[0]
                if "[--" in usage:
                    self.assertEqual(listed - {"help", "out"} - set(OPTION.findall(usage)), set(),
                                     f"{cmd}'s usage line omits options")

    def test_listed_options_parse_and_unknown_ones_are_refused(self):
        for cmd in ("extract", "verify"):
            text = help_text(cmd)
            for opt in sorted(table_options(text) - {"help"}):
                with self.subTest(cmd=cmd, option=opt):
                    r = subprocess.run([ARGS.layertap, cmd, f"--{opt}"], capture_output=True, text=True)
                    self.assertNotIn("unrecognised option", r.stderr)
                    self.assertNotIn("unknown option", r.stderr)
            r = subprocess.run([ARGS.layertap, cmd, "--no-such-option"], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no-such-option", r.stderr)

    def test_bench_help_matches_its_parser(self):
        if "bench" not in commands():
            self.skipTest("bench exists in CUDA builds only")
        text = help_text("bench")
        opts = set(OPTION.findall(text)) - {"help"}
        self.assertGreater(len(opts), 10, text)
        self.assertEqual(opts - table_options(text), set(), "bench --help mentions unlisted options")
        for opt in sorted(opts):
            with self.subTest(option=opt):
                r = subprocess.run([ARGS.layertap, "bench", f"--{opt}", "?"], capture_output=True, text=True)
                self.assertNotIn("unknown option", r.stderr)
        r = subprocess.run([ARGS.layertap, "bench", "--no-such-option", "1"], capture_output=True, text=True)
        self.assertIn("unknown option --no-such-option", r.stderr)

    def test_docs_show_only_real_options(self):
        listed = {cmd: table_options(help_text(cmd)) | set(OPTION.findall(help_text(cmd))) for cmd in commands()}
        root = Path(ARGS.source)
        bad = []
        for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
            for n, line in enumerate(doc.read_text().splitlines(), 1):
                for m in re.finditer(r"layertap (extract|inspect|verify|bench)\b(.*)", line):
                    cmd, rest = m.group(1), m.group(2)
                    rest = re.split(r"\blayertap[ -]", rest)[0]  # up to the next command on the line
                    if cmd not in listed:
                        continue
                    for opt in OPTION.findall(rest):
                        if opt not in listed[cmd]:
                            bad.append(f"{doc.name}:{n}: layertap {cmd} --{opt}")
        self.assertEqual(bad, [], "docs show options the command does not have")


if __name__ == "__main__":
    run_tests(("layertap", "source"))
