"""A minimal safetensors reader for the e2e tests (fixture weights and references: F32 and I32)."""
import json
from pathlib import Path

import numpy as np


def read_safetensors(path):
    """Minimal safetensors reader (the reference files hold float32 and int32 tensors)."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "I32": np.int32}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(t["shape"])
    return out
