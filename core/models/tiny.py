"""The embedded default model: a tiny Qwen3 with a character-level tokenizer and a chat template.

It goes through the same code path as a real Qwen3 (the HF class, `save_pretrained` /
`from_pretrained`, `apply_chat_template`), so everything tested on it is what runs on Qwen3-8B.
head_dim is 32 because vLLM's CPU attention backend needs head_dim >= 32.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast, Qwen3Config

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]
CHARACTERS = string.digits + string.ascii_letters + " \n" + "+-*/=?#.,:;!()'\"%$"

# Qwen's chat format, so prompts look like the real model's.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tiny_tokenizer(extra_characters: str = "") -> PreTrainedTokenizerFast:
    """Character-level tokenizer: one token per character, three Qwen special tokens. `extra_characters` come
    after the rest, so the default model's ids stay as they are (the tool-use model adds "<>" for its tags)."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + list(CHARACTERS) + list(extra_characters))}
    # BPE with no merges splits text into single characters; Fuse joins them back without spaces.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    backend.add_special_tokens(SPECIAL_TOKENS)
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=512,
    )


def tiny_qwen3_config(tokenizer: PreTrainedTokenizerFast, **overrides) -> Qwen3Config:
    settings = dict(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    settings.update(overrides)
    return Qwen3Config(**settings)
