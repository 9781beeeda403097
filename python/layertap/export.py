"""layertap-export: a layertap output directory to the files an EAGLE-3 trainer loads.

    layertap-export --to speculators|specforge|modelopt OUTDIR DEST

Layer numbering (``layertap-v1``: point ``k`` = the input to decoder layer ``k`` = HF
``hidden_states[k]``; ``last`` = id ``L``, before the final norm; ``final`` = after it):

| trainer | aux layers as the trainer numbers them | = layertap points | target state it assumes |
| --- | --- | --- | --- |
| speculators 0.9 | vLLM aux ids ``[2, L//2, L-3]`` (input to layer k) | ``2, L//2, L-3`` | ``last`` (it applies the verifier norm itself) |
| SpecForge 0.2 | ``[1, L//2-1, L-4]`` (output of layer k) | ``2, L//2, L-3`` | ``final`` (it applies only the LM head) |
| Model-Optimizer 0.47 | ``{1, L//2-1, L-4}`` (output of layer k, zero-based) | ``2, L//2, L-3`` | ``final``; ``last`` is written with ``hidden_states_prenorm=True`` and it re-applies the norm |

Points that differ from what the trainer will assume are refused: other aux layers need
``--allow-custom-layers`` (and the trainer told, the export prints how), a target on the other
side of the final norm needs ``--allow-norm-mismatch``.

The export streams: one sample in memory at a time, HDF5 handles one shard at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .manifest import one_line
from .output import IncompleteOutputError, Output, OutputError, Point, check_aux_points, hidden_to_torch
from .vocab import TokenStats, modelopt_d2t, specforge_mappings, speculators_mappings

__all__ = ["TRAINERS", "Mapping", "resolve_mapping", "export", "main", "ExportRefused",
           "OutputError"]

MARKER = "layertap_export.json"
SPECFORGE_GROUP = 5000   # scripts/prepare_hidden_states.py: rows_{start}-{end}/data_{idx}.ckpt


class ExportRefused(ValueError):
    """The requested points do not match what the trainer assumes (and no override flag)."""


@dataclass(frozen=True)
class Trainer:
    name: str
    version: str                 # the version whose format this writes (tested against)
    numbering: str               # "input" (= layertap) or "output" (layertap k = trainer k-1)
    target: tuple[str, ...]      # target points the trainer handles correctly
    default_target: str

    def default_aux_trainer(self, L: int) -> list[int]:
        """The trainer's own default aux layer ids, in its numbering."""
        if self.name == "speculators":          # speculators.models.utils.resolve_target_layer_ids
            return [2, L // 2, L - 3]
        if self.name == "specforge":            # scripts/prepare_hidden_states.py
            return [2 - 1, L // 2 - 1, L - 3 - 1]
        return sorted({1, max(0, L // 2 - 1), max(0, L - 4)})   # modelopt default_eagle_aux_layer_ids

    def to_trainer(self, layertap_id: int) -> int:
        return layertap_id if self.numbering == "input" else layertap_id - 1

    def to_layertap(self, trainer_id: int) -> int:
        return trainer_id if self.numbering == "input" else trainer_id + 1

    def default_aux(self, L: int) -> list[int]:
        return [self.to_layertap(k) for k in self.default_aux_trainer(L)]

    def layers_option(self, ids: list[int]) -> str:
        t = [self.to_trainer(k) for k in ids]
        if self.name == "speculators":
            return "speculators train --target-layer-ids " + " ".join(map(str, t))
        if self.name == "specforge":
            return ("the draft model config's eagle_config.eagle_aux_hidden_state_layer_ids = "
                    f"{t} (output-of-layer numbering)")
        return f"eagle_config eagle_aux_hidden_state_layer_ids: {t} (zero-based output of layer)"


TRAINERS = {
    "speculators": Trainer("speculators", "0.9.0", "input", ("last",), "last"),
    "specforge": Trainer("specforge", "0.2.0", "output", ("final",), "final"),
    "modelopt": Trainer("modelopt", "0.47.0", "output", ("final", "last"), "final"),
}


@dataclass
class Mapping:
    trainer: Trainer
    aux: list[Point]
    target: Point
    custom_layers: bool
    norm_mismatch: bool
    notes: list[str]


def _name(out: Output, p: Point) -> str:
    L = out.num_layers
    return "final" if p.id == L + 1 else "last" if p.id == L else str(p.id)


def resolve_mapping(out: Output, trainer: str, aux: list[str] | None = None,
                    target: str | None = None, allow_custom_layers: bool = False,
                    allow_norm_mismatch: bool = False) -> Mapping:
    tr = TRAINERS[trainer]
    L = out.num_layers
    default = tr.default_aux(L)
    notes = []
    aux_ids = [out.point_id(a) for a in aux] if aux else default
    try:
        check_aux_points(aux_ids, L)
    except ValueError as e:
        raise ExportRefused(str(e) + ("" if aux or len(set(aux_ids)) == len(aux_ids) else
                                      f" (the {tr.name} default for L = {L}); pass --aux with three distinct "
                                      "points and --allow-custom-layers")) from None
    if sorted(aux_ids) != aux_ids:
        raise ExportRefused(f"aux points {aux_ids}: the trainers concatenate aux layers in "
                            "ascending order; list them ascending")
    custom = aux_ids != default
    if custom:
        msg = (f"aux points {aux_ids} are not {tr.name}'s default for L = {L} "
               f"(layertap {default} = its {tr.default_aux_trainer(L)}); "
               f"tell the trainer: {tr.layers_option(aux_ids)}")
        if not allow_custom_layers:
            raise ExportRefused(msg + "; pass --allow-custom-layers to export them anyway")
        notes.append(msg)
    missing = [k for k in aux_ids if not any(p.id == k for p in out.points)]
    tgt_name = target or tr.default_target
    if tgt_name not in ("final", "last"):
        raise ExportRefused(f"--target must be 'final' or 'last', not {tgt_name!r}")
    tgt_id = out.point_id(tgt_name)
    if not any(p.id == tgt_id for p in out.points):
        missing.append(tgt_name)
    if missing:
        want = ",".join([*map(str, aux_ids), tgt_name])
        raise ExportRefused(
            f"{out.path} does not hold point(s) {', '.join(map(str, missing))} "
            f"(it holds {', '.join(out.point_names())}); capture them with "
            f"`layertap extract ... --capture {want}`")
    mismatch = tgt_name not in tr.target
    if mismatch:
        side = "before" if tgt_name == "last" else "after"
        msg = (f"target '{tgt_name}' is the state {side} the final norm, but {tr.name} "
               f"assumes '{tr.default_target}'")
        if tr.name == "speculators":
            msg += " (it applies the verifier's final norm to the target, so 'final' would be normed twice)"
        elif tr.name == "specforge":
            msg += " (it feeds the target straight to the LM head, so 'last' would skip the norm)"
        if not allow_norm_mismatch:
            raise ExportRefused(msg + "; pass --allow-norm-mismatch to export it anyway")
        notes.append(msg)
    return Mapping(tr, [out.point(k) for k in aux_ids], out.point(tgt_id), custom, mismatch, notes)


def _dataset_ids(out: Output) -> list | None:
    """The input dataset's ids by sample index, when the dataset file is still where the run
    read it and has the manifest's sample count; else None."""
    path, samples = out.dataset_path, out.dataset_samples     # type-checked by Output
    if not path or samples is None:
        return None
    p = Path(path)
    if not p.is_absolute() and not p.is_file():
        p = out.path / path
    if not p.is_file():
        return None
    ids = []
    try:
        with open(p, "r", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                if len(ids) >= samples:
                    return None
                rec = json.loads(line)
                rid = rec.get("id") if isinstance(rec, dict) else None
                ids.append(rid if isinstance(rid, (str, int)) and not isinstance(rid, bool)
                           else len(ids))
    except (OSError, ValueError, RecursionError):    # UnicodeDecodeError, JSONDecodeError, ...
        return None
    if len(ids) != samples:
        return None
    return ids


def _prepare_dest(dest: Path, overwrite: bool) -> None:
    if dest.exists():
        if not dest.is_dir():
            raise FileExistsError(f"{dest} exists and is not a directory")
        if any(dest.iterdir()):
            if not overwrite:
                raise FileExistsError(f"{dest} is not empty (pass --overwrite to replace an "
                                      "earlier export)")
            if not (dest / MARKER).exists() and not (dest / (MARKER + ".partial")).exists():
                raise FileExistsError(f"{dest} is not empty and holds no {MARKER}: not replacing "
                                      "a directory this tool did not write")
            shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / (MARKER + ".partial")).write_text("export in progress\n")


def _iter_samples(out: Output, point_index: list[int] | None, progress: str | None):
    """(ordinal, sample_index, hs [T,P',H] torch, ids np.int32, mask np.uint8) in manifest
    order, which is dataset order (the manifest and each shard's reader check it); one shard
    open at a time."""
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(out), desc=progress, unit="sample", file=sys.stderr, mininterval=2.0,
                   disable=None)
    n = 0
    try:
        for k in range(len(out.shards)):
            with out.reader(k) as r:
                for i in range(r.num_samples):
                    a, b = r.rows(i)
                    hs = None
                    if point_index is not None:
                        hs = hidden_to_torch(r.read_hidden(a, b), r.storage_dtype)
                    yield n, int(r.sample_index[i]), hs, r.read_ids(a, b), r.read_mask(a, b)
                    n += 1
                    if bar is not None:
                        bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _split(hs: torch.Tensor, m: Mapping) -> tuple[torch.Tensor, torch.Tensor]:
    T, _, H = hs.shape
    aux = hs[:, [p.index for p in m.aux], :].reshape(T, len(m.aux) * H).contiguous()
    target = hs[:, m.target.index, :].clone()
    return aux, target


def specforge_path(n: int) -> str:
    g = n // SPECFORGE_GROUP * SPECFORGE_GROUP
    return f"rows_{g}-{g + SPECFORGE_GROUP}/data_{n}.ckpt"


def export(outdir: str, dest: str, trainer: str, aux: list[str] | None = None,
           target: str | None = None, allow_custom_layers: bool = False,
           allow_norm_mismatch: bool = False, allow_incomplete: bool = False,
           draft_vocab_size: int | None = None, overwrite: bool = False,
           progress: bool = True, log=sys.stderr) -> dict:
    t0 = time.monotonic()
    out = Output(outdir, allow_incomplete=allow_incomplete)
    m = resolve_mapping(out, trainer, aux, target, allow_custom_layers, allow_norm_mismatch)
    for note in m.notes:
        print(f"layertap-export: note: {note}", file=log)
    V = out.vocab_size
    N = draft_vocab_size or min(32000, V)
    if not 0 < N <= V:
        raise ValueError(f"--draft-vocab-size {N} outside 1..{V} (the target vocabulary)")
    out.check_shards()      # every shard's datasets, shapes and filters, before DEST is touched
    destp = Path(dest)
    _prepare_dest(destp, overwrite)
    stats = TokenStats(V)
    sel = [p.index for p in m.aux] + [m.target.index]
    files: dict[str, str] = {}
    label = f"layertap-export {trainer}" if progress else None
    count = len(out)

    if trainer == "speculators":
        from datasets import Dataset, Features, Sequence, Value

        def rows():
            for n, idx, _, ids, mask in _iter_samples(out, None, None):
                yield {"input_ids": ids.astype(np.int64), "loss_mask": mask.astype(np.int64),
                       "seq_len": int(len(ids)), "sample_index": idx}

        feats = Features({"input_ids": Sequence(Value("int64")),
                          "loss_mask": Sequence(Value("int64")), "seq_len": Value("int64"),
                          "sample_index": Value("int64")})
        cache = destp.parent / f".{destp.name}.arrow-cache"
        try:
            ds = Dataset.from_generator(rows, features=feats, cache_dir=str(cache))
            ds.set_format(type="torch")
            ds.save_to_disk(str(destp))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        (destp / "hidden_states").mkdir()
        from safetensors.torch import save_file
        for n, idx, hs, ids, mask in _iter_samples(out, sel, label):
            stats.add(ids, mask)
            aux_t, tgt = _split(hs, m)
            T, H = hs.shape[0], hs.shape[2]
            layers = torch.cat([aux_t.view(T, len(m.aux), H), tgt.view(T, 1, H)], dim=1)
            save_file({"hidden_states": layers.contiguous(),
                       "token_ids": torch.from_numpy(ids.astype(np.int64))},
                      str(destp / "hidden_states" / f"hs_{n}.safetensors"))
        torch.save(stats.token_freq(), destp / "token_freq.pt")
        files["token_freq"] = "token_freq.pt"
        d2t, t2d = speculators_mappings(stats.token_freq(), N, V)
        np.save(destp / f"d2t-{N}.npy", d2t.numpy())
        np.save(destp / f"t2d-{N}.npy", t2d.numpy())
        files["d2t"], files["t2d"] = f"d2t-{N}.npy", f"t2d-{N}.npy"
        files["samples"] = "hidden_states/hs_{i}.safetensors + Arrow dataset (input_ids, loss_mask, seq_len)"

    elif trainer == "specforge":
        paths = [specforge_path(n) for n in range(count)]
        rank = np.empty(count, dtype=np.int64)
        rank[np.argsort(np.array(paths, dtype=object), kind="stable")] = np.arange(count)
        for n, idx, hs, ids, mask in _iter_samples(out, sel, label):
            stats.add(ids, mask, file_rank=int(rank[n]))
            aux_t, tgt = _split(hs, m)
            p = destp / paths[n]
            p.parent.mkdir(exist_ok=True)
            torch.save({"input_ids": torch.from_numpy(ids.astype(np.int64)),
                        "loss_mask": torch.from_numpy(mask.astype(np.int64)),
                        "hidden_state": tgt.unsqueeze(0),
                        "aux_hidden_state": aux_t.unsqueeze(0)}, p)
        d2t, t2d = specforge_mappings(stats.counter_in(stats.first_rank), N, V)
        torch.save({"d2t": d2t, "t2d": t2d}, destp / "vocab_mapping.pt")
        torch.save(stats.token_freq(), destp / "token_freq.pt")
        files.update(vocab_mapping="vocab_mapping.pt", token_freq="token_freq.pt",
                     samples=f"rows_<start>-<start+{SPECFORGE_GROUP}>/data_<i>.ckpt")

    else:  # modelopt
        ids_by_index = _dataset_ids(out)
        names = None
        if ids_by_index is not None:
            cand = [str(x) for x in ids_by_index]
            if all(re.fullmatch(r"[A-Za-z0-9._-]{1,200}", c) and c not in (".", "..") for c in cand) \
                    and len(set(cand)) == len(cand):
                names = cand
        (destp / "data").mkdir()
        for n, idx, hs, ids, mask in _iter_samples(out, sel, label):
            stats.add(ids, mask)
            aux_t, tgt = _split(hs, m)
            cid = str(ids_by_index[idx]) if ids_by_index is not None else str(idx)
            name = names[idx] if names is not None else f"{idx:08d}"
            d = {"input_ids": torch.from_numpy(ids.astype(np.int64)),
                 "hidden_states": tgt, "aux_hidden_states": aux_t,
                 "loss_mask": torch.from_numpy(mask.astype(np.int64)),
                 "conversation_id": cid}
            if m.target.id == out.num_layers:          # 'last': before the final norm
                d["hidden_states_prenorm"] = True
            torch.save(d, destp / "data" / f"{name}.pt")
        torch.save(modelopt_d2t(stats.counter_in(stats.first_seen), N), destp / "d2t.pt")
        torch.save(stats.token_freq(), destp / "token_freq.pt")
        files.update(d2t="d2t.pt", token_freq="token_freq.pt",
                     samples="data/<conversation_id>.pt")

    tr = m.trainer
    info = {
        "trainer": tr.name,
        "format_of": f"{tr.name} {tr.version}",
        "source": str(out.path.resolve()),
        "samples": count,
        "tokens": out.num_tokens,
        "loss_tokens": int(stats.counts.sum()),
        "storage_dtype": out.storage_dtype,
        "num_layers": out.num_layers,
        "hidden_size": out.hidden_size,
        "aux": [{"layertap": _name(out, p), "trainer_layer_id": tr.to_trainer(p.id),
                 "meaning": p.meaning} for p in m.aux],
        "target": {"layertap": _name(out, m.target), "meaning": m.target.meaning},
        "custom_layers": m.custom_layers,
        "norm_mismatch": m.norm_mismatch,
        "draft_vocab_size": N,
        "target_vocab_size": V,
        "files": files,
        "trainer_layers_option": tr.layers_option([p.id for p in m.aux]),
        "notes": m.notes,
        "seconds": round(time.monotonic() - t0, 3),
    }
    (destp / MARKER).write_text(json.dumps(info, indent=1) + "\n")
    (destp / (MARKER + ".partial")).unlink()
    return info


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="layertap-export",
        description="Write a layertap output directory as the per-sample files of an EAGLE-3 "
                    "trainer (speculators, SpecForge, Model-Optimizer), with its draft-vocabulary "
                    "files built from the loss-masked tokens.",
        epilog="Trainer defaults in layertap points (L = num_hidden_layers): aux 2, L//2, L-3 "
               "for all three; target last for speculators, final for SpecForge and "
               "Model-Optimizer (which also takes last, marked hidden_states_prenorm).")
    p.add_argument("--to", required=True, choices=sorted(TRAINERS))
    p.add_argument("outdir", help="layertap output directory (with manifest.json)")
    p.add_argument("dest", help="directory to write (new or empty)")
    p.add_argument("--aux", help="aux points, comma-separated, ascending (default: the trainer's "
                   "default layers)")
    p.add_argument("--target", choices=["final", "last"],
                   help="target state (default: what the trainer assumes)")
    p.add_argument("--allow-custom-layers", action="store_true",
                   help="export aux points other than the trainer's default (then tell the "
                        "trainer; the export prints how)")
    p.add_argument("--allow-norm-mismatch", action="store_true",
                   help="export a target on the other side of the final norm than the trainer "
                        "assumes")
    p.add_argument("--draft-vocab-size", type=int,
                   help="draft vocabulary size of the d2t/t2d files (default min(32000, vocab))")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="export the shards of a run whose manifest says complete: false")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export in DEST")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        info = export(args.outdir, args.dest, args.to,
                      aux=args.aux.split(",") if args.aux else None, target=args.target,
                      allow_custom_layers=args.allow_custom_layers,
                      allow_norm_mismatch=args.allow_norm_mismatch,
                      allow_incomplete=args.allow_incomplete,
                      draft_vocab_size=args.draft_vocab_size, overwrite=args.overwrite,
                      progress=not args.quiet)
    except (ExportRefused, OutputError, IncompleteOutputError, KeyError, ValueError, OSError) as e:
        # One line, no traceback: OutputError names the manifest or shard and the key or dataset;
        # OSError (FileExistsError for DEST, a full disk) names its file.
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"layertap-export: error: {one_line(msg)}", file=sys.stderr)
        return 2
    aux = ", ".join(f"{a['layertap']} (= {info['trainer']} {a['trainer_layer_id']})"
                    for a in info["aux"])
    print(f"layertap-export: {info['samples']} samples ({info['tokens']} tokens) -> {args.dest} "
          f"for {info['format_of']}: aux {aux}; target {info['target']['layertap']}; "
          f"{info['seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
