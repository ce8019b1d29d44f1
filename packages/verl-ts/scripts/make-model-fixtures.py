"""Golden fixtures for the tfjs Qwen2/Qwen3/Llama model: an independent PyTorch implementation (float64)
of the HF architectures, fixed random weights, logits and gradients of a scalar loss; for the Qwen3 and
Llama 3 cases also per-token log-probs and greedy generations.

Run: python3 packages/verl-ts/scripts/make-model-fixtures.py [case ...]   (default: every case)
Writes packages/verl-ts/test/fixtures/models/<name>/{config.json, model.safetensors, model-bf16.safetensors,
model-f16.safetensors, expected.json}. Where transformers is installed, each case is also run through
transformers' own model class and must agree with the plain implementation.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "models")

CASES = {
    "qwen2-tiny": dict(arch="Qwen2ForCausalLM", model_type="qwen2", vocab=48, hidden=32, layers=2, heads=4,
                       kv_heads=2, inter=48, theta=10000.0, eps=1e-6, tied=False, bias=True),
    "llama-tiny-tied": dict(arch="LlamaForCausalLM", model_type="llama", vocab=40, hidden=24, layers=1, heads=2,
                            kv_heads=1, inter=40, theta=500000.0, eps=1e-5, tied=True, bias=False),
    # Qwen3 dense: per-head q/k RMSNorm, no biases, head_dim (16) unlike hidden / heads (8); config.json
    # as transformers 5 writes it (rope_parameters).
    "qwen3-tiny": dict(arch="Qwen3ForCausalLM", model_type="qwen3", vocab=48, hidden=32, layers=2, heads=4,
                       kv_heads=2, inter=48, theta=1000000.0, eps=1e-6, tied=False, bias=False, head_dim=16,
                       qk_norm=True, rope_parameters=True, extended=True),
    "qwen3-tiny-tied": dict(arch="Qwen3ForCausalLM", model_type="qwen3", vocab=40, hidden=24, layers=1, heads=2,
                            kv_heads=1, inter=40, theta=1000000.0, eps=1e-6, tied=True, bias=False, head_dim=12,
                            qk_norm=True, rope_parameters=False, extended=True),
    # Llama 3.2: llama3 rotary scaling (with original_max_position_embeddings 64 the head's frequencies fall
    # in all three bands: kept, interpolated, divided by the factor), untied head; rope_parameters form.
    "llama3-tiny": dict(arch="LlamaForCausalLM", model_type="llama", vocab=48, hidden=32, layers=2, heads=2,
                        kv_heads=1, inter=48, theta=500000.0, eps=1e-5, tied=False, bias=False,
                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0, original_max_position_embeddings=64),
                        rope_parameters=True, extended=True),
}

IDS = [[5, 17, 3, 29, 11, 2, 8], [0, 0, 7, 7, 21, 30, 4]]
MASK = [[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1]]


def head_dim(c):
    return c.get("head_dim", c["hidden"] // c["heads"])


def param_shapes(c):
    h, d = c["hidden"], head_dim(c)
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
        if c.get("qk_norm"):
            shapes[p + "self_attn.q_norm.weight"] = (d,)
            shapes[p + "self_attn.k_norm.weight"] = (d,)
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


def inv_freq(c, D):
    inv = 1.0 / (c["theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    s = c.get("rope_scaling")
    if not s:
        return inv
    # Llama 3: long wavelengths divided by the factor, short ones kept, the band between interpolated
    old = s["original_max_position_embeddings"]
    low, high, factor = s["low_freq_factor"], s["high_freq_factor"], s["factor"]
    wavelen = 2 * math.pi / inv
    out = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, (1 - smooth) * inv / factor + smooth * inv, out)


def forward(c, P, ids, mask):
    B, L = ids.shape
    H, KV = c["heads"], c["kv_heads"]
    D = head_dim(c)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    inv = inv_freq(c, D)
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
        if c.get("qk_norm"):  # Qwen3: RMSNorm over each head of q and k, before the rotation
            q = rms_norm(q, P[p + "self_attn.q_norm.weight"], c["eps"])
            k = rms_norm(k, P[p + "self_attn.k_norm.weight"], c["eps"])
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


def hf_config(c):
    cfg = {
        "architectures": [c["arch"]], "model_type": c["model_type"], "vocab_size": c["vocab"],
        "hidden_size": c["hidden"], "intermediate_size": c["inter"], "num_hidden_layers": c["layers"],
        "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"], "hidden_act": "silu",
        "max_position_embeddings": 256 if c.get("extended") else 128, "rms_norm_eps": c["eps"],
        "tie_word_embeddings": c["tied"], "torch_dtype": "float32",
    }
    if "head_dim" in c:
        cfg["head_dim"] = c["head_dim"]
    if c.get("rope_parameters"):
        cfg["rope_parameters"] = {"rope_theta": c["theta"], "rope_type": "default", **c.get("rope_scaling", {})}
    else:
        cfg["rope_theta"] = c["theta"]
        if c.get("rope_scaling"):
            cfg["rope_scaling"] = c["rope_scaling"]
    if c["model_type"] in ("llama", "qwen3"):
        cfg["attention_bias"] = False
    if c["model_type"] == "qwen3":
        cfg["use_sliding_window"] = False
    return cfg


# Prompts of different lengths for the greedy generations (left-padded together on the TypeScript side).
PROMPTS = [[5, 17, 3], [9, 2, 30, 11, 7, 1], [26]]
NEW_TOKENS = 8


def greedy(c, P, prompt):
    """Greedy continuation by full forwards; the smallest top-1 / top-2 logit gap seen on the way."""
    ids, gap = list(prompt), float("inf")
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            t = torch.tensor([ids])
            last = forward(c, P, t, torch.ones_like(t))[0, -1]
            top = torch.topk(last, 2).values
            gap = min(gap, float(top[0] - top[1]))
            ids.append(int(last.argmax()))
    return ids[len(prompt):], gap


def check_with_transformers(d, ids, mask, logits):
    """transformers' own model class, loaded from the written directory, must give the same logits."""
    try:
        import transformers
    except ImportError:
        print("  (transformers not installed: the cross-check is skipped)")
        return
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64)
    model.eval()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    real = mask.bool()
    err = float((got - logits.detach())[real].abs().max())
    print(f"  transformers {transformers.__version__} {type(model).__name__}: max |logit diff| {err:.2e}")
    # the same float32 weights; transformers computes its rotary frequencies in float32 (about 1e-7 apart)
    assert err < 1e-5, f"transformers disagrees with the plain implementation by {err}"


def main():
    wanted = sys.argv[1:] or list(CASES)
    for name in wanted:
        c = CASES[name]
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
        cfg = hf_config(c)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        plain = {k: v.detach() for k, v in P.items()}
        write_safetensors(os.path.join(d, "model.safetensors"), plain, "F32")
        write_safetensors(os.path.join(d, "model-bf16.safetensors"), plain, "BF16")
        write_safetensors(os.path.join(d, "model-f16.safetensors"), plain, "F16")
        grad_names = [n for n in P if n.endswith(("embed_tokens.weight", "layers.0.self_attn.q_proj.weight",
                                                  "layers.0.self_attn.q_proj.bias", "mlp.down_proj.weight",
                                                  "model.norm.weight", "lm_head.weight",
                                                  "layers.0.self_attn.k_norm.weight"))]
        expected = {
            "ids": ids.tolist(), "mask": mask.tolist(),
            "logits": [[[round(float(v), 7) for v in tok] for tok in row] for row in logits.detach()],
            "loss_weights": w.tolist(), "loss": loss.item(),
            "grads": {n: [round(float(v), 8) for v in P[n].grad.flatten()] for n in grad_names},
        }
        if c.get("extended"):
            expected["logprobs"] = [[round(float(v), 8) for v in row] for row in logp.detach()]
            runs = [greedy(c, P, prompt) for prompt in PROMPTS]
            expected["prompts"] = PROMPTS
            expected["greedy"] = [ids for ids, _ in runs]
            print("  smallest top-1 / top-2 logit gap along the greedy paths:", min(g for _, g in runs))
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f)
        check_with_transformers(d, ids, mask, logits)
        print(name, "loss", loss.item(), "files in", os.path.normpath(d))


if __name__ == "__main__":
    main()
