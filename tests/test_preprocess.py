"""`recipezoo data`: benchmarks -> verl-schema parquet, from local files (the hub is faked here)."""

import argparse
import json
import os
from pathlib import Path

import pytest

from core.data.dataset import PromptDataset
from core.data.preprocess import (
    BENCHMARKS,
    BOXED_INSTRUCTION,
    GSM8K_INSTRUCTION,
    add_parser,
    integer_ground_truth,
    preprocess,
)
from core.data.rows import read_rows, write_rows
from tests.helpers_tokenizer import build_char_tokenizer

TOKENIZER = build_char_tokenizer()
SHARED_DATA = Path(os.environ.get("RECIPEZOO_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
needs_shared_data = pytest.mark.skipif(
    not SHARED_DATA.is_dir(),
    reason=f"benchmark files not found at {SHARED_DATA}; set RECIPEZOO_SHARED_DATA to the shared/data folder",
)

# (benchmark, rows, data_source, (row, hand-checked ground truth) pairs)
EXPECTED = [
    # gsm8k test row 146's answer ends "#### 2,125": commas go, as in verl's gsm8k.py.
    ("gsm8k", 1319, "openai/gsm8k", [(0, "18"), (146, "2125")]),
    ("math500", 500, "HuggingFaceH4/MATH-500", [(0, r"\left( 3, \frac{\pi}{2} \right)"), (2, r"\frac{14}{3}")]),
    ("aime24", 30, "aime24", [(0, "204")]),
    ("aime25", 30, "aime25", [(0, "70")]),
    ("amc23", 40, "amc23", [(0, "27")]),
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Each shared benchmark file preprocessed once: name -> (path, row count)."""
    out = tmp_path_factory.mktemp("benchmarks")
    result = {}
    for name, *_ in EXPECTED:
        [(path, count)] = preprocess(name, out / name, local=SHARED_DATA / name / "test.jsonl")
        result[name] = (path, count)
    return result


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="recipezoo")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


# ---- the shared benchmark files -----------------------------------------------------------------
@needs_shared_data
@pytest.mark.parametrize("name, count, data_source, truths", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_benchmark_rows_follow_the_verl_schema(written, name, count, data_source, truths):
    path, written_count = written[name]
    rows = read_rows(path)
    assert path.name == "test.parquet" and written_count == len(rows) == count
    question_field = "question" if name == "gsm8k" else "problem"
    instruction = GSM8K_INSTRUCTION if name == "gsm8k" else BOXED_INSTRUCTION
    for index, row in enumerate(rows):
        assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        assert (row["data_source"], row["ability"], row["reward_model"]["style"]) == (data_source, "math", "rule")
        assert isinstance(row["reward_model"]["ground_truth"], str) and row["reward_model"]["ground_truth"]
        assert (row["extra_info"]["split"], row["extra_info"]["index"]) == ("test", index)
        question = row["extra_info"][question_field]
        assert row["prompt"] == [{"role": "user", "content": f"{question} {instruction}"}]
    for index, ground_truth in truths:
        assert rows[index]["reward_model"]["ground_truth"] == ground_truth


@needs_shared_data
def test_source_fields_are_kept_in_extra_info(written):
    math_row = read_rows(written["math500"][0])[0]
    assert math_row["extra_info"]["unique_id"] == "test/precalculus/807.json"
    assert (math_row["extra_info"]["subject"], math_row["extra_info"]["level"]) == ("Precalculus", 2)
    aime_row = read_rows(written["aime24"][0])[0]
    assert aime_row["extra_info"]["id"] == "2024-I-1" and aime_row["extra_info"]["url"].startswith("https://")
    gsm8k_row = read_rows(written["gsm8k"][0])[0]
    assert gsm8k_row["extra_info"]["answer"].endswith("#### 18")


@needs_shared_data
@pytest.mark.parametrize("name, count, data_source, truths", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_output_loads_as_a_prompt_dataset(written, name, count, data_source, truths):
    dataset = PromptDataset(written[name][0], TOKENIZER, max_prompt_length=8192)
    assert len(dataset) == count
    for index, ground_truth in truths:
        assert (dataset[index].data_source, dataset[index].ground_truth) == (data_source, ground_truth)


@needs_shared_data
def test_cli_prints_one_line_per_file(tmp_path, capsys):
    local = SHARED_DATA / "aime25" / "test.jsonl"
    assert run_cli(["data", "aime25", "--out", str(tmp_path), "--local", str(local)]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'test.parquet'}: 30 rows\n"


# ---- small hand-made inputs ---------------------------------------------------------------------
def gsm8k_rows(n: int = 2) -> list[dict]:
    return [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(n)]


def test_local_file_named_train_writes_the_train_split(tmp_path, capsys):
    local = write_rows(gsm8k_rows(3), tmp_path / "train.jsonl")
    assert run_cli(["data", "gsm8k", "--out", str(tmp_path / "out"), "--local", str(local)]) == 0
    rows = read_rows(tmp_path / "out" / "train.parquet")
    assert [row["extra_info"]["split"] for row in rows] == ["train"] * 3
    assert capsys.readouterr().out == f"{tmp_path / 'out' / 'train.parquet'}: 3 rows\n"


def test_instruction_override_replaces_the_suffix(tmp_path):
    local = write_rows(gsm8k_rows(1), tmp_path / "rows.jsonl")
    preprocess("gsm8k", tmp_path, local=local, instruction="Answer after ####.")
    preprocess("gsm8k", tmp_path / "bare", local=local, instruction="")
    assert read_rows(tmp_path / "test.parquet")[0]["prompt"][0]["content"] == "What is 0 + 0? Answer after ####."
    assert read_rows(tmp_path / "bare" / "test.parquet")[0]["prompt"][0]["content"] == "What is 0 + 0?"


def test_json_array_and_question_alias_are_read(tmp_path):
    # Hub copies of AMC 2023 name the question "question" and store answers as floats.
    local = tmp_path / "amc.json"
    local.write_text(json.dumps([{"id": 0, "question": "How many?", "answer": 27.0}]))
    [(path, count)] = preprocess("amc23", tmp_path / "out", local=local)
    row = read_rows(path)[0]
    assert count == 1 and row["reward_model"]["ground_truth"] == "27"
    assert row["prompt"][0]["content"] == f"How many? {BOXED_INSTRUCTION}"


@pytest.mark.parametrize("answer, expected", [("025", "25"), (27.0, "27"), ("0", "0"), (113, "113"), ("1/2", "1/2")])
def test_integer_answers_are_normalised(answer, expected):
    assert integer_ground_truth(answer) == expected


# ---- errors -------------------------------------------------------------------------------------
def test_gsm8k_row_without_answer_names_file_row_and_field(tmp_path):
    rows = gsm8k_rows(2)
    del rows[1]["answer"]
    local = write_rows(rows, tmp_path / "test.jsonl")
    with pytest.raises(ValueError) as error:
        preprocess("gsm8k", tmp_path / "out", local=local)
    assert str(error.value).startswith(f"{local}: row 2 of 2 has no (or an empty) field 'answer'")
    assert "gsm8k rows need 'question' (the question) and 'answer'" in str(error.value)


def test_gsm8k_answer_without_final_marker_is_reported(tmp_path, capsys):
    rows = gsm8k_rows(1)
    rows[0]["answer"] = "the answer is 0"
    local = write_rows(rows, tmp_path / "test.jsonl")
    assert run_cli(["data", "gsm8k", "--out", str(tmp_path / "out"), "--local", str(local)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"recipezoo data: {local}: row 1 of 1: its 'answer' has no final answer after '#### '")
    assert not (tmp_path / "out").exists()


def test_missing_problem_names_both_accepted_fields(tmp_path):
    local = write_rows([{"id": "2025-I-1", "answer": "70"}], tmp_path / "test.jsonl")
    with pytest.raises(ValueError, match=r"row 1 of 1 has no \(or an empty\) field 'problem'.*'problem' or 'question'"):
        preprocess("aime25", tmp_path / "out", local=local)


def test_unknown_split_and_missing_file_are_clear(tmp_path):
    with pytest.raises(ValueError, match=r"aime24 has no split 'train'; it has \['test'\]"):
        preprocess("aime24", tmp_path, local=tmp_path / "x.jsonl", split="train")
    with pytest.raises(FileNotFoundError, match=r"nope.jsonl: no such file; check the --local path"):
        preprocess("aime24", tmp_path, local=tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match=r"--local takes one of \['.jsonl', '.parquet', '.json'\]"):
        preprocess("aime24", tmp_path, local=tmp_path / "rows.csv")


def test_bad_json_line_names_file_and_line(tmp_path):
    local = tmp_path / "aime.json"
    local.write_text('{"problem": "p", "answer": "1"}\n{"problem": "q", "answer": \n')
    with pytest.raises(ValueError, match=r"aime.json:2: not valid JSON"):
        preprocess("aime24", tmp_path / "out", local=local)


# ---- the hub path (load_dataset faked: tests never touch the network) ---------------------------
def test_without_local_every_hub_split_is_loaded(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(hf_id, config, split):
        calls.append((hf_id, config, split))
        return datasets.Dataset.from_list(gsm8k_rows(2 if split == "train" else 1))

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    written = preprocess("gsm8k", tmp_path)
    assert calls == [("openai/gsm8k", "main", "train"), ("openai/gsm8k", "main", "test")]
    assert written == [(tmp_path / "train.parquet", 2), (tmp_path / "test.parquet", 1)]


def test_offline_hub_failure_says_to_pass_local(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")

    def offline(hf_id, config, split):
        raise ConnectionError(f"Couldn't reach '{hf_id}' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    benchmark = BENCHMARKS["aime24"]
    with pytest.raises(ValueError) as error:
        preprocess("aime24", tmp_path)
    message = str(error.value)
    assert f"could not load {benchmark.hf_id} split 'train'" in message  # the hub copy's only split
    assert "pass --local FILE" in message and "'problem' (the question) and 'answer'" in message
