"""The LoRA fixture: PEFT's own LoRA on the qwen2-tiny golden model (make-model-fixtures.py), rank 4, alpha 8,
on every linear layer (all-linear), with A and B set to fixed non-zero values (B zero would give A no
gradient). PyTorch computes, in float64, per-token log-probs of a fixed left-padded batch and the gradient
of a weighted sum of them with respect to every adapter matrix.

Run: python3 packages/verl-ts/scripts/make-lora-fixture.py   (needs torch, transformers, peft)
Writes packages/verl-ts/test/fixtures/models/qwen2-tiny-lora/{adapter_config.json,
adapter_model.safetensors} (PEFT's save_pretrained, base_model_name_or_path ../qwen2-tiny) and expected.json
(log-probs [B, L] with column t scoring token t, the loss weights, the loss, and each adapter's gradient
by PEFT tensor name, in PEFT's layout).
"""
import json
import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(__file__)
FIX = os.path.join(HERE, "..", "test", "fixtures", "models")
BASE = os.path.join(FIX, "qwen2-tiny")
OUT = os.path.join(FIX, "qwen2-tiny-lora")
RANK, ALPHA = 4, 8
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
IDS = [[5, 17, 3, 29, 11, 2, 8], [0, 0, 7, 7, 21, 30, 4]]
MASK = [[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1]]


def main():
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=MODULES))
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * 0.3)
    os.makedirs(OUT, exist_ok=True)
    model.peft_config["default"].base_model_name_or_path = "../qwen2-tiny"
    model.save_pretrained(OUT)
    os.remove(os.path.join(OUT, "README.md"))  # PEFT's model card template, nothing to test

    model = model.double()
    model.eval()
    ids = torch.tensor(IDS)
    mask = torch.tensor(MASK)
    # positions count real tokens (left padding shifts them), as torl-ts does
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    logp = torch.cat([torch.zeros(len(IDS), 1, dtype=logp.dtype), logp], 1)
    # weights on the tokens whose own and previous positions are real; different per position
    weights = [[(t + 1) / 10 * (b + 1) if t > 0 and MASK[b][t] and MASK[b][t - 1] else 0.0
                for t in range(len(IDS[0]))] for b in range(len(IDS))]
    loss = (logp * torch.tensor(weights, dtype=logp.dtype)).sum()
    loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        if "lora_" in name:
            # PEFT's file name: the adapter name ("default") is not in it
            grads[name.replace(".default", "")] = p.grad.flatten().tolist()
    expected = {
        "rank": RANK,
        "alpha": ALPHA,
        "target_modules": MODULES,
        "ids": IDS,
        "mask": MASK,
        "weights": weights,
        "log_probs": logp.detach().tolist(),
        "loss": loss.item(),
        "grads": grads,
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f)
    print(f"wrote {OUT}: {len(grads)} adapter gradients, loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
