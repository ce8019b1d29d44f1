"""PyTorch side of `pnpm torl bench scale`: one FSDP rank's work of the probe's GRPO step, in plain torch
ops on a fixed number of threads, for a Qwen2-architecture model of the probe's shapes (seeded random
weights: the timings do not depend on their values).

Reads one JSON spec on stdin:
  {"threads": 1, "dtype": "float32" | "bfloat16", "config": {HF config.json keys},
   "rows": 2, "prompt_length": 32, "new_tokens": 16, "ranks": 2, "steps": 1}
Runs, timing each: generate (prefill of rows x prompt_length, then new_tokens decode steps with a KV
cache, sampling), old_log_prob and ref_log_prob (one row per micro-batch, no gradient), update_actor
(per row: forward and backward with each decoder layer checkpointed, then AdamW over the parameters a
rank of `ranks` owns: the first 1/ranks of them by element count), `steps` times in a row (default 1;
the optimizer and its state carry over). Prints one JSON object on stdout: the last step's seconds per
phase (update_actor also split into update_forward_backward and update_adamw), every step's under
step_seconds, and the peak resident set. Exits 3 with a message on stderr when torch cannot be imported.

With "whole_model": true the same step is the whole model's in one process, the footprint that FSDP over
`ranks` ranks divides: AdamW over every parameter, and the reference log-probs from a frozen copy of the
weights in bfloat16 (as the probe keeps its reference), not from the trained model. Its peak resident
set is the figure; its seconds are not compared with anything.
"""
import json
import resource
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as error:  # the caller reports the torl-ts figures alone
    print(f"torch is not importable: {error}", file=sys.stderr)
    sys.exit(3)

from bench_peer import Qwen2  # this script's directory is on sys.path


class Model(Qwen2):
    """bench_peer.py's Qwen2 (its layer, projections and head) with seeded random weights in a given dtype,
    a forward with each layer checkpointed, log-probs, and sampling generation with a KV cache."""

    def __init__(self, c, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        self.H = c["num_attention_heads"]
        self.KV = c["num_key_value_heads"]
        self.D = c.get("head_dim") or c["hidden_size"] // self.H
        self.layers = c["num_hidden_layers"]
        self.eps = c["rms_norm_eps"]
        self.tied = c.get("tie_word_embeddings", False)
        h, inter, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        bias = c.get("attention_bias", True)

        def normal(*shape):
            return (torch.randn(*shape, generator=g) * 0.02).to(dtype).requires_grad_(True)

        def ones(n):
            return torch.ones(n, dtype=dtype).requires_grad_(True)

        P = {"model.embed_tokens.weight": normal(V, h), "model.norm.weight": ones(h)}
        if not self.tied:
            P["lm_head.weight"] = normal(V, h)
        for i in range(self.layers):
            p = f"model.layers.{i}."
            P[p + "input_layernorm.weight"] = ones(h)
            P[p + "post_attention_layernorm.weight"] = ones(h)
            for name, out in (("q_proj", self.H * self.D), ("k_proj", self.KV * self.D), ("v_proj", self.KV * self.D)):
                P[f"{p}self_attn.{name}.weight"] = normal(out, h)
                if bias:
                    P[f"{p}self_attn.{name}.bias"] = torch.zeros(out, dtype=dtype).requires_grad_(True)
            P[p + "self_attn.o_proj.weight"] = normal(h, self.H * self.D)
            P[p + "mlp.gate_proj.weight"] = normal(inter, h)
            P[p + "mlp.up_proj.weight"] = normal(inter, h)
            P[p + "mlp.down_proj.weight"] = normal(h, inter)
        self.P = P
        theta = c.get("rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.D, 2, dtype=torch.float32) / self.D))
        self.dtype = dtype

    def rope(self, positions):
        cos, sin = super().rope(positions)
        return cos.to(self.dtype), sin.to(self.dtype)

    def norm(self, x, w):
        # the mean of squares in float32, as transformers' Qwen2RMSNorm does for bfloat16
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * w

    def log_probs(self, ids, checkpointed=False):
        """log p(ids[:, t] | ids[:, :t]) for t >= 1, as float32 [B, L - 1]."""
        logits = self.forward(ids, checkpointed)[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

    def generate(self, ids, steps, seed):
        B, ctx = ids.shape
        cap = ctx + steps
        ks = [torch.zeros(B, self.KV, cap, self.D, dtype=self.dtype) for _ in range(self.layers)]
        vs = [torch.zeros(B, self.KV, cap, self.D, dtype=self.dtype) for _ in range(self.layers)]
        g = torch.Generator().manual_seed(seed)

        def run(tokens, start):
            return self.cached(ks, vs, tokens, start)[:, 0].float()

        out = [ids]
        with torch.no_grad():
            logits = run(ids, 0)
            for s in range(steps):
                tok = torch.multinomial(torch.softmax(logits, -1), 1, generator=g)
                out.append(tok)
                if s + 1 < steps:
                    logits = run(tok, ctx + s)
        return torch.cat(out, 1)


def main():
    spec = json.load(sys.stdin)
    threads = int(spec["threads"])
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[spec["dtype"]]
    c = spec["config"]
    rows, prompt, new = spec["rows"], spec["prompt_length"], spec["new_tokens"]
    whole = spec.get("whole_model") is True
    model = Model(c, dtype, seed=1)
    reference = model
    if whole:
        reference = Model(c, torch.bfloat16, seed=1)
        for p in reference.P.values():
            p.requires_grad_(False)

    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, c["vocab_size"], (rows, prompt), generator=g)

    # The rank's share of AdamW: the first 1/ranks of the parameters by element count (all of them for
    # the whole model).
    params = list(model.P.values())
    total = sum(p.numel() for p in params)
    owned, count = [], 0
    for p in params:
        if count >= total / (1 if whole else spec["ranks"]):
            break
        owned.append(p)
        count += p.numel()
    opt = torch.optim.AdamW(owned, lr=1e-6)
    adv = torch.linspace(-1, 1, rows)
    step_seconds = []
    for step in range(1, int(spec.get("steps", 1)) + 1):
        seconds = {}
        t0 = time.perf_counter()
        seqs = model.generate(ids, new, seed=step)
        seconds["generate"] = time.perf_counter() - t0

        def score(m):
            with torch.no_grad():
                return torch.cat([m.log_probs(seqs[r : r + 1]) for r in range(rows)])

        t0 = time.perf_counter()
        old = score(model)
        seconds["old_log_prob"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = score(reference)
        seconds["ref_log_prob"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        for r in range(rows):
            lp = model.log_probs(seqs[r : r + 1], checkpointed=True)[:, prompt - 1 :]
            ratio = torch.exp(lp - old[r : r + 1, prompt - 1 :])
            kl = torch.exp(ref[r : r + 1, prompt - 1 :] - lp) - (ref[r : r + 1, prompt - 1 :] - lp) - 1
            loss = (-(ratio * adv[r]) + 0.001 * kl).mean() / rows
            loss.backward()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        seconds["update_forward_backward"] = t1 - t0
        seconds["update_adamw"] = t2 - t1
        seconds["update_actor"] = t2 - t0
        step_seconds.append(seconds)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {
                "torch_version": torch.__version__,
                "threads": torch.get_num_threads(),
                "dtype": spec["dtype"],
                "whole_model": whole,
                "parameters": total,
                "optimized_parameters": count,
                "steps": len(step_seconds),
                "seconds": step_seconds[-1],
                "step_seconds": step_seconds,
                "peak_rss_bytes": peak,
            }
        )
    )


if __name__ == "__main__":
    main()
