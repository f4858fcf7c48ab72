"""SFT data (core/data/sft_dataset.py): the loss mask is the assistant's tokens, token by token, on the real Qwen3
(bench/configs' copy) and SmolLM2 tokenizers and chat templates and on the embedded one; verl's prompt/response
rows lay out as the RL prompts do; bad rows fail in one line naming the row, and what a limit drops is counted."""

from __future__ import annotations

import json
import logging

import pytest
from transformers import AutoTokenizer

from core.data.dataset import PromptDataset
from core.data.rows import DataError, write_rows
from core.data.sft_dataset import SFTDataset, SFTKeys, collate_sft
from core.models.tiny import build_tiny_tokenizer
from core.trainer.sft_setup import check_sft_file

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
CALL_TEXT = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
STRUCTURED_CALL = [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]


def conversation(structured_call: bool) -> list[dict]:
    """Two user turns, a tool call and its reply: three assistant turns, each to be trained, nothing else."""
    call = {"role": "assistant", "content": "", "tool_calls": STRUCTURED_CALL} if structured_call else \
        {"role": "assistant", "content": CALL_TEXT}
    return [{"role": "system", "content": "You add numbers."}, {"role": "user", "content": "What is 2+3?"}, call,
            {"role": "tool", "content": "5"}, {"role": "assistant", "content": "The answer is 5."},
            {"role": "user", "content": "And 1+1?"}, {"role": "assistant", "content": "2"}]


# The assistant turns' text as each template renders it (Qwen3 gives the last turn its empty <think> block).
EXPECTED_TURNS = {
    "qwen3": [CALL_TEXT, "The answer is 5.", "<think>\n\n</think>\n\n2"],
    "smollm2": [CALL_TEXT, "The answer is 5.", "2"],
    "tiny": ["<>", "The answer is 5.", "2"],
}


def tokenizer_for(model: str, request):
    if model == "tiny":
        return build_tiny_tokenizer("<>")
    return AutoTokenizer.from_pretrained(request.getfixturevalue("qwen3_tokenizer_dir" if model == "qwen3"
                                                                 else "smollm2_dir"))


@pytest.mark.parametrize("model", ["qwen3", "smollm2", "tiny"])
def test_the_mask_is_exactly_the_assistant_turns_tokens(model, tmp_path, request):
    tokenizer = tokenizer_for(model, request)
    messages = conversation(structured_call=model == "qwen3")
    if model == "tiny":  # the embedded tokenizer has no JSON characters: a tag-style call
        messages[2] = {"role": "assistant", "content": "<>"}
    row = {"messages": messages, **({"tools": json.dumps(TOOLS)} if model == "qwen3" else {})}
    path = write_rows([row], tmp_path / "chat.jsonl")
    dataset = SFTDataset(path, tokenizer, max_prompt_length=1024, max_response_length=256)
    batch = collate_sft(dataset.items, dataset.pad_token_id)
    real = batch["attention_mask"][0].bool()
    ids, mask = batch["input_ids"][0][real].tolist(), batch["response_mask"][0].tolist()
    width = batch["responses"].shape[1]
    response = batch["responses"][0][batch["attention_mask"][0, -width:].bool()].tolist()
    mask = mask[: len(response)]
    eos = tokenizer.eos_token_id
    expected = [tok for turn in EXPECTED_TURNS[model] for tok in tokenizer(turn, add_special_tokens=False)["input_ids"]
                + [eos]]
    assert [tok for tok, m in zip(response, mask) if m] == expected
    # Nothing else trains: the system prompt, both user turns, the tool reply and the turn headers are context.
    untrained = tokenizer.decode([tok for tok, m in zip(response, mask) if not m])
    assert "And 1+1?" in untrained and "5" in untrained and "user" in untrained
    prompt = tokenizer.decode(batch["prompts"][0][batch["attention_mask"][0, :-width].bool()].tolist())
    assert "You add numbers." in prompt and "What is 2+3?" in prompt and "add" not in prompt.split("2+3?")[-1]
    # Token for token the template's whole render, up to the last turn's EOS: no text lost between the pieces.
    render = tokenizer.apply_chat_template(messages, tokenize=False, **({"tools": TOOLS} if model == "qwen3" else {}))
    assert tokenizer.decode(ids) == render[: render.rindex(tokenizer.eos_token) + len(tokenizer.eos_token)]


def test_verl_prompt_response_rows_lay_out_as_the_rl_prompts_then_the_answer(tmp_path):
    tokenizer = build_tiny_tokenizer()
    rows = [{"data_source": "x", "prompt": [{"role": "user", "content": f"What is {i}+1?"}],
             "reward_model": {"ground_truth": str(i + 1)}, "extra_info": {"answer": f"{i}+1={i + 1}\n#### {i + 1}"}}
            for i in range(3)]
    path = write_rows(rows, tmp_path / "train.parquet")
    sft = SFTDataset(path, tokenizer, max_prompt_length=64, max_response_length=24,
                     keys=SFTKeys(response_key="extra_info.answer"))
    rl = PromptDataset(path, tokenizer, max_prompt_length=64)
    for item, prompt, row in zip(sft.items, rl.items, rows):
        assert item.prompt_ids == prompt.prompt_ids  # the prompt RL generates from, id for id
        answer = tokenizer(row["extra_info"]["answer"], add_special_tokens=False)["input_ids"]
        assert item.response_ids == answer + [tokenizer.eos_token_id] and item.loss_mask == [1] * (len(answer) + 1)


# ---- lengths -------------------------------------------------------------------------------------
def long_rows(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a" * n}]}
            for n in (3, 40, 5)]
    return write_rows(rows, tmp_path / "long.jsonl")


def test_an_assistant_turn_over_the_limit_is_refused_naming_the_row(tmp_path):
    with pytest.raises(DataError, match=r"long.jsonl row 1: its response is 41 tokens, over "
                                        r"data.max_response_length=10 — raise data.max_response_length"):
        SFTDataset(long_rows(tmp_path), build_tiny_tokenizer(), max_prompt_length=64, max_response_length=10)


def test_filter_drops_and_counts_right_cuts_the_end(tmp_path, caplog):
    path, tokenizer = long_rows(tmp_path), build_tiny_tokenizer()
    with caplog.at_level(logging.WARNING):
        filtered = SFTDataset(path, tokenizer, max_prompt_length=64, max_response_length=10, truncation="filter")
    assert [item.index for item in filtered.items] == [0, 2] and [d[1] for d in filtered.dropped] == [1]
    assert "dropped 1 of 3 rows" in caplog.text and "row 1: its response is 41 tokens" in caplog.text
    cut = SFTDataset(path, tokenizer, max_prompt_length=64, max_response_length=10, truncation="right")
    assert len(cut.items[1].response_ids) == 10 and cut.items[1].response_ids == [tokenizer.convert_tokens_to_ids("a")] * 10
    with pytest.raises(DataError, match=r"no conversation is left — all 3 are over the length limits"):
        SFTDataset(path, tokenizer, max_prompt_length=64, max_response_length=2, truncation="filter")


# ---- bad rows: one line, from the rows alone (the preflight, before a tokenizer or model loads) -------------
@pytest.mark.parametrize("rows, keys, message", [
    ([{"q": "a", "answer": "b"}, {"q": "c"}], dict(prompt_key="q", response_key="answer"),
     r"1 of 2 rows have no field 'answer' \(data.response_key\) \(first: row 1"),
    ([{"q": "a", "answer": 7}], dict(prompt_key="q", response_key="answer"),
     r"row 0: field 'answer' \(data.response_key\) is int 7 — expected a string"),
    ([{"messages": [{"role": "user", "content": "hi"}]}], {},
     r"row 0: 'messages' has no assistant message \(roles \['user'\]\) — nothing to train on"),
    ([{"messages": [{"role": "assistant", "content": "hi"}]}], {}, r"row 0: 'messages' opens with an assistant"),
    ([{"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "x"}]}], {},
     r"row 0: message 0 \(user\) of 'messages' has content of type int"),
    ([{"text": "x"}], {}, r"rows have no field 'messages' \(data.messages_key\)"),
])
def test_a_bad_row_fails_in_one_line_naming_it(tmp_path, rows, keys, message):
    path = write_rows(rows, tmp_path / "bad.jsonl")
    data = type("Data", (), {"prompt_key": "prompt", "response_key": None, "messages_key": "messages", **keys})
    with pytest.raises(DataError, match=message) as error:
        check_sft_file(str(path), data)
    assert len(str(error.value).splitlines()) == 1 and str(path) in str(error.value)


def test_an_empty_dataset_is_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    data = type("Data", (), {"prompt_key": "prompt", "response_key": None, "messages_key": "messages"})
    with pytest.raises(DataError, match=r"empty.jsonl: the file has no rows"):
        check_sft_file(str(tmp_path / "empty.jsonl"), data)
