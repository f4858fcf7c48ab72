"""`recipezoo preference-pairs --responses FILE`: pairs from scored responses, and a set that gives no pair named
in one line with the reasons, on hand-made `recipezoo generate` output (no model)."""

from core.cli import main
from core.data.rows import read_rows, write_rows


def generated(path, answers_per_prompt):
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"What is {n}+{n}?"}],
             "reward_model": {"ground_truth": str(2 * n), "style": "rule"}, "responses": answers}
            for n, answers in enumerate(answers_per_prompt, start=1)]
    return str(write_rows(rows, path))


def test_a_right_and_a_wrong_response_make_a_pair(tmp_path):
    responses = generated(tmp_path / "gen.parquet", [["#### 2", "#### 3"], ["#### 4", "#### 4"]])
    assert main(["preference-pairs", "--responses", responses, "--out", str(tmp_path / "pairs.parquet")]) == 0
    [pair] = read_rows(tmp_path / "pairs.parquet")
    assert (pair["chosen"], pair["rejected"], pair["ground_truth"]) == ("#### 2", "#### 3", "2")


def test_responses_that_are_all_right_give_no_pair_and_say_why(tmp_path, capsys):
    responses = generated(tmp_path / "gen.parquet", [["#### 2", "#### 2"], ["#### 4", "#### 4"]])
    assert main(["preference-pairs", "--responses", responses, "--out", str(tmp_path / "pairs.parquet")]) == 1
    error = capsys.readouterr().err
    assert "no prompt of 2 had both a right and a wrong response (2 all right" in error, error
    assert not (tmp_path / "pairs.parquet").exists()
