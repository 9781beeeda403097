"""layertap.data against h5py's own reading of the shards (HDF5 converting bf16 to float32)."""

import json
import shutil

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from layertap.data import (Eagle3Dataset, HiddenStatesDataset, IncompleteOutputError, OutputError,
                           PadCollate)
from layertap.output import Output
from layertap.synthetic import write_output


def reference(out):
    """Every sample as plain h5py reads it: (hidden float32 [T,P,H], ids, mask, index)."""
    m = json.loads((out / "manifest.json").read_text())
    for s in m["shards"]:
        with h5py.File(out / s["file"], "r") as f:
            off = f["sample_offsets"][...]
            for i, idx in enumerate(f["sample_index"][...]):
                a, b = off[i], off[i + 1]
                yield (f["hidden_states"][a:b], f["input_ids"][a:b], f["loss_mask"][a:b], int(idx))


@pytest.mark.parametrize("which", ["tiny_out", "tiny_out_f32"])
def test_every_sample_equals_h5py(which, request):
    out = request.getfixturevalue(which)
    ds = HiddenStatesDataset(out)
    ref = list(reference(out))
    assert len(ds) == len(ref) == 200
    assert len(Output(out).shards) > 1 or which == "tiny_out_f32"
    want = torch.bfloat16 if which == "tiny_out" else torch.float32
    for n, (hs, ids, mask, idx) in enumerate(ref):
        item = ds[n]
        assert item["hidden_states"].dtype == want
        assert torch.equal(item["hidden_states"].float(), torch.from_numpy(hs))
        assert torch.equal(item["input_ids"], torch.from_numpy(ids.astype(np.int64)))
        assert torch.equal(item["loss_mask"], torch.from_numpy(mask.astype(np.int64)))
        assert item["sample_index"] == idx == n


def test_points_by_name_and_eagle3_view(tiny_out):
    out = Output(tiny_out)
    assert out.point_names() == ["1", "2", "3", "last", "final"]
    ds = HiddenStatesDataset(tiny_out, points=["final", "2"])
    e_final = Eagle3Dataset(tiny_out, target="final")
    e_last = Eagle3Dataset(tiny_out, aux=["1", "3", 2], target="last")
    for n, (hs, ids, _, _) in enumerate(reference(tiny_out)):
        if n % 17:
            continue
        hs = torch.from_numpy(hs).to(torch.bfloat16)
        x = ds[n]["hidden_states"]
        assert torch.equal(x[:, 0], hs[:, 4]) and torch.equal(x[:, 1], hs[:, 1])
        e = e_final[n]
        T, H = hs.shape[0], hs.shape[2]
        assert e["aux"].shape == (T, 3 * H)
        assert torch.equal(e["aux"], torch.cat([hs[:, 0], hs[:, 1], hs[:, 2]], dim=-1))
        assert torch.equal(e["target"], hs[:, 4])
        e = e_last[n]
        assert torch.equal(e["aux"], torch.cat([hs[:, 0], hs[:, 2], hs[:, 1]], dim=-1))
        assert torch.equal(e["target"], hs[:, 3])
    with pytest.raises(KeyError, match="not in"):
        HiddenStatesDataset(tiny_out, points=["0"])


def test_workers_and_collate(tiny_out):
    ds = Eagle3Dataset(tiny_out)
    loader = DataLoader(ds, batch_size=7, num_workers=2, collate_fn=PadCollate(pad_token_id=5))
    ref = list(reference(tiny_out))
    seen = 0
    for batch in loader:
        B, T = batch["input_ids"].shape
        assert batch["aux"].shape == (B, T, 3 * 72) and batch["target"].dtype == torch.bfloat16
        for j in range(B):
            hs, ids, mask, idx = ref[batch["sample_index"][j]]
            n = len(ids)
            assert batch["lengths"][j] == n
            assert batch["attention_mask"][j].sum() == n
            assert torch.equal(batch["input_ids"][j, :n], torch.from_numpy(ids.astype(np.int64)))
            assert (batch["input_ids"][j, n:] == 5).all() and (batch["loss_mask"][j, n:] == 0).all()
            assert torch.equal(batch["target"][j, :n].float(), torch.from_numpy(hs[:, 4]))
            assert (batch["target"][j, n:] == 0).all()
            seen += 1
    assert seen == 200


def test_refuses_incomplete_unless_asked(tiny_out, tmp_path):
    out = tmp_path / "stopped"
    shutil.copytree(tiny_out, out)
    m = json.loads((out / "manifest.json").read_text())
    m["complete"] = False
    m["shards"] = m["shards"][:1]
    m["totals"] = {k: m["shards"][0][k] for k in ("samples", "tokens", "bytes")}   # as the writer
    m["run"]["stopped_by"] = "SIGTERM"
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(IncompleteOutputError, match="complete\": false"):
        HiddenStatesDataset(out)
    ds = HiddenStatesDataset(out, allow_incomplete=True)
    assert len(ds) == m["shards"][0]["samples"]
    (out / "manifest.json").unlink()
    with pytest.raises(IncompleteOutputError, match="no manifest.json"):
        Eagle3Dataset(out, allow_incomplete=True)


def test_shard_mismatch_is_detected(tmp_path):
    out = write_output(tmp_path / "o", 30, 16, [2, 15, 27, 30, 31], [3, 4, 5])
    m = json.loads((out / "manifest.json").read_text())
    m["shards"][0]["samples"] = m["totals"]["samples"] = m["dataset"]["samples"] = 4
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OutputError, match=r"shard-00000.h5: /sample_index holds 3 samples, manifest says 4"):
        HiddenStatesDataset(out)[0]
    # and the totals must be the sums over the shards
    m["totals"]["samples"] = 3
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(OutputError, match=r"manifest.json: key 'totals.samples' = 3, but the shards listed sum to 4"):
        HiddenStatesDataset(out)


def test_eagle3_needs_three_intermediate_points(tmp_path):
    out = write_output(tmp_path / "o", 30, 16, [2, 15, 30, 31], [3, 4])
    with pytest.raises(ValueError, match="2 intermediate points"):
        Eagle3Dataset(out)
    assert Eagle3Dataset(out, aux=[2, 15])[1]["aux"].shape == (4, 32)


def test_repeated_aux_points_refused_as_the_exporter_does(tmp_path):
    """One rule for the reader and the exporter (output.check_aux_points): a repeated aux layer
    (eagle3 on a model whose L // 2 is 2) is refused by both, with the same words."""
    from layertap.export import ExportRefused, resolve_mapping
    out = write_output(tmp_path / "o", 4, 8, [2, 2, 1, 5], [3], vocab_size=100)
    with pytest.raises(ValueError, match=r"repeat layer 2") as reader:
        Eagle3Dataset(out, aux=[2, 2, 1])
    with pytest.raises(ExportRefused, match=r"repeat layer 2") as exporter:
        resolve_mapping(Output(out), "modelopt", aux=["1", "2", "2"], allow_custom_layers=True)
    assert "repeat layer 2" in str(reader.value) and "repeat layer 2" in str(exporter.value)
    with pytest.raises(ValueError, match="outside the decoder-layer inputs"):
        Eagle3Dataset(out, aux=[1, 2, "final"], target="final")
