"""PyTorch side of `pnpm torl bench peer`: the same Qwen2 models (HF directories: config.json and an F32
model.safetensors) and the same workloads as the torl-ts side, float32, on a fixed number of threads.

Reads one JSON spec on stdin:
  {"threads": 1, "models": [{"name", "dir", "train": {"batch", "length", "steps"},
   "decode": {"context", "steps_b1", "steps_b64"}, "check_ids": [[...], ...]}]}
Prints one JSON object on stdout: per model train/decode tokens per wall-clock second and per process
CPU second, and the last-position logits of check_ids (so the caller can confirm both sides computed the same function).
Exits 3 with a message on stderr when torch cannot be imported.
"""
import json
import math
import struct
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
except ImportError as error:  # the caller reports the torl-ts figures alone
    print(f"torch is not importable: {error}", file=sys.stderr)
    sys.exit(3)


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name} is {meta['dtype']}; the peer bench reads F32 only")
        start, end = meta["data_offsets"]
        t = torch.frombuffer(bytearray(data[start:end]), dtype=torch.float32)
        out[name] = t.reshape(meta["shape"])
    return out


class Qwen2:
    """The HF Qwen2 architecture written out in torch ops: full causal forward and KV-cache decode."""

    def __init__(self, model_dir):
        with open(f"{model_dir}/config.json") as f:
            c = json.load(f)
        self.H = c["num_attention_heads"]
        self.KV = c["num_key_value_heads"]
        self.D = c.get("head_dim") or c["hidden_size"] // self.H
        self.layers = c["num_hidden_layers"]
        self.eps = c["rms_norm_eps"]
        self.theta = c.get("rope_theta", 10000.0)
        self.tied = c.get("tie_word_embeddings", False)
        tensors = read_safetensors(f"{model_dir}/model.safetensors")
        self.P = {k: v.clone().requires_grad_(True) for k, v in tensors.items()}
        self.inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.D, 2, dtype=torch.float32) / self.D))

    def parameters(self):
        return list(self.P.values())

    def head(self):
        return self.P["model.embed_tokens.weight"] if self.tied else self.P["lm_head.weight"]

    def rope(self, positions):
        ang = positions[:, None].float() * self.inv_freq  # [L, D/2]
        emb = torch.cat([ang, ang], -1)
        return emb.cos(), emb.sin()

    @staticmethod
    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def proj(self, p, name, x):
        y = x @ self.P[f"{p}self_attn.{name}.weight"].T
        bias = self.P.get(f"{p}self_attn.{name}.bias")
        return y if bias is None else y + bias

    def block(self, i, x, cos, sin, attend):
        p = f"model.layers.{i}."
        B, L, _ = x.shape
        h = self.norm(x, self.P[p + "input_layernorm.weight"])
        q = self.proj(p, "q_proj", h).view(B, L, self.H, self.D).transpose(1, 2)
        k = self.proj(p, "k_proj", h).view(B, L, self.KV, self.D).transpose(1, 2)
        v = self.proj(p, "v_proj", h).view(B, L, self.KV, self.D).transpose(1, 2)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        a = attend(i, q, k, v)
        x = x + a.transpose(1, 2).reshape(B, L, self.H * self.D) @ self.P[p + "self_attn.o_proj.weight"].T
        h = self.norm(x, self.P[p + "post_attention_layernorm.weight"])
        g = h @ self.P[p + "mlp.gate_proj.weight"].T
        u = h @ self.P[p + "mlp.up_proj.weight"].T
        return x + (F.silu(g) * u) @ self.P[p + "mlp.down_proj.weight"].T

    def forward(self, ids, checkpointed=False):
        B, L = ids.shape
        cos, sin = self.rope(torch.arange(L))
        x = self.P["model.embed_tokens.weight"][ids]

        def attend(_i, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        for i in range(self.layers):
            if checkpointed:  # each layer recomputed in the backward (the scale peer's update)
                x = checkpoint(lambda x, i=i: self.block(i, x, cos, sin, attend), x, use_reentrant=False)
            else:
                x = self.block(i, x, cos, sin, attend)
        return self.norm(x, self.P["model.norm.weight"]) @ self.head().T

    def cached(self, ks, vs, tokens, start):
        """tokens [B, L] at positions start.. through the per-layer KV caches ks, vs (written in place);
        the last position's logits [B, 1, V]."""
        L = tokens.shape[1]
        cos, sin = self.rope(torch.arange(start, start + L))
        x = self.P["model.embed_tokens.weight"][tokens]

        def attend(i, q, k, v):
            ks[i][:, :, start : start + L] = k
            vs[i][:, :, start : start + L] = v
            kk, vv = ks[i][:, :, : start + L], vs[i][:, :, : start + L]
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=L > 1, enable_gqa=True)

        for i in range(self.layers):
            x = self.block(i, x, cos, sin, attend)
        return self.norm(x[:, -1:], self.P["model.norm.weight"]) @ self.head().T

    def generate_steps(self, ids, steps):
        """Prefill ids [B, ctx], then `steps` decode steps of one token each; returns decode seconds."""
        B, ctx = ids.shape
        cap = ctx + steps + 1
        ks = [torch.zeros(B, self.KV, cap, self.D) for _ in range(self.layers)]
        vs = [torch.zeros(B, self.KV, cap, self.D) for _ in range(self.layers)]

        def run(tokens, start):
            return self.cached(ks, vs, tokens, start)

        with torch.no_grad():
            run(ids, 0)
            tok = torch.ones(B, 1, dtype=torch.long)
            run(tok, ctx)  # warm-up step, like the torl-ts side
            t0, c0 = time.perf_counter(), time.process_time()
            for s in range(steps):
                run(tok, ctx + 1 + s)
            return time.perf_counter() - t0, time.process_time() - c0


def random_ids(B, L, V, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, L), generator=g)


def bench_model(spec):
    model = Qwen2(spec["dir"])
    V = model.P["model.embed_tokens.weight"].shape[0]
    with torch.no_grad():
        check = torch.tensor(spec["check_ids"])
        check_logits = model.forward(check)[:, -1].reshape(-1).tolist()

    tr = spec["train"]
    B, L = tr["batch"], tr["length"]
    ids = random_ids(B, L, V, 3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        logp = torch.log_softmax(model.forward(ids)[:, :-1], -1)
        loss = -logp.gather(-1, ids[:, 1:, None]).mean()
        loss.backward()
        opt.step()

    step()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(tr["steps"]):
        step()
    train_s, train_cpu = time.perf_counter() - t0, time.process_time() - c0

    dc = spec["decode"]
    prompt1 = random_ids(1, dc["context"], V, 7)
    b1_s, b1_cpu = model.generate_steps(prompt1, dc["steps_b1"])
    prompt64 = random_ids(64, dc["context"], V, 7)
    b64_s, b64_cpu = model.generate_steps(prompt64, dc["steps_b64"])
    return {
        "train_tokens_per_s": B * L * tr["steps"] / train_s,
        "train_tokens_per_cpu_s": B * L * tr["steps"] / train_cpu,
        "decode_b1_tokens_per_s": dc["steps_b1"] / b1_s,
        "decode_b1_tokens_per_cpu_s": dc["steps_b1"] / b1_cpu,
        "decode_b64_tokens_per_s": 64 * dc["steps_b64"] / b64_s,
        "decode_b64_tokens_per_cpu_s": 64 * dc["steps_b64"] / b64_cpu,
        "check_logits": check_logits,
    }


def main():
    spec = json.load(sys.stdin)
    threads = int(spec["threads"])
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    out = {"torch_version": torch.__version__, "threads": torch.get_num_threads(), "models": {}}
    for m in spec["models"]:
        out["models"][m["name"]] = bench_model(m)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
