"""Reference values for packages/verl-ts/src/algorithms, computed with PyTorch (CPU).

Run: /opt/torchenv/bin/python packages/verl-ts/scripts/core/make-algorithm-fixtures.py
Writes packages/verl-ts/test/fixtures/core/algorithms-torch.json (committed; CI has no torch).
The formulas below are written from veRL's core_algos / torch_functional definitions, independently
of the TypeScript code they check.
"""

import json
import math
import os
from collections import defaultdict

import torch

torch.manual_seed(1234)
B, T, V = 6, 7, 11
OUT = os.path.join(os.path.dirname(__file__), "../../test/fixtures/core/algorithms-torch.json")


def masked_mean(v, m, axis=None):
    if axis is None:
        return (v * m).sum() / (m.sum() + 1e-8)
    return (v * m).sum(axis) / (m.sum(axis) + 1e-8)


def masked_var(v, m, unbiased=True):
    mean = masked_mean(v, m)
    var = masked_mean((v - mean) ** 2, m)
    if unbiased:
        n = m.sum()
        var = var * (n / (n - 1))
    return var


def masked_whiten(v, m, shift_mean=True):
    mean, var = masked_mean(v, m), masked_var(v, m)
    w = (v - mean) * torch.rsqrt(var + 1e-8)
    return w if shift_mean else w + mean


def grpo(r, m, index, norm=True, eps=1e-6):
    scores = r.sum(-1).clone()
    groups = defaultdict(list)
    for i in range(len(index)):
        groups[index[i]].append(scores[i])
    mean, std = {}, {}
    for k, s in groups.items():
        if len(s) == 1:
            mean[k], std[k] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean[k], std[k] = torch.mean(torch.stack(s)), torch.std(torch.stack(s))
    for i in range(len(index)):
        k = index[i]
        scores[i] = (scores[i] - mean[k]) / (std[k] + eps) if norm else scores[i] - mean[k]
    return scores.unsqueeze(-1) * m


def rloo(r, m, index):
    scores = r.sum(-1).clone()
    groups = defaultdict(list)
    for i in range(len(index)):
        groups[index[i]].append(scores[i])
    mean = {k: (torch.mean(torch.stack(s)) if len(s) > 1 else torch.tensor(0.0)) for k, s in groups.items()}
    for i in range(len(index)):
        n = len(groups[index[i]])
        if n > 1:
            scores[i] = scores[i] * n / (n - 1) - mean[index[i]] * n / (n - 1)
    return scores.unsqueeze(-1) * m


def rpp(r, m, gamma):
    returns = torch.zeros_like(r)
    running = 0
    for t in reversed(range(r.shape[1])):
        running = r[:, t] + gamma * running
        returns[:, t] = running
        running = running * m[:, t]
    return masked_whiten(returns, m) * m, returns


def rpp_baseline(r, m, index):
    scores = r.sum(-1).clone()
    groups = defaultdict(list)
    for i in range(len(index)):
        groups[index[i]].append(scores[i])
    mean = {k: (torch.mean(torch.stack(s)) if len(s) > 1 else torch.tensor(0.0)) for k, s in groups.items()}
    for i in range(len(index)):
        scores[i] = scores[i] - mean[index[i]]
    s = scores.unsqueeze(-1).tile([1, r.shape[1]]) * m
    return masked_whiten(s, m) * m


def gae(r, values, m, gamma, lam):
    nextvalues = torch.zeros(r.shape[0])
    lastgaelam = torch.zeros(r.shape[0])
    rev = []
    for t in reversed(range(r.shape[1])):
        delta = r[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * m[:, t] + (1 - m[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * m[:, t] + (1 - m[:, t]) * lastgaelam
        rev.append(lastgaelam)
    adv = torch.stack(rev[::-1], dim=1)
    returns = adv + values
    return masked_whiten(adv, m), returns


def agg_loss(L, m, mode):
    if mode == "token-mean":
        return masked_mean(L, m)
    if mode == "seq-mean-token-sum":
        return torch.sum(L * m, -1).mean()
    if mode == "seq-mean-token-mean":
        return (torch.sum(L * m, -1) / torch.sum(m, -1)).mean()
    if mode == "seq-mean-token-sum-norm":
        return torch.sum(L * m) / L.shape[-1]
    raise ValueError(mode)


def policy_loss(old, logp, adv, m, low, high, c, mode):
    neg = torch.clamp(logp - old, -20.0, 20.0)
    ratio = torch.exp(neg)
    ppo_kl = masked_mean(-neg, m)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1 - low, 1 + high)
    lc = torch.maximum(l1, l2)
    clipfrac = masked_mean(torch.gt(l2, l1).float(), m)
    l3 = -adv * c
    lc2 = torch.min(l3, lc)
    clipfrac_lower = masked_mean(torch.gt(lc, l3) * (adv < 0).float(), m)
    L = torch.where(adv < 0, lc2, lc)
    return agg_loss(L, m, mode), clipfrac, ppo_kl, clipfrac_lower


def kl_penalty(logp, ref, kind):
    if kind in ("kl", "k1"):
        return logp - ref
    if kind == "abs":
        return (logp - ref).abs()
    if kind in ("mse", "k2"):
        return 0.5 * (logp - ref).square()
    if kind in ("low_var_kl", "k3"):
        kl = torch.clamp(ref - logp, -20, 20)
        return torch.clamp(torch.exp(kl) - kl - 1, -10, 10)
    raise ValueError(kind)


def entropy(logits):
    pd = torch.softmax(logits, -1)
    return torch.logsumexp(logits, -1) - torch.sum(pd * logits, -1)


def value_loss(vpreds, returns, values, m, c, mode):
    clipped = torch.max(torch.min(vpreds, values + c), values - c)
    l1 = (vpreds - returns) ** 2
    l2 = (clipped - returns) ** 2
    return 0.5 * agg_loss(torch.max(l1, l2), m, mode), masked_mean(torch.gt(l2, l1).float(), m)


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


lengths = [7, 5, 3, 6, 1, 4]
mask = torch.zeros(B, T)
for b, n in enumerate(lengths):
    mask[b, :n] = 1
mask[3, 2] = 0  # an observation token in the middle of row 3
index = ["a", "a", "a", "b", "b", "c"]
scores = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])
token_scores = torch.zeros(B, T)
for b, n in enumerate(lengths):
    token_scores[b, n - 1] = scores[b]
dense_rewards = torch.randn(B, T) * mask
values = torch.randn(B, T) * 0.5
old = torch.randn(B, T) * 0.5 - 1.0
logp = old + torch.randn(B, T) * 1.2
adv = torch.randn(B, T) * 1.5
# make sure the dual clip (A < 0, ratio > 3) and the +-20 clamp are both exercised
logp[0, 1], adv[0, 1] = old[0, 1] + 1.5, -1.0
logp[1, 0], adv[1, 0] = old[1, 0] + 25.0, 0.7
logp[2, 1], adv[2, 1] = old[2, 1] + 1.21, 0.5
ref = old + torch.randn(B, T) * 0.4
logits = torch.randn(B, T, V) * 2.0
vpreds = values + torch.randn(B, T) * 0.8
returns_in = torch.randn(B, T)

out = {
    "shape": [B, T],
    "vocab": V,
    "inputs": {
        "mask": flat(mask),
        "index": index,
        "scores": flat(scores),
        "token_scores": flat(token_scores),
        "dense_rewards": flat(dense_rewards),
        "values": flat(values),
        "old_log_prob": flat(old),
        "log_prob": flat(logp),
        "advantages": flat(adv),
        "ref_log_prob": flat(ref),
        "logits": flat(logits),
        "vpreds": flat(vpreds),
        "returns": flat(returns_in),
    },
}

out["masked"] = {
    "mean": float(masked_mean(dense_rewards + values, mask)),
    "var": float(masked_var(dense_rewards + values, mask)),
    "var_biased": float(masked_var(dense_rewards + values, mask, unbiased=False)),
    "whiten": flat(masked_whiten(dense_rewards + values, mask)),
    "whiten_keep_mean": flat(masked_whiten(dense_rewards + values, mask, shift_mean=False)),
}

out["advantage"] = {
    "grpo": flat(grpo(token_scores, mask, index)),
    "grpo_no_std": flat(grpo(token_scores, mask, index, norm=False)),
    "grpo_dense": flat(grpo(dense_rewards, mask, index)),
    "rloo": flat(rloo(token_scores, mask, index)),
    "reinforce_plus_plus_g1": flat(rpp(dense_rewards, mask, 1.0)[0]),
    "reinforce_plus_plus_g099": flat(rpp(dense_rewards, mask, 0.99)[0]),
    "reinforce_plus_plus_g099_returns": flat(rpp(dense_rewards, mask, 0.99)[1]),
    "reinforce_plus_plus_baseline": flat(rpp_baseline(token_scores, mask, index)),
}
ga, gr = gae(dense_rewards, values * mask, mask, 0.99, 0.95)
out["advantage"]["gae_g099_l095"] = flat(ga)
out["advantage"]["gae_g099_l095_returns"] = flat(gr)

modes = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
pl = {}
for mode in modes:
    for name, (low, high) in {"sym": (0.2, 0.2), "asym": (0.2, 0.28)}.items():
        lp = logp.clone().requires_grad_(True)
        loss, cf, kl, cfl = policy_loss(old, lp, adv, mask, low, high, 3.0, mode)
        loss.backward()
        pl[f"{mode}/{name}"] = {
            "pg_loss": float(loss.detach()),
            "pg_clipfrac": float(cf.detach()),
            "ppo_kl": float(kl.detach()),
            "pg_clipfrac_lower": float(cfl.detach()),
            "grad": flat(lp.grad),
        }
out["policy_loss"] = pl

kl = {}
for kind in ["kl", "abs", "mse", "low_var_kl"]:
    lp = logp.clone().requires_grad_(True)
    k = kl_penalty(lp, ref, kind)
    loss = agg_loss(k, mask, "token-mean")
    loss.backward()
    kl[kind] = {"values": flat(k), "loss_token_mean": float(loss.detach()), "grad": flat(lp.grad)}
# exercise the +-10 clamp of k3
far = torch.tensor([[0.0, -30.0, 5.0, -3.0]])
kl["low_var_kl_far"] = {"log_prob": [0.0, 0.0, 0.0, 0.0], "ref": flat(far), "values": flat(kl_penalty(torch.zeros(1, 4), far, "k3"))}
out["kl"] = kl


def apply_kl(beta, ctrl, target=0.1, horizon=10000):
    kld = kl_penalty(old, ref, "low_var_kl") * mask
    rewards = token_scores - beta * kld
    current = torch.mean(masked_mean(kld, mask, axis=-1)).item()
    new_beta = beta
    if ctrl == "adaptive":
        err = float(max(min(current / target - 1, 0.2), -0.2))
        new_beta = beta * (1 + err * B / horizon)
    return {"rewards": flat(rewards), "current_kl": current, "beta_after": new_beta}


out["kl_in_reward"] = {"fixed": apply_kl(0.05, "fixed"), "adaptive": apply_kl(0.05, "adaptive", 0.01, 100)}

lg = logits.clone().requires_grad_(True)
ent = entropy(lg)
ent_loss = agg_loss(ent, mask, "token-mean")
ent_loss.backward()
out["entropy"] = {"values": flat(ent), "loss_token_mean": float(ent_loss.detach()), "grad": flat(lg.grad)}

vl = {}
for mode in ["token-mean", "seq-mean-token-mean"]:
    l, cf = value_loss(vpreds, returns_in, values, mask, 0.5, mode)
    vl[mode] = {"vf_loss": float(l), "vf_clipfrac": float(cf)}
out["value_loss"] = vl

assert all(math.isfinite(x) for x in out["policy_loss"]["token-mean/sym"]["grad"])
os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "w") as f:
    json.dump(out, f)
print("wrote", os.path.normpath(OUT))
