"""Custom reward functions loaded from a file: verl's signature, clear errors naming what to fix."""

import pickle
import textwrap

import numpy as np
import pytest
from omegaconf import OmegaConf

from core.config import CONFIG_DIR
from core.reward.build import build_reward_manager
from core.reward.custom import CustomFunction, CustomFunctionError, load_custom_function
from core.reward.manager import RewardManager
from tests.test_reward_manager import TOKENIZER, rollout_batch

SCORER_FILE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    bonus = (extra_info or {}).get("bonus", 0.0)
    return {"score": float(solution_str == ground_truth) + bonus, "acc": solution_str == ground_truth,
            "source": data_source}

def _helper():
    pass

def other(data_source, solution_str, ground_truth, extra_info=None):
    return 0.5

THRESHOLD = 3
'''


def write(tmp_path, text, name="my_reward.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def reward_cfg(**overrides):
    cfg = OmegaConf.load(CONFIG_DIR / "base.yaml").reward
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def test_loads_the_named_function(tmp_path):
    fn = load_custom_function(write(tmp_path, SCORER_FILE), "other")
    assert fn("any", "a", "b") == 0.5


def test_missing_file_names_the_config_key(tmp_path):
    with pytest.raises(CustomFunctionError, match=r"reward\.custom_function\.path=.*nope\.py: no such file"):
        load_custom_function(str(tmp_path / "nope.py"), "compute_score")


def test_syntax_error_names_the_file_the_line_and_the_key(tmp_path):
    path = write(tmp_path, "def compute_score(data_source, solution_str, ground_truth):\n    return (1\n\nx = 2\n")
    with pytest.raises(CustomFunctionError) as error:
        load_custom_function(path, "compute_score")
    message = str(error.value)
    assert "reward.custom_function.path" in message and path in message
    assert "syntax error at line 2" in message


def test_import_error_inside_the_file_is_reported(tmp_path):
    path = write(tmp_path, "import no_such_module_xyz\n")
    with pytest.raises(CustomFunctionError, match="ModuleNotFoundError.*no_such_module_xyz"):
        load_custom_function(path, "compute_score")


def test_unknown_name_lists_the_functions_the_file_defines(tmp_path):
    path = write(tmp_path, SCORER_FILE)
    with pytest.raises(CustomFunctionError, match=r"'score_fn'.*it defines compute_score, other\. "
                                                  r"Set reward\.custom_function\.name"):
        load_custom_function(path, "score_fn")


def test_a_name_that_is_not_callable_says_what_it_is(tmp_path):
    with pytest.raises(CustomFunctionError, match="'THRESHOLD' is of type int, not a function"):
        load_custom_function(write(tmp_path, SCORER_FILE), "THRESHOLD")


def test_custom_function_pickles_as_path_and_name(tmp_path):
    custom = CustomFunction(write(tmp_path, SCORER_FILE), "other")
    assert pickle.loads(pickle.dumps(custom)) == custom
    assert custom("src", "a", "b") == 0.5


def test_custom_function_scores_every_data_source_with_verls_signature(tmp_path):
    manager = RewardManager(TOKENIZER, custom_scorer=CustomFunction(write(tmp_path, SCORER_FILE), "compute_score"))
    # gsm8k rows too: a configured custom function replaces the built-in scorers, as in verl.
    batch = rollout_batch(["#### 3", "abc", "xyz"], ["openai/gsm8k", "mine", "aime24"], ["3", "abc", "q"])
    batch.non_tensors["extra_info"] = np.array([{}, {"bonus": 0.5}, {}], dtype=object)
    _, info = manager(batch)
    assert info["score"] == [0.0, 1.5, 0.0]  # "#### 3" != "3": the custom rule, not gsm8k's
    assert info["acc"] == [0.0, 1.0, 0.0]
    assert info["error"] == [None, None, None]


def test_a_raising_custom_function_scores_zero_with_its_error(tmp_path):
    path = write(tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                           "    return 1 / int(solution_str)\n")
    manager = RewardManager(TOKENIZER, custom_scorer=CustomFunction(path, "compute_score"))
    _, info = manager(rollout_batch(["1", "0", "4"], ["x"] * 3, ["", "", ""]))
    assert info["score"] == [1.0, 0.0, 0.25]
    assert info["error"][0] is None and info["error"][1].startswith("ZeroDivisionError")


def test_build_reward_manager_loads_the_configured_file(tmp_path):
    path = write(tmp_path, SCORER_FILE)
    manager = build_reward_manager(reward_cfg(**{"custom_function.path": path, "custom_function.name": "other"}),
                                   TOKENIZER)
    _, info = manager(rollout_batch(["#### 1"], ["openai/gsm8k"], ["1"]))
    assert info["score"] == [0.5]


def test_build_reward_manager_fails_at_start_on_a_broken_file(tmp_path):
    path = write(tmp_path, "def compute_score(:\n")
    with pytest.raises(CustomFunctionError, match="syntax error at line 1"):
        build_reward_manager(reward_cfg(**{"custom_function.path": path}), TOKENIZER)
