"""Golden fixtures for the tfjs Qwen2/Llama model: an independent PyTorch implementation (float64) of the
HF architecture, fixed random weights, logits and gradients of a scalar loss.

Run: /opt/torchenv/bin/python packages/verl-ts/scripts/make-model-fixtures.py
Writes packages/verl-ts/test/fixtures/models/<name>/{config.json, model.safetensors, model-bf16.safetensors,
model-f16.safetensors, expected.json}.
"""
import json
import math
import os
import struct

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "models")

CASES = {
    "qwen2-tiny": dict(arch="Qwen2ForCausalLM", model_type="qwen2", vocab=48, hidden=32, layers=2, heads=4,
                       kv_heads=2, inter=48, theta=10000.0, eps=1e-6, tied=False, bias=True),
    "llama-tiny-tied": dict(arch="LlamaForCausalLM", model_type="llama", vocab=40, hidden=24, layers=1, heads=2,
                            kv_heads=1, inter=40, theta=500000.0, eps=1e-5, tied=True, bias=False),
}

IDS = [[5, 17, 3, 29, 11, 2, 8], [0, 0, 7, 7, 21, 30, 4]]
MASK = [[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1]]


def param_shapes(c):
    h, d = c["hidden"], c["hidden"] // c["heads"]
    q, kv = c["heads"] * d, c["kv_heads"] * d
    shapes = {"model.embed_tokens.weight": (c["vocab"], h)}
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (q, h)
        shapes[p + "self_attn.k_proj.weight"] = (kv, h)
        shapes[p + "self_attn.v_proj.weight"] = (kv, h)
        if c["bias"]:
            shapes[p + "self_attn.q_proj.bias"] = (q,)
            shapes[p + "self_attn.k_proj.bias"] = (kv,)
            shapes[p + "self_attn.v_proj.bias"] = (kv,)
        shapes[p + "self_attn.o_proj.weight"] = (h, q)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (c["inter"], h)
        shapes[p + "mlp.up_proj.weight"] = (c["inter"], h)
        shapes[p + "mlp.down_proj.weight"] = (h, c["inter"])
    shapes["model.norm.weight"] = (h,)
    if not c["tied"]:
        shapes["lm_head.weight"] = (c["vocab"], h)
    return shapes


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def forward(c, P, ids, mask):
    B, L = ids.shape
    H, KV = c["heads"], c["kv_heads"]
    D = c["hidden"] // H
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    inv = 1.0 / (c["theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = pos[..., None].double() * inv  # [B, L, D/2]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # [B, 1, L, D]
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
    allowed = causal[None] & mask.bool()[:, None, :]  # [B, L, L]
    x = P["model.embed_tokens.weight"][ids]
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        hn = rms_norm(x, P[p + "input_layernorm.weight"], c["eps"])

        def proj(name, n):
            y = hn @ P[p + f"self_attn.{name}.weight"].T
            if c["bias"]:
                y = y + P[p + f"self_attn.{name}.bias"]
            return y.view(B, L, n, D).transpose(1, 2)

        q, k, v = proj("q_proj", H), proj("k_proj", KV), proj("v_proj", KV)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        s = s.masked_fill(~allowed[:, None], float("-inf"))
        # fully masked rows (queries at padding) get uniform weights, like a large finite negative mask
        s = torch.where(torch.isinf(s).all(-1, keepdim=True), torch.zeros_like(s), s)
        a = torch.softmax(s, -1) @ v
        x = x + a.transpose(1, 2).reshape(B, L, H * D) @ P[p + "self_attn.o_proj.weight"].T
        hn = rms_norm(x, P[p + "post_attention_layernorm.weight"], c["eps"])
        g = hn @ P[p + "mlp.gate_proj.weight"].T
        u = hn @ P[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ P[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, P["model.norm.weight"], c["eps"])
    head = P["model.embed_tokens.weight"] if c["tied"] else P["lm_head.weight"]
    return x @ head.T


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        if dtype == "F32":
            raw = t.to(torch.float32).numpy().astype("<f4").tobytes()
        elif dtype == "BF16":
            raw = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raw = t.to(torch.float16).numpy().astype("<f2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    for name, c in CASES.items():
        rng = np.random.default_rng(1234)
        P = {}
        for pname, shape in param_shapes(c).items():
            if pname.endswith("norm.weight"):
                arr = 1.0 + 0.1 * rng.standard_normal(shape)
            elif pname.endswith("bias"):
                arr = 0.1 * rng.standard_normal(shape)
            else:
                arr = 0.2 * rng.standard_normal(shape)
            # weights are exactly float32 so both sides start from the same numbers
            P[pname] = torch.tensor(arr.astype(np.float32), dtype=torch.float64, requires_grad=True)
        ids = torch.tensor(IDS) % c["vocab"]
        mask = torch.tensor(MASK)
        logits = forward(c, P, ids, mask)
        # scalar loss: weighted sum of next-token log-probs over real tokens
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
        w = torch.tensor(rng.standard_normal(logp.shape))
        valid = (mask[:, 1:] * mask[:, :-1]).double()
        loss = (logp * w * valid).sum()
        loss.backward()
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        cfg = {
            "architectures": [c["arch"]], "model_type": c["model_type"], "vocab_size": c["vocab"],
            "hidden_size": c["hidden"], "intermediate_size": c["inter"], "num_hidden_layers": c["layers"],
            "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"], "hidden_act": "silu",
            "max_position_embeddings": 128, "rope_theta": c["theta"], "rms_norm_eps": c["eps"],
            "tie_word_embeddings": c["tied"], "torch_dtype": "float32",
        }
        if c["model_type"] == "llama":
            cfg["attention_bias"] = False
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        plain = {k: v.detach() for k, v in P.items()}
        write_safetensors(os.path.join(d, "model.safetensors"), plain, "F32")
        write_safetensors(os.path.join(d, "model-bf16.safetensors"), plain, "BF16")
        write_safetensors(os.path.join(d, "model-f16.safetensors"), plain, "F16")
        grad_names = [n for n in P if n.endswith(("embed_tokens.weight", "layers.0.self_attn.q_proj.weight",
                                                  "layers.0.self_attn.q_proj.bias", "mlp.down_proj.weight",
                                                  "model.norm.weight", "lm_head.weight"))]
        expected = {
            "ids": ids.tolist(), "mask": mask.tolist(),
            "logits": [[[round(float(v), 7) for v in tok] for tok in row] for row in logits.detach()],
            "loss_weights": w.tolist(), "loss": loss.item(),
            "grads": {n: [round(float(v), 8) for v in P[n].grad.flatten()] for n in grad_names},
        }
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f)
        print(name, "loss", loss.item(), "files in", os.path.normpath(d))


if __name__ == "__main__":
    main()
