"""Reference values for the advantage estimators and policy losses beyond PPO/GRPO (grpo_passk, opo,
gpg; the gspo, gpg, clip_cov and kl_cov losses), computed with PyTorch (CPU).

Run: python packages/verl-ts/scripts/core/make-algorithm-variant-fixtures.py  (a python with torch:
     python3 -m venv --system-site-packages /tmp/torch && /tmp/torch/bin/pip install --no-deps /opt/wheels/torch-*.whl)
Writes packages/verl-ts/test/fixtures/core/algorithm-variants-torch.json (committed; CI has no torch).
Each formula is written from its paper (pass@k training arXiv:2503.19595, OPO arXiv:2505.23585,
GPG arXiv:2504.02546, GSPO arXiv:2507.18071, Clip-Cov/KL-Cov arXiv:2505.22617) and veRL's core_algos
definitions, independently of the TypeScript code it checks.
"""

import json
import os
from collections import defaultdict

import torch

torch.manual_seed(4321)
B, T = 8, 7
OUT = os.path.join(os.path.dirname(__file__), "../../test/fixtures/core/algorithm-variants-torch.json")


def masked_mean(v, m):
    return (v * m).sum() / (m.sum() + 1e-8)


def agg(L, m, mode):
    if mode == "token-mean":
        return masked_mean(L, m)
    if mode == "seq-mean-token-mean":
        return ((L * m).sum(-1) / m.sum(-1)).mean()
    if mode == "seq-mean-token-sum":
        return (L * m).sum(-1).mean()
    raise ValueError(mode)


def groups(index):
    g = defaultdict(list)
    for i, k in enumerate(index):
        g[k].append(i)
    return g


def passk(r, m, index, norm, eps=1e-6):
    s = r.sum(-1)
    adv = torch.zeros(B)
    for rows in groups(index).values():
        vals = s[rows]
        order = sorted(range(len(rows)), key=lambda j: (-float(vals[j]), j))  # best first, earliest on ties
        best, second = rows[order[0]], rows[order[1]]
        a = s[best] - s[second]
        if norm:
            a = a / (torch.std(vals) + eps)
        adv[best] = a
    return adv.unsqueeze(-1) * m


def opo(r, m, index):
    s = r.sum(-1)
    lengths = m.sum(-1)
    adv = torch.zeros(B)
    for rows in groups(index).values():
        b = (lengths[rows] * s[rows]).sum() / lengths[rows].sum() if len(rows) > 1 else torch.tensor(0.0)
        for i in rows:
            adv[i] = s[i] - b
    return adv.unsqueeze(-1) * m


def gpg_adv(r, m, index):
    s = r.sum(-1)
    alpha = B / max(int((s != 0).sum()), 1)
    adv = torch.zeros(B)
    for rows in groups(index).values():
        mean = s[rows].mean() if len(rows) > 1 else torch.tensor(0.0)
        for i in rows:
            adv[i] = alpha * (s[i] - mean)
    return adv.unsqueeze(-1) * m


def gspo(old, logp, adv, m, low, high, mode):
    d = logp - old
    seq = ((d * m).sum(-1) / m.sum(-1).clamp(min=1)).detach().unsqueeze(-1)
    s = torch.exp(torch.clamp(seq + logp - logp.detach(), max=10.0))
    l1 = -adv * s
    l2 = -adv * torch.clamp(s, 1 - low, 1 + high)
    loss = agg(torch.maximum(l1, l2), m, mode)
    return loss, {"pg_clipfrac": masked_mean((l2 > l1).float(), m), "ppo_kl": masked_mean(-d, m)}


def gpg_loss(logp, adv, m, mode):
    return agg(-logp * adv, m, mode), {}


def clip_cov(old, logp, adv, m, low, high, ratio_cut, lb, ub, mode):
    ratio = torch.exp(logp - old)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1 - low, 1 + high)
    cov = (adv - masked_mean(adv, m)) * (logp.detach() - masked_mean(logp.detach(), m))
    cand = (m > 0) & ~(l2 > l1) & (cov > lb) & (cov < ub)
    limit = max(int(ratio_cut * m.sum().item()), 1)
    assert int(cand.sum()) <= limit, "the fixture keeps the choice deterministic: no more candidates than the limit"
    # every cov stays clear of the window's edges, so float32 and float64 agree on the candidates
    assert bool(((cov - lb).abs() > 1e-3).all() and ((cov - ub).abs() > 1e-3).all())
    corr = (~cand).float()
    loss = agg(torch.maximum(l1, l2) * corr, m, mode)
    return loss, {"pg_clipfrac": masked_mean(1 - corr, m), "ppo_kl": masked_mean(-(logp - old), m)}, int(cand.sum())


def kl_cov(old, logp, adv, m, ratio_kl, coef, mode):
    d = logp - old
    flat_m = m.reshape(-1) > 0
    a = adv.reshape(-1)[flat_m]
    lp = logp.detach().reshape(-1)[flat_m]
    cov = (a - a.mean()) * (lp - lp.mean())
    k = max(1, int(len(cov) * ratio_kl))
    top = torch.topk(cov, k).indices
    pick = torch.zeros(int(flat_m.sum()))
    pick[top] = 1
    full = torch.zeros(B * T)
    full[flat_m] = pick
    L = -adv * torch.exp(d) + full.reshape(B, T) * coef * d.abs()
    return agg(L, m, mode), {"ppo_kl": masked_mean(d.abs(), m)}


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


lengths = [7, 5, 3, 6, 1, 4, 7, 2]
mask = torch.zeros(B, T)
for b, n in enumerate(lengths):
    mask[b, :n] = 1
mask[3, 2] = 0  # an observation token inside row 3
index = ["a", "a", "a", "b", "b", "c", "c", "c"]
outcome = torch.tensor([1.0, -1.0, 1.0, 0.0, -1.0, 0.0, 1.0, 0.0])  # ties, and zeros for GPG's alpha
token_scores = torch.zeros(B, T)
for b, n in enumerate(lengths):
    token_scores[b, n - 1] = outcome[b]
dense = torch.randn(B, T) * mask
old = torch.randn(B, T) * 0.5 - 1.0
logp = old + torch.randn(B, T) * 0.3
adv = torch.randn(B, T) * 1.5

out = {
    "shape": [B, T],
    "inputs": {
        "mask": flat(mask),
        "index": index,
        "token_scores": flat(token_scores),
        "dense_rewards": flat(dense),
        "old_log_prob": flat(old),
        "log_prob": flat(logp),
        "advantages": flat(adv),
    },
    "advantage": {
        "grpo_passk_outcome": flat(passk(token_scores, mask, index, True)),
        "grpo_passk_outcome_no_std": flat(passk(token_scores, mask, index, False)),
        "grpo_passk_dense": flat(passk(dense, mask, index, True)),
        "opo_outcome": flat(opo(token_scores, mask, index)),
        "opo_dense": flat(opo(dense, mask, index)),
        "gpg_outcome": flat(gpg_adv(token_scores, mask, index)),
        "gpg_dense": flat(gpg_adv(dense, mask, index)),
    },
}


def record(fn, *args, **kw):
    lp = logp.clone().requires_grad_(True)
    res = fn(old, lp, *args, **kw) if fn is not gpg_loss else fn(lp, *args, **kw)
    loss, metrics = res[0], res[1]
    loss.backward()
    rec = {"pg_loss": float(loss.detach()), "metrics": {k: float(v.detach()) for k, v in metrics.items()}, "grad": flat(lp.grad)}
    if len(res) > 2:
        rec["cut"] = res[2]
    return rec


pl = {}
for mode in ["token-mean", "seq-mean-token-mean"]:
    pl[f"gspo/{mode}"] = record(gspo, adv, mask, 0.2, 0.28, mode)
    pl[f"gpg/{mode}"] = record(gpg_loss, adv, mask, mode)
    pl[f"kl_cov/{mode}"] = record(kl_cov, adv, mask, 0.2, 0.5, mode)
    pl[f"clip_cov/{mode}"] = record(clip_cov, adv, mask, 0.2, 0.2, 0.25, 0.3, 2.0, mode)
out["policy_loss"] = pl
out["options"] = {
    "gspo": {"clipRatioLow": 0.2, "clipRatioHigh": 0.28},
    "kl_cov": {"klCovRatio": 0.2, "ppoKlCoef": 0.5},
    "clip_cov": {"clipRatio": 0.2, "clipCovRatio": 0.25, "clipCovLb": 0.3, "clipCovUb": 2.0},
}
assert pl["clip_cov/token-mean"]["cut"] > 0, "the fixture cuts at least one token"
assert pl["gspo/token-mean"]["metrics"]["pg_clipfrac"] > 0, "the fixture clips at least one token"
os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "w") as f:
    json.dump(out, f)
print("wrote", os.path.normpath(OUT), "clip_cov cut", pl["clip_cov/token-mean"]["cut"])
