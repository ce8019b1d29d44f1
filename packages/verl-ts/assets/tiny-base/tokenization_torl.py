"""Tokenizes by tokenizer.json exactly as it is (normalizer, pre-tokenizer, decoder, added tokens),
as torl-ts does; written by torl-ts. transformers 5 would otherwise rebuild a qwen2 model's
tokenizer from Qwen2's defaults. Used with trust_remote_code=True; without it, tokenizer_config.json's
PreTrainedTokenizerFast reads tokenizer.json the same way."""

try:  # transformers >= 5
    from transformers.tokenization_utils_tokenizers import TokenizersBackend as _Base
except ImportError:  # transformers 4
    from transformers import PreTrainedTokenizerFast as _Base


class TorlTokenizer(_Base):
    pass
