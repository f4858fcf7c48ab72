"""A tiny character-level chat tokenizer for tests: no download, deterministic, Qwen-style template.

Every printable ASCII character plus newline is one token; `<|im_start|>`, `<|im_end|>` and
`<|endoftext|>` are special tokens (skipped by `decode(..., skip_special_tokens=True)`).
One character = one token, so tests can reason about prompt lengths by counting characters.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Specials first (ids 0..3: <|endoftext|>=0 is pad and eos), then one id per character."""
    chars = sorted(set(string.printable) - set("\t\r\x0b\x0c"))
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + chars)}
    # BPE with no merges and no pre-tokenizer splits text into single characters.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = decoders.Fuse()  # join characters back without inserting spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
