"""docs/TRAINING.md's end-to-end block, run as written on the shipped tiny model: conversations
-> layertap-prep -> layertap extract -> layertap-export (all three) -> the trainers' loaders."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from conftest import REPO


def e2e_block() -> str:
    text = (REPO / "docs" / "TRAINING.md").read_text()
    m = re.search(r"<!-- e2e -->\s*```sh\n(.*?)```", text, re.S)
    assert m, "docs/TRAINING.md has no <!-- e2e --> block"
    return m.group(1)


def test_training_doc_end_to_end(layertap_bin, tmp_path):
    env = dict(os.environ, W=str(tmp_path / "w"))
    env["PATH"] = os.pathsep.join([str(Path(layertap_bin).parent), str(Path(sys.executable).parent),
                                   env.get("PATH", "")])
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", e2e_block()], cwd=REPO, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    w = tmp_path / "w"
    report = json.loads((w / "prep-report.json").read_text())
    assert (report["written"], report["rejected"]) == (5, 1)
    assert report["errors"][0]["line"] == 5
    tokens = [json.loads(l) for l in (w / "tokens.jsonl").read_text().splitlines()]
    assert [t["id"] for t in tokens] == ["c1", "c2", "c3", "c4", "c6"]
    # what layertap stored is what prep wrote
    m = json.loads((w / "hs" / "manifest.json").read_text())
    assert m["complete"] and m["totals"]["samples"] == 5
    with h5py.File(w / "hs" / m["shards"][0]["file"], "r") as f:
        off = f["sample_offsets"][...]
        for i, t in enumerate(tokens):
            assert f["input_ids"][off[i]:off[i + 1]].tolist() == t["input_ids"]
            assert f["loss_mask"][off[i]:off[i + 1]].tolist() == t["loss_mask"]
        final = torch.from_numpy(f["hidden_states"][off[0]:off[1], 4]).to(torch.bfloat16)
    for trainer in ("speculators", "specforge", "modelopt"):
        info = json.loads((w / trainer / "layertap_export.json").read_text())
        assert info["samples"] == 5
    # one look through each trainer's loader (test_export.py compares everything)
    if os.environ.get("LAYERTAP_PY_REQUIRE_ALL") != "1":
        pytest.importorskip("speculators")
    from speculators.train.data import ArrowDataset
    from specforge.data.preprocessing import build_offline_eagle3_dataset
    from modelopt.torch.speculative.eagle.utils import OfflineSupervisedDataset

    s = ArrowDataset(max_len=512, datapath=str(w / "speculators"), on_missing="raise")[0]
    assert s["input_ids"].tolist() == tokens[0]["input_ids"]
    sf = build_offline_eagle3_dataset(str(w / "specforge"), max_len=512)
    k = [Path(p).name for p in sf.datapaths].index("data_0.ckpt")
    assert torch.equal(sf[k]["target"][0], final)
    mo = OfflineSupervisedDataset([str(w / "modelopt" / "data" / "c1.pt")], answer_only_loss=True)[0]
    assert mo["loss_mask"].tolist() == tokens[0]["loss_mask"]
    assert torch.equal(mo["base_model_hidden_states"], final)
