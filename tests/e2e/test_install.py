#!/usr/bin/env python3
"""`cmake --install BUILD --prefix P` gives a newcomer working commands from a new login shell:
`layertap --version` and `layertap --help` run from P/bin with nothing but PATH set; the
layertap-prep/-export wrappers run the tools from the Python environment (LAYERTAP_PYENV), or,
where it does not exist yet, say in one line how to create it and exit 2; jobs/ and the docs are
under P/share.
"""
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from e2e_common import ARGS, run_tests


class Install(unittest.TestCase):
    def setUp(self):
        self.prefix = Path(tempfile.mkdtemp(prefix="layertap-install-"))
        r = subprocess.run(["cmake", "--install", ARGS.build, "--prefix", str(self.prefix)], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def tearDown(self):
        shutil.rmtree(self.prefix, ignore_errors=True)

    def login_shell(self, command, **env):
        # A new shell with a clean environment: only HOME, PATH (the prefix first) and `env`. (A
        # login shell would reset PATH from /etc/profile, which holds the default prefix's bin:
        # test_default_prefix_is_on_a_login_path checks that.)
        clean = {"HOME": os.environ.get("HOME", "/root"), "PATH": f"{self.prefix}/bin:/usr/bin:/bin", **env}
        # A sanitizer build's runtime settings (suppressions) travel along.
        clean.update({k: v for k, v in os.environ.items() if k.endswith("SAN_OPTIONS") or k == "ASAN_SYMBOLIZER_PATH"})
        return subprocess.run(["env", "-i", *[f"{k}={v}" for k, v in clean.items()], "bash", "-c", command],
                              capture_output=True, text=True, timeout=120)

    def test_default_prefix_is_on_a_login_path(self):
        r = subprocess.run(["env", "-i", f"HOME={os.environ.get('HOME', '/root')}", "bash", "-lc", "echo $PATH"],
                           capture_output=True, text=True)
        self.assertIn("/usr/local/bin", r.stdout.strip().split(":"))

    def test_layertap_runs_from_the_prefix(self):
        r = self.login_shell("command -v layertap && layertap --version && layertap extract --help | head -n 1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"{self.prefix}/bin/layertap", r.stdout)
        self.assertIn("layertap ", r.stdout)
        self.assertIn("Usage: layertap extract", r.stdout)
        for path in ["share/layertap/jobs/sbatch_single_node.sh", "share/layertap/jobs/example-tiny.conf",
                     "share/doc/layertap/README.md", "share/doc/layertap/TRAINING.md"]:
            self.assertTrue((self.prefix / path).is_file(), path)
        self.assertTrue(os.access(self.prefix / "share/layertap/jobs/sbatch_single_node.sh", os.X_OK))

    def test_python_tool_wrappers(self):
        for tool in ("layertap-prep", "layertap-export"):
            with self.subTest(tool=tool, env="missing"):
                r = self.login_shell(f"{tool} --help", LAYERTAP_PYENV=str(self.prefix / "no-env"))
                self.assertEqual(r.returncode, 2)
                self.assertIn("tools/python_env.sh", r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            if Path(ARGS.pyenv, "bin", tool).exists():
                with self.subTest(tool=tool, env="present"):
                    r = self.login_shell(f"{tool} --help", LAYERTAP_PYENV=ARGS.pyenv)
                    self.assertEqual(r.returncode, 0, r.stderr[-2000:])
                    self.assertIn(f"usage: {tool}", r.stdout)


if __name__ == "__main__":
    run_tests(("build", "pyenv"), defaults={"pyenv": os.environ.get("LAYERTAP_PYENV", "/opt/layertap-pyenv")})
