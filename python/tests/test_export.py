"""layertap-export, loaded back through each trainer's own dataset class (installed from PyPI,
versions pinned in tools/python_env.sh), compared exactly with the states, token ids and masks
that layertap stored (read here with plain h5py)."""

import json
import re
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from layertap.export import ExportRefused, TRAINERS, export, main, resolve_mapping
from layertap.output import Output
from layertap.synthetic import write_output

AUX = ["1", "2", "3"]          # the tiny model has L = 4: the trainers' defaults repeat layers
POINTS = {"1": 0, "2": 1, "3": 2, "last": 3, "final": 4}


def stored(out):
    """sample ordinal -> (hidden bf16 [T,P,H], ids int64, mask int64, sample_index)."""
    m = json.loads((Path(out) / "manifest.json").read_text())
    res = []
    for s in m["shards"]:
        with h5py.File(Path(out) / s["file"], "r") as f:
            off = f["sample_offsets"][...]
            for i, idx in enumerate(f["sample_index"][...]):
                a, b = off[i], off[i + 1]
                res.append((torch.from_numpy(f["hidden_states"][a:b]).to(torch.bfloat16),
                            torch.from_numpy(f["input_ids"][a:b].astype(np.int64)),
                            torch.from_numpy(f["loss_mask"][a:b].astype(np.int64)), int(idx)))
    return res


def aux_of(hs):
    return torch.cat([hs[:, POINTS[a]] for a in AUX], dim=-1)


def masked_counts(ref):
    c = Counter()
    for _, ids, mask, _ in ref:
        c.update(ids[mask.bool()].tolist())
    return c


# ---- speculators ---------------------------------------------------------------------------
def test_speculators(tiny_out, tmp_path):
    pytest.importorskip("speculators")
    from speculators.train.data import ArrowDataset, CollateFn
    from speculators.train.vocab_mapping import (build_vocab_mappings_from_distribution,
                                                 save_token_frequency_distribution)

    assert version("speculators") == "0.9.0"
    dest = tmp_path / "spec"
    info = export(str(tiny_out), str(dest), "speculators", aux=AUX, allow_custom_layers=True,
                  draft_vocab_size=64, progress=False)
    assert info["target"]["layertap"] == "last"
    ref = stored(tiny_out)
    ds = ArrowDataset(max_len=4096, datapath=str(dest), on_missing="raise")
    assert len(ds) == len(ref) == 200
    H = 72
    for n, (hs, ids, mask, idx) in enumerate(ref):
        item = ds[n]
        assert torch.equal(item["input_ids"], ids)
        assert torch.equal(item["loss_mask"], mask)
        assert item["hidden_states"].dtype == torch.bfloat16
        assert torch.equal(item["hidden_states"], aux_of(hs))               # [T, 3H]
        assert torch.equal(item["verifier_last_hidden_states"], hs[:, POINTS["last"]])
        assert torch.equal(item["lengths"], torch.tensor([len(ids)]))
    batch = CollateFn(max_len=512, hidden_size=H)([ds[0], ds[1], ds[2]])
    n0 = len(ref[0][1])
    assert batch["hidden_states"].shape == (1, 512, 3 * H)
    assert torch.equal(batch["hidden_states"][0, :n0], aux_of(ref[0][0]))
    # vocabulary: token_freq.pt equals speculators' own count over the Arrow dataset, and the
    # cached d2t/t2d equal its own mapping from that distribution
    freq = torch.load(dest / "token_freq.pt", weights_only=True)
    theirs = tmp_path / "their_freq.pt"
    save_token_frequency_distribution(ds.data, theirs)
    assert freq == torch.load(theirs, weights_only=True) == dict(masked_counts(ref))
    d2t, t2d = build_vocab_mappings_from_distribution(freq, 64, 160)
    assert np.array_equal(np.load(dest / "d2t-64.npy"), d2t.numpy())
    assert np.array_equal(np.load(dest / "t2d-64.npy"), t2d.numpy())


# ---- SpecForge -----------------------------------------------------------------------------
def test_specforge(tiny_out, tmp_path):
    pytest.importorskip("specforge")
    from specforge.data.preprocessing import (build_offline_eagle3_dataset,
                                              process_token_dict_to_mappings)
    from specforge.runtime.data_plane.feature_store import load_feature_file
    from specforge.algorithms.eagle3.data import normalize_offline_sample
    from specforge.training.vocab_mapping import count_effective_feature_tokens

    assert version("specforge") == "0.2.0"
    dest = tmp_path / "sf"
    info = export(str(tiny_out), str(dest), "specforge", aux=AUX, allow_custom_layers=True,
                  draft_vocab_size=64, progress=False)
    assert [a["trainer_layer_id"] for a in info["aux"]] == [0, 1, 2]
    ref = stored(tiny_out)
    ds = build_offline_eagle3_dataset(str(dest), max_len=4096)
    assert len(ds) == 200
    for k in range(len(ds)):
        n = int(re.search(r"data_(\d+)\.ckpt$", ds.datapaths[k]).group(1))
        hs, ids, mask, _ = ref[n]
        item = ds[k]
        assert torch.equal(item["input_ids"], ids[None])
        assert torch.equal(item["hidden_state"], aux_of(hs)[None])        # aux, [1, T, 3H]
        assert torch.equal(item["target"], hs[None, :, POINTS["final"]])
        # SpecForge zeroes the mask of the last position itself (no next token to predict)
        want = mask.clone()
        want[-1] = 0
        assert torch.equal(item["loss_mask"], want[None])
        raw = load_feature_file(ds.datapaths[k])
        assert raw["input_ids"].dtype == torch.int64 and raw["loss_mask"].dtype == torch.int64
        assert torch.equal(raw["loss_mask"], mask)
        if k < 3:
            norm = normalize_offline_sample(raw, max_len=4096)
            assert torch.equal(norm["target"], hs[None, :, POINTS["final"]])
    # vocab_mapping.pt equals SpecForge's own mapping from the exported features
    counts = count_effective_feature_tokens(str(dest))
    assert counts == masked_counts(ref)
    d2t, t2d = process_token_dict_to_mappings(counts, 64, 160)
    vm = torch.load(dest / "vocab_mapping.pt", weights_only=True)
    assert torch.equal(vm["d2t"], d2t) and torch.equal(vm["t2d"], t2d)


# ---- Model-Optimizer -----------------------------------------------------------------------
@pytest.mark.parametrize("target", ["final", "last"])
def test_modelopt(tiny_out, tmp_path, target):
    pytest.importorskip("modelopt")
    from modelopt.torch.speculative.eagle.utils import EagleOfflineDataCollator, OfflineSupervisedDataset
    from modelopt.torch.speculative.plugins.hf_eagle import HFEagleModel

    assert version("nvidia-modelopt") == "0.47.0"
    dest = tmp_path / "mo"
    export(str(tiny_out), str(dest), "modelopt", aux=AUX, target=target,
           allow_custom_layers=True, draft_vocab_size=64, progress=False)
    ref = stored(tiny_out)
    demo_ids = [json.loads(l)["id"] for l in
                (Path(__file__).resolve().parents[2] / "tests/fixtures/data/demo.jsonl").read_text().splitlines()
                if l.strip()]
    files = sorted(str(p) for p in (dest / "data").glob("*.pt"))
    assert len(files) == 200
    assert [Path(f).stem for f in files] == sorted(demo_ids)
    ds = OfflineSupervisedDataset(files, answer_only_loss=True)
    by_id = {i: n for n, i in enumerate(demo_ids)}
    for k in range(len(ds)):
        hs, ids, mask, idx = ref[by_id[Path(files[k]).stem]]
        item = ds[k]
        assert torch.equal(item["input_ids"], ids)
        assert torch.equal(item["loss_mask"], mask)
        assert torch.equal(item["aux_hidden_states"], aux_of(hs))
        assert torch.equal(item["base_model_hidden_states"], hs[:, POINTS[target]])
        assert item["base_hidden_prenorm"] is (target == "last")
        assert torch.equal(item["labels"][:-1], ids[1:])
    batch = EagleOfflineDataCollator(train_len=256)([ds[0], ds[1]])
    assert batch["base_model_outputs"]["aux_hidden_states"].shape == (2, 256, 3 * 72)
    assert batch["base_model_outputs"]["base_hidden_prenorm"] is (target == "last")
    # d2t.pt: loaded by modelopt's own loader into a draft with a 64-token vocabulary
    from types import SimpleNamespace
    model = SimpleNamespace(eagle_config=SimpleNamespace(draft_vocab_size=64, vocab_size=160),
                            eagle_module=SimpleNamespace(d2t=torch.zeros(64, dtype=torch.int64)))
    HFEagleModel.load_draft_vocab_cache(model, str(dest / "d2t.pt"))
    counter = Counter()
    for _, ids, mask, _ in ref:
        counter.update(ids[mask.bool()].tolist())
    top = [t for t, _ in counter.most_common(64)]
    assert torch.equal(model.eagle_module.d2t, torch.tensor(top) - torch.arange(64))


# ---- the mapping and its refusals ----------------------------------------------------------
@pytest.fixture(scope="module")
def out30(tmp_path_factory):
    """A 30-layer output (SmolLM2's depth) holding every point anyone asks for."""
    d = tmp_path_factory.mktemp("o30") / "out"
    return Output(write_output(d, 30, 8, [1, 2, 3, 15, 27, 30, 31], [4, 5], vocab_size=100))


@pytest.mark.parametrize("trainer, theirs, target", [
    ("speculators", [2, 15, 27], "last"),
    ("specforge", [1, 14, 26], "final"),
    ("modelopt", [1, 14, 26], "final"),
])
def test_default_mapping_for_30_layers(out30, trainer, theirs, target):
    m = resolve_mapping(out30, trainer)
    assert [p.id for p in m.aux] == [2, 15, 27]
    assert [TRAINERS[trainer].to_trainer(p.id) for p in m.aux] == theirs
    assert TRAINERS[trainer].default_aux_trainer(30) == theirs
    assert m.target.id == (30 if target == "last" else 31)
    assert not m.custom_layers and not m.norm_mismatch


def test_refusals(out30, tmp_path):
    with pytest.raises(ExportRefused, match="normed twice.*--allow-norm-mismatch"):
        resolve_mapping(out30, "speculators", target="final")
    with pytest.raises(ExportRefused, match="skip the norm.*--allow-norm-mismatch"):
        resolve_mapping(out30, "specforge", target="last")
    assert resolve_mapping(out30, "specforge", target="last", allow_norm_mismatch=True).norm_mismatch
    assert not resolve_mapping(out30, "modelopt", target="last").norm_mismatch
    with pytest.raises(ExportRefused, match="--target-layer-ids 1 2 3.*--allow-custom-layers"):
        resolve_mapping(out30, "speculators", aux=["1", "2", "3"])
    with pytest.raises(ExportRefused, match=r"\[0, 1, 2\]"):
        resolve_mapping(out30, "specforge", aux=["1", "2", "3"])
    with pytest.raises(ExportRefused, match="ascending"):
        resolve_mapping(out30, "modelopt", aux=["3", "2", "1"], allow_custom_layers=True)
    with pytest.raises(ExportRefused, match="decoder-layer inputs"):
        resolve_mapping(out30, "modelopt", aux=["2", "15", "last"], allow_custom_layers=True)
    o = Output(write_output(tmp_path / "o", 30, 8, [2, 15, 27, 31], [3], vocab_size=100))
    with pytest.raises(ExportRefused, match="does not hold point.*last.*--capture 2,15,27,last"):
        resolve_mapping(o, "speculators")


def test_cli_refuses_and_guards_dest(tiny_out, tmp_path, capsys):
    dest = tmp_path / "d"
    assert main(["--to", "speculators", str(tiny_out), str(dest)]) == 2
    assert "repeat layer" in capsys.readouterr().err
    dest.mkdir()
    (dest / "mine.txt").write_text("x")
    assert main(["--to", "modelopt", str(tiny_out), str(dest), "--quiet"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["--to", "modelopt", str(tiny_out), str(dest), "--quiet", "--overwrite"]) == 2
    assert "did not write" in capsys.readouterr().err
    d2 = tmp_path / "d2"
    args = ["--to", "specforge", str(tiny_out), str(d2), "--aux", "1,2,3",
            "--allow-custom-layers", "--quiet", "--draft-vocab-size", "32"]
    assert main(args) == 0
    assert main(args + ["--overwrite"]) == 0
    info = json.loads((d2 / "layertap_export.json").read_text())
    assert info["samples"] == 200 and info["draft_vocab_size"] == 32


def test_incomplete_output_needs_the_flag(tiny_out, tmp_path, capsys):
    import shutil
    out = tmp_path / "stopped"
    shutil.copytree(tiny_out, out)
    m = json.loads((out / "manifest.json").read_text())
    m["complete"], m["shards"] = False, m["shards"][:2]
    m["totals"] = {k: sum(s[k] for s in m["shards"]) for k in ("samples", "tokens", "bytes")}
    (out / "manifest.json").write_text(json.dumps(m))
    args = ["--to", "modelopt", str(out), str(tmp_path / "d"), "--aux", "1,2,3",
            "--allow-custom-layers", "--quiet"]
    assert main(args) == 2
    assert "complete\": false" in capsys.readouterr().err
    assert main(args + ["--allow-incomplete"]) == 0
    n = sum(s["samples"] for s in m["shards"])
    assert len(list((tmp_path / "d" / "data").glob("*.pt"))) == n
