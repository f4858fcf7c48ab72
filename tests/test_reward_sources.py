"""The reward model's pieces on their own: the judge's template and parser (planted judge texts), the mixing
weights, preference data, the reward head read at the last token, and the scalar-head check."""

import copy
import json

import pytest
import torch
from omegaconf import OmegaConf

from core.batch import Batch
from core.config import ConfigError
from core.data.preference import PAIR_KEY, load_pairs, pair_batch, split_held_out
from core.data.rows import DataError, write_rows
from core.engine.distributed import init_distributed
from core.engine.fsdp import FSDPEngine
from core.engine.reward_head import last_token
from core.models.reward_model import check_scalar_head, load_reward_model
from core.models.tiny import build_tiny_tokenizer
from core.reward.judge import check_template, parse_judgement, question_text, render_prompt
from core.reward.mixing import mix_scores, source_weights


# ---- the judge's text side ---------------------------------------------------------------------
@pytest.mark.parametrize("text, parser, expected", [
    ("The answer is right.\nScore: 7", "score", 0.7),
    ("Score: 2 at first... on reflection, Score = 9.5", "score", 0.95),  # the last match counts
    ("score: **12**", "score", 1.0),  # clipped to [0, 1]
    ("Verdict: correct", "verdict", 1.0),
    ("verdict: Incorrect, the sum is off", "verdict", 0.0),
    ("I think it is fine", "score", None),
    ("Score: seven", "score", None),
    ("Verdict: maybe", "verdict", None),
])
def test_parse_judgement_reads_the_last_score_or_verdict(text, parser, expected):
    parsed = parse_judgement(text, parser, max_score=10.0)
    assert parsed == (None if expected is None else pytest.approx(expected))


def test_render_prompt_fills_the_placeholders_and_marks_a_missing_reference():
    template = "Q: {question}\nR: {response}\nRef: {reference}\n{{literal}}"
    assert render_prompt(template, "1+1?", "#### 2", "2") == "Q: 1+1?\nR: #### 2\nRef: 2\n{literal}"
    assert render_prompt(template, "q", "r", None).endswith("Ref: (none)\n{literal}")


def test_question_text_is_the_last_user_message():
    assert question_text([{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 2+2?"}]) \
        == "What is 2+2?"
    assert question_text("plain prompt") == "plain prompt"


@pytest.mark.parametrize("template, message", [
    ("Grade this: {question}", "has no {response} placeholder"),
    ("{response} {answer}", "has placeholders ['answer']"),
    ("{response} {", "not a valid template"),
])
def test_a_bad_judge_template_is_one_line_naming_the_key(template, message):
    with pytest.raises(ConfigError, match="reward.judge.template") as error:
        check_template(template)
    assert message in str(error.value) and "\n" not in str(error.value)


# ---- mixing --------------------------------------------------------------------------------------
def reward_cfg(model_path=None, judge_on=False, **weights):
    return OmegaConf.create({"model": {"path": model_path}, "judge": {"enable": judge_on},
                             "weights": {"rule": 1.0, "model": 0.0, "judge": 0.0, **weights}})


def test_mix_scores_is_the_weighted_sum_of_the_sources():
    weights = source_weights(reward_cfg("rm-dir", judge_on=True, rule=1.0, model=0.5, judge=2.0))
    mixed = mix_scores({"rule": torch.tensor([1.0, 0.0]), "model": torch.tensor([0.4, -2.0]),
                        "judge": torch.tensor([0.5, 0.25])}, weights)
    assert mixed.tolist() == pytest.approx([1.0 + 0.2 + 1.0, 0.0 - 1.0 + 0.5])


@pytest.mark.parametrize("cfg, message", [
    (reward_cfg(model=0.5), "reward.weights.model=0.5 but reward.model.path is off"),
    (reward_cfg("rm-dir"), "reward.model.path is set but reward.weights.model=0"),
    (reward_cfg(judge_on=True), "reward.judge.enable is set but reward.weights.judge=0"),
    (reward_cfg(rule=0.0), "reward.weights are all 0"),
    (reward_cfg(rule=-1.0), "reward.weights.rule=-1: a weight must be ≥ 0"),
])
def test_weights_that_do_not_match_the_sources_are_refused(cfg, message):
    with pytest.raises(ConfigError, match="reward") as error:
        source_weights(cfg)
    assert message in str(error.value)


# ---- preference data -----------------------------------------------------------------------------
def test_preference_rows_of_strings_and_of_chat_messages_tokenize_alike(tmp_path):
    tokenizer = build_tiny_tokenizer()
    write_rows([{"prompt": "What is 2+3?", "chosen": "#### 5", "rejected": "#### 6"}], tmp_path / "strings.jsonl")
    write_rows([{"chosen": [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "#### 5"}],
                 "rejected": [{"role": "user", "content": "What is 2+3?"},
                              {"role": "assistant", "content": "#### 6"}]}], tmp_path / "chat.jsonl")
    (strings,), _ = load_pairs([str(tmp_path / "strings.jsonl")], tokenizer, max_length=64)
    (chat,), _ = load_pairs([str(tmp_path / "chat.jsonl")], tokenizer, max_length=64)
    assert strings.chosen_ids == chat.chosen_ids and strings.rejected_ids == chat.rejected_ids
    # The answer ends on the EOS a rollout stops at: the token the reward model is read at.
    assert strings.chosen_ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(strings.chosen_ids[-7:-1]) == "#### 5"


def test_pairs_left_out_are_counted_and_a_row_without_rejected_is_an_error(tmp_path):
    tokenizer = build_tiny_tokenizer()
    write_rows([{"prompt": "1+1?", "chosen": "#### 2", "rejected": "#### 3"},
                {"prompt": "1+1?", "chosen": "#### 2" * 30, "rejected": "#### 3"},
                {"prompt": "2+2?", "chosen": "#### 4", "rejected": "#### 4"}], tmp_path / "p.jsonl")
    pairs, left_out = load_pairs([str(tmp_path / "p.jsonl")], tokenizer, max_length=64)
    assert len(pairs) == 1
    assert left_out == ["1 pairs longer than 64 tokens (raise --max-length)",
                        "1 pairs whose chosen and rejected are the same"]
    write_rows([{"prompt": "1+1?", "chosen": "#### 2"}], tmp_path / "bad.jsonl")
    with pytest.raises(DataError, match=r"bad.jsonl: row 0 has no \['rejected'\]"):
        load_pairs([str(tmp_path / "bad.jsonl")], tokenizer, max_length=64)


def test_held_out_split_is_by_prompt(tmp_path):
    tokenizer = build_tiny_tokenizer()
    write_rows([{"prompt": f"{a}+1?", "chosen": f"#### {a + 1}", "rejected": f"#### {a + c}"}
                for a in range(10) for c in (2, 3)], tmp_path / "p.jsonl")
    pairs, _ = load_pairs([str(tmp_path / "p.jsonl")], tokenizer, max_length=64)
    train, held = split_held_out(pairs, 0.3, seed=0)
    assert len(held) == 6 and len(train) == 14
    assert not {p.prompt_key for p in train} & {p.prompt_key for p in held}


# ---- the reward head -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_reward_model(random_model_dir):
    torch.manual_seed(0)
    model = load_reward_model(random_model_dir, fresh_head=True)
    torch.nn.init.normal_(model.score.weight)  # a head that is not all zeros, so scores differ
    return model


def test_a_reward_score_is_read_at_the_last_token_whatever_the_padding(tiny_reward_model):
    engine = FSDPEngine(copy.deepcopy(tiny_reward_model), init_distributed("cpu"), head="reward", mixed_precision="fp32")
    ids = [[3, 4, 5, 6, 2], [7, 8, 2]]
    batch = pair_batch_from(ids, pad=0)
    alone = [engine.compute_scores(pair_batch_from([row], pad=0)) for row in ids]
    assert engine.compute_scores(batch).tolist() == pytest.approx(torch.cat(alone).tolist(), abs=1e-5)
    assert last_token(batch["attention_mask"]).tolist() == [4, 4]
    assert alone[0].item() != pytest.approx(alone[1].item())


def pair_batch_from(rows, pad):
    from core.data.dataset import left_padded

    input_ids, attention_mask = left_padded(rows, pad)
    return Batch({"input_ids": input_ids, "attention_mask": attention_mask,
                  "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0)})


def test_a_token_budget_keeps_each_pair_in_one_micro_batch(tiny_reward_model):
    engine = FSDPEngine(copy.deepcopy(tiny_reward_model), init_distributed("cpu"), head="reward", micro_batch_tokens=12,
                        mixed_precision="fp32")
    tokenizer = build_tiny_tokenizer()
    from core.data.preference import PreferencePair

    pairs = [PreferencePair(str(i), tokenizer.encode("a" * (3 + i)), tokenizer.encode("b" * (2 + i))) for i in range(4)]
    batch = pair_batch(pairs, tokenizer.pad_token_id)
    groups = engine._micro_batches(batch)
    assert len(groups) > 1
    for group in groups:
        assert [batch[PAIR_KEY][row].item() for row in group] == [1, 0] * (len(group) // 2)
        assert all(group[i + 1] == group[i] + 1 for i in range(0, len(group), 2))


# ---- the scalar-head check -------------------------------------------------------------------------
def test_a_reward_model_whose_head_is_not_scalar_is_one_line(tmp_path, random_model_dir):
    config = {
        "architectures": ["Qwen3ForSequenceClassification"], "id2label": {"0": "bad", "1": "good", "2": "great"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"reward.model.path='.*': its head has 3 outputs"):
        check_scalar_head(str(tmp_path))
    with pytest.raises(ConfigError, match="is a language model \\(Qwen3ForCausalLM\\), not a reward model"):
        check_scalar_head(random_model_dir)
    with pytest.raises(ConfigError, match="is a language model"):  # the load checks the same, before any weight
        load_reward_model(random_model_dir)
