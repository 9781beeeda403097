"""Draft-vocabulary files from the loss-masked tokens, built the way each trainer builds them.

All three count the tokens where the loss mask is 1; they differ in how they rank and store:

- speculators (``speculators.train.vocab_mapping``): ``token_freq.pt`` = ``{token_id: count}``;
  ``d2t``/``t2d`` from the top ``N`` by ``(-count, token_id)``, padded with the lowest unused ids,
  sorted; ``d2t[i] = target_id - i`` (int64), ``t2d`` bool over the target vocabulary; cached as
  ``d2t-N.npy`` / ``t2d-N.npy``.
- SpecForge (``specforge.data.preprocessing.process_token_dict_to_mappings``): a ``Counter`` filled
  file by file in sorted path order (ids ascending within a file), zero-count ids ``0..N-1`` added
  when fewer than ``N`` tokens occur, ``most_common(N)`` (ties by insertion order), sorted;
  ``vocab_mapping.pt`` = ``{"d2t": int64, "t2d": bool}``.
- Model-Optimizer (``modelopt.torch.speculative.utils.calibrate_frequent_vocab``): ``Counter``
  in token order, ``most_common(N)``, not sorted; ``d2t.pt`` = int64 tensor
  ``d2t[i] = token_i - i``. (modelopt asserts when fewer than N distinct tokens occur; here the
  lowest unused ids fill the rest, in ascending order.)
"""

from __future__ import annotations

from collections import Counter

import numpy as np

__all__ = ["TokenStats", "speculators_mappings", "specforge_mappings", "modelopt_d2t"]


class TokenStats:
    """Loss-masked token counts plus the first-appearance order each trainer's Counter sees."""

    def __init__(self, vocab_size: int):
        self.vocab_size = int(vocab_size)
        self.counts = np.zeros(self.vocab_size, dtype=np.int64)
        big = np.iinfo(np.int64).max
        self.first_seen = np.full(self.vocab_size, big, dtype=np.int64)   # global token position
        self.first_rank = np.full(self.vocab_size, big, dtype=np.int64)   # SpecForge file rank
        self._position = 0

    def add(self, input_ids: np.ndarray, loss_mask: np.ndarray, file_rank: int | None = None):
        ids = np.asarray(input_ids, dtype=np.int64)
        sel = ids[np.asarray(loss_mask) != 0]
        if sel.size:
            if sel.min() < 0 or sel.max() >= self.vocab_size:
                raise ValueError(f"token id outside [0, {self.vocab_size})")
            uniq, first, cnt = np.unique(sel, return_index=True, return_counts=True)
            self.counts[uniq] += cnt
            np.minimum.at(self.first_seen, uniq, self._position + first)
            if file_rank is not None:
                np.minimum.at(self.first_rank, uniq, file_rank)
        self._position += int(sel.size)

    def token_freq(self) -> dict[int, int]:
        nz = np.nonzero(self.counts)[0]
        return {int(t): int(self.counts[t]) for t in nz}

    def counter_in(self, order: np.ndarray) -> Counter:
        """A Counter holding the seen tokens, inserted by ``order`` (then by id)."""
        nz = np.nonzero(self.counts)[0]
        nz = nz[np.lexsort((nz, order[nz]))]
        c: Counter = Counter()
        for t in nz:
            c[int(t)] = int(self.counts[t])
        return c


def speculators_mappings(freq: dict[int, int], draft_vocab_size: int, target_vocab_size: int):
    """(d2t int64 [N], t2d bool [V]) as speculators.train.vocab_mapping builds them."""
    import torch

    ranked = sorted(freq, key=lambda t: (-freq[t], t))
    selected = ranked[: min(draft_vocab_size, len(ranked))]
    if len(selected) < draft_vocab_size:
        have = set(selected)
        for t in range(draft_vocab_size):
            if t not in have:
                selected.append(t)
            if len(selected) >= draft_vocab_size:
                break
    selected.sort()
    d2t = torch.tensor(selected, dtype=torch.long) - torch.arange(draft_vocab_size, dtype=torch.long)
    t2d = torch.zeros(target_vocab_size, dtype=torch.bool)
    t2d[selected] = True
    return d2t, t2d


def specforge_mappings(token_dict: Counter, draft_vocab_size: int, target_vocab_size: int):
    """(d2t, t2d) with the semantics of SpecForge's process_token_dict_to_mappings (its
    insertion-order tie-breaking included); ``token_dict`` is modified as SpecForge does."""
    import torch

    if len(token_dict) < draft_vocab_size:
        missing = set(range(draft_vocab_size)) - set(token_dict.keys())
        for t in missing:
            token_dict[t] = 0
            if len(token_dict) >= draft_vocab_size:
                break
    used = sorted(k for k, _ in token_dict.most_common(draft_vocab_size))
    d2t = torch.tensor([used[i] - i for i in range(len(used))])
    used_set = set(used)
    t2d = torch.tensor([i in used_set for i in range(target_vocab_size)])
    return d2t, t2d


def modelopt_d2t(token_counter: Counter, draft_vocab_size: int):
    """d2t (int64 [N], most-common order) as modelopt's calibrate_frequent_vocab builds it."""
    import torch

    vocab = [t for t, _ in token_counter.most_common(draft_vocab_size)]
    if len(vocab) < draft_vocab_size:
        have = set(vocab)
        t = 0
        while len(vocab) < draft_vocab_size:
            if t not in have:
                vocab.append(t)
            t += 1
    mapping = torch.zeros(draft_vocab_size, dtype=torch.int64)
    for i in range(draft_vocab_size):
        mapping[i] = vocab[i] - i
    return mapping
