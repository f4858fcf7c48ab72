"""Prompt datasets (verl parquet schema, JSONL), collation, and the seeded resumable loader."""

import pytest
import torch

from core.data.dataset import PromptDataset, collate_prompts
from core.data.loader import PromptLoader
from core.data.rows import read_rows, write_rows
from tests.helpers_tokenizer import build_char_tokenizer

TOKENIZER = build_char_tokenizer()
# Char-level template cost: "<|im_start|>" "user\n" ... "<|im_end|>" "\n" "<|im_start|>" "assistant\n".
TEMPLATE_TOKENS = 1 + 5 + 1 + 1 + 1 + 10


def gsm8k_row(i: int, question: str | None = None) -> dict:
    """One row in verl's schema."""
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": question or f"What is {i} + {i}?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
        "extra_info": {"split": "train", "index": i},
    }


def dataset_file(tmp_path, rows, name="train.parquet"):
    return write_rows(rows, tmp_path / name)


def load(path, **kwargs):
    kwargs.setdefault("max_prompt_length", 256)
    return PromptDataset(path, TOKENIZER, **kwargs)


# ---- loading ------------------------------------------------------------------------------------
def test_item_holds_templated_ids_and_row_fields(tmp_path):
    dataset = load(dataset_file(tmp_path, [gsm8k_row(3)]))
    item = dataset[0]
    text = "<|im_start|>user\nWhat is 3 + 3?<|im_end|>\n<|im_start|>assistant\n"
    assert item.prompt_ids == TOKENIZER(text, add_special_tokens=False)["input_ids"]
    assert len(item.prompt_ids) == TEMPLATE_TOKENS + len("What is 3 + 3?")
    assert (item.data_source, item.ground_truth, item.index) == ("openai/gsm8k", "6", 0)
    assert item.raw_prompt == [{"role": "user", "content": "What is 3 + 3?"}]
    assert item.extra_info == {"split": "train", "index": 3}


def test_jsonl_and_parquet_give_identical_items(tmp_path):
    rows = [gsm8k_row(i) for i in range(5)]
    from_parquet = load(dataset_file(tmp_path, rows, "train.parquet"))
    from_jsonl = load(dataset_file(tmp_path, rows, "train.jsonl"))
    assert from_parquet.items == from_jsonl.items
    assert read_rows(tmp_path / "train.parquet") == read_rows(tmp_path / "train.jsonl") == rows


def test_missing_prompt_field_names_file_config_key_and_found_fields(tmp_path):
    path = dataset_file(tmp_path, [{"data_source": "gsm8k", "question": "1+1?", "answer": "2"}])
    found = "['answer', 'data_source', 'question']"
    expected = (
        f"{path}: rows have no field 'prompt' (data.prompt_key); found fields {found}; set "
        "data.prompt_key=<dotted.path> to the field that holds it, or convert the file with `recipezoo data <benchmark>`"
    )
    with pytest.raises(ValueError) as error:
        load(path)
    assert str(error.value) == expected


def test_missing_nested_ground_truth_names_the_dotted_key(tmp_path):
    row = gsm8k_row(1)
    del row["reward_model"]["ground_truth"]
    with pytest.raises(ValueError, match=r"no field 'reward_model.ground_truth' \(data.ground_truth_key\)"):
        load(dataset_file(tmp_path, [row]))


def test_missing_ground_truth_error_names_file_nested_fields_and_the_fix(tmp_path):
    row = gsm8k_row(1)
    del row["reward_model"]["ground_truth"]
    path = dataset_file(tmp_path, [row, row])
    with pytest.raises(ValueError) as error:
        load(path)
    message = str(error.value)
    assert message.startswith(f"{path}: rows have no field 'reward_model.ground_truth' (data.ground_truth_key)")
    assert "'reward_model' has ['style']" in message  # shows what the nested struct does hold
    assert "set data.ground_truth_key=<dotted.path>" in message and "recipezoo data" in message


def test_some_rows_missing_a_field_names_the_first_one(tmp_path):
    rows = [gsm8k_row(0), {k: v for k, v in gsm8k_row(1).items() if k != "data_source"}]
    with pytest.raises(ValueError, match=r"1 of 2 rows have no field 'data_source'.*first: row 1"):
        load(dataset_file(tmp_path, rows, "train.jsonl"))


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope.parquet")):
        load(tmp_path / "nope.parquet")


def test_unsupported_suffix_names_the_supported_ones(tmp_path):
    with pytest.raises(ValueError, match=r"'.csv'.*\['.parquet', '.jsonl'\]"):
        load(tmp_path / "train.csv")


def test_key_remapping_reads_dotted_paths_and_string_prompts(tmp_path):
    rows = [{"data_source": "arithmetic", "question": "2+2?", "meta": {"answer": "4"}}]
    dataset = load(dataset_file(tmp_path, rows, "train.jsonl"), prompt_key="question", ground_truth_key="meta.answer")
    assert dataset[0].raw_prompt == [{"role": "user", "content": "2+2?"}]
    assert dataset[0].ground_truth == "4"


# ---- prompt length ------------------------------------------------------------------------------
def rows_with_lengths(*question_lengths):
    return [gsm8k_row(i, question="q" * n) for i, n in enumerate(question_lengths)]


def test_overlong_prompts_with_truncation_error_report_count_and_max(tmp_path):
    path = dataset_file(tmp_path, rows_with_lengths(5, 30, 10, 40))
    limit = TEMPLATE_TOKENS + 10
    expected = (
        f"data.max_prompt_length={limit} but 2 prompts in {path} are longer (max {TEMPLATE_TOKENS + 40}); "
        f"raise it or set data.truncation=filter"
    )
    with pytest.raises(ValueError) as error:
        load(path, max_prompt_length=limit)
    assert str(error.value) == expected


def test_filter_drops_overlong_prompts_and_keeps_their_indices_stable(tmp_path, caplog):
    path = dataset_file(tmp_path, rows_with_lengths(5, 30, 10, 40))
    dataset = load(path, max_prompt_length=TEMPLATE_TOKENS + 10, truncation="filter")
    assert "dropped 2 of 4 prompts longer than data.max_prompt_length" in caplog.text
    assert len(dataset) == 2 and dataset.num_filtered == 2
    assert [item.index for item in dataset] == [0, 2]
    assert [item.ground_truth for item in dataset] == ["0", "4"]


def test_filtering_every_prompt_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="every prompt is longer than data.max_prompt_length=10"):
        load(dataset_file(tmp_path, rows_with_lengths(30)), max_prompt_length=10, truncation="filter")


def test_left_and_right_truncation_cut_the_token_ids(tmp_path):
    path = dataset_file(tmp_path, rows_with_lengths(40))
    full = load(path)[0].prompt_ids
    assert load(path, max_prompt_length=20, truncation="left")[0].prompt_ids == full[-20:]
    assert load(path, max_prompt_length=20, truncation="right")[0].prompt_ids == full[:20]


def test_unknown_truncation_mode_names_the_config_key(tmp_path):
    with pytest.raises(ValueError, match=r"data.truncation='middle'"):
        load(dataset_file(tmp_path, [gsm8k_row(0)]), truncation="middle")


def test_several_files_get_running_indices(tmp_path):
    first = dataset_file(tmp_path, [gsm8k_row(0), gsm8k_row(1)], "a.parquet")
    second = dataset_file(tmp_path, [gsm8k_row(2)], "b.jsonl")
    assert [item.index for item in load([first, second])] == [0, 1, 2]


# ---- collation ----------------------------------------------------------------------------------
def test_collate_left_pads_and_carries_row_values(tmp_path):
    dataset = load(dataset_file(tmp_path, rows_with_lengths(2, 5)))
    batch = collate_prompts([dataset[0], dataset[1]], pad_token_id=0)
    short, long = len(dataset[0].prompt_ids), len(dataset[1].prompt_ids)
    assert batch["input_ids"].shape == (2, long) and batch["input_ids"].dtype == torch.long
    assert batch["attention_mask"][0].tolist() == [0] * (long - short) + [1] * short
    assert batch["input_ids"][0, long - short :].tolist() == dataset[0].prompt_ids
    assert batch["input_ids"][0, : long - short].tolist() == [0] * (long - short)
    assert list(batch["ground_truth"]) == ["0", "2"]
    assert list(batch["index"]) == [0, 1]
    assert list(batch["data_source"]) == ["openai/gsm8k"] * 2
    # Equal-length message lists stay one object per row (numpy would otherwise make them 2-D).
    assert batch["raw_prompt"].shape == (2,) and batch["raw_prompt"][1] == dataset[1].raw_prompt


# ---- loader -------------------------------------------------------------------------------------
@pytest.fixture
def ten_prompts(tmp_path):
    return load(dataset_file(tmp_path, [gsm8k_row(i) for i in range(10)]))


def indices(batch):
    return [int(i) for i in batch["index"]]


def test_loader_epoch_is_a_seeded_permutation(ten_prompts):
    loader = PromptLoader(ten_prompts, 5, seed=7)
    assert len(loader) == 2
    epoch0 = indices(next(loader)) + indices(next(loader))
    expected = torch.randperm(10, generator=torch.Generator().manual_seed(7)).tolist()
    assert epoch0 == expected
    epoch1 = indices(next(loader)) + indices(next(loader))
    assert sorted(epoch1) == list(range(10)) and epoch1 != epoch0


def test_loader_drop_last_skips_the_partial_tail(ten_prompts):
    loader = PromptLoader(ten_prompts, 4, seed=0)
    assert len(loader) == 2
    next(loader), next(loader)
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["offset"] == 0


def test_loader_keep_last_serves_the_partial_tail(ten_prompts):
    loader = PromptLoader(ten_prompts, 4, seed=0, shuffle=False, drop_last=False)
    assert len(loader) == 3
    assert [len(next(loader)) for _ in range(4)] == [4, 4, 2, 4]


def test_loader_state_dict_round_trip_yields_the_same_next_batches(ten_prompts):
    original = PromptLoader(ten_prompts, 4, seed=3)
    for _ in range(3):  # into the second epoch
        next(original)
    state = original.state_dict()
    resumed = PromptLoader(ten_prompts, 4, seed=3)
    resumed.load_state_dict(state)
    for _ in range(4):
        assert indices(next(resumed)) == indices(next(original))


def test_loader_refuses_a_state_from_another_seed(ten_prompts):
    state = PromptLoader(ten_prompts, 5, seed=1).state_dict()
    with pytest.raises(ValueError, match="seed=1.*seed=2"):
        PromptLoader(ten_prompts, 5, seed=2).load_state_dict(state)


def test_rank_shards_cover_the_global_batch_exactly_once(ten_prompts):
    world_size, batch_size = 4, 8
    global_loader = PromptLoader(ten_prompts, batch_size, seed=5)
    rank_loaders = [PromptLoader(ten_prompts, batch_size, seed=5, rank=r, world_size=world_size) for r in range(4)]
    for _ in range(3):
        shards = [indices(next(loader)) for loader in rank_loaders]
        assert all(len(shard) == batch_size // world_size for shard in shards)
        assert sum(shards, []) == indices(next(global_loader))


def test_batch_size_must_divide_over_ranks(ten_prompts):
    with pytest.raises(ValueError, match=r"train_batch_size=6 must be divisible by the data-parallel world size 4"):
        PromptLoader(ten_prompts, 6, seed=0, world_size=4)


def test_batch_larger_than_dataset_is_an_error(ten_prompts):
    with pytest.raises(ValueError, match=r"data.train_batch_size=16 but the dataset has only 10 prompts"):
        PromptLoader(ten_prompts, 16, seed=0)
