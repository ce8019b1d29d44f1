"""Reads a model directory written by `pnpm torl export` with the PyTorch reference of the model goldens
(make-model-fixtures.py: its own float64 forward pass, its own safetensors reader here) and compares its
logits with a golden's expected.json.

Run: python packages/verl-ts/scripts/check-export-torch.py EXPORT_DIR packages/verl-ts/test/fixtures/models/qwen2-tiny/expected.json
(a python with torch, see make-algorithm-variant-fixtures.py). Prints the largest |logit difference| over
real tokens and exits 1 above --tol (default 1e-4). The committed test (test/trainer/export.test.ts)
checks the same without torch: the exported weights are bit-equal to the golden's, whose logits
expected.json holds.
"""
import importlib.util
import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(__file__)
spec = importlib.util.spec_from_file_location("golden", os.path.join(HERE, "make-model-fixtures.py"))
golden = importlib.util.module_from_spec(spec)
spec.loader.exec_module(golden)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = body[a:b]
        if e["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        elif e["dtype"] == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif e["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(e["dtype"])
        out[name] = torch.tensor(arr.reshape(e["shape"]).astype(np.float64))
    return out


def read_dir(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    P = {}
    for f in files:
        P.update(read_safetensors(os.path.join(d, f)))
    return P


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--tol=")]
    tol = float(next((a[6:] for a in sys.argv[1:] if a.startswith("--tol=")), "1e-4"))
    export_dir, expected_file = args
    cfg = json.load(open(os.path.join(export_dir, "config.json")))
    c = dict(vocab=cfg["vocab_size"], hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"],
             heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
             inter=cfg["intermediate_size"], theta=cfg["rope_theta"], eps=cfg["rms_norm_eps"],
             tied=cfg.get("tie_word_embeddings", False), bias=cfg.get("attention_bias", True))
    expected = json.load(open(expected_file))
    ids, mask = torch.tensor(expected["ids"]), torch.tensor(expected["mask"])
    logits = golden.forward(c, read_dir(export_dir), ids, mask)
    want = torch.tensor(expected["logits"], dtype=torch.float64)
    diff = ((logits - want).abs() * mask[..., None]).max().item()
    print(f"max |logit - expected| = {diff:.3e} ({cfg.get('torch_dtype')})")
    sys.exit(0 if diff <= tol else 1)


main()
