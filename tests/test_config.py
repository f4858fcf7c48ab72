"""Recipe configs compose over base.yaml, overrides apply, and every typo fails with a message that names it."""

import textwrap

import pytest
from omegaconf import OmegaConf

from core.cli import load_trainer_class, main
from core.config import CONFIG_DIR, ConfigError, load_config


# ---- composition ---------------------------------------------------------------------------------
def test_grpo_recipe_inherits_base_values():
    cfg = load_config("grpo")
    assert cfg.actor.clip_ratio_low == 0.2
    assert cfg.actor.lr == 1e-4
    assert cfg.data.max_response_length == 24
    assert cfg.algorithm.adv_estimator == "grpo"


def test_grpo_recipe_states_its_deltas_over_base():
    base = OmegaConf.load(CONFIG_DIR / "base.yaml")
    assert base.actor.use_kl_loss is False and base.trainer.cls == "core.trainer.base.BaseTrainer"
    cfg = load_config("grpo")
    assert cfg.actor.use_kl_loss is True
    assert cfg.trainer.cls == "recipes.grpo.trainer.GRPOTrainer"
    assert cfg.tracking.run_name == "grpo"


def test_interpolations_resolve_against_the_recipe_values():
    assert load_config("grpo").trainer.output_dir == "outputs/grpo"


def test_overrides_apply_over_the_recipe():
    cfg = load_config("grpo", ["actor.lr=1e-5", "rollout.n=8", "actor.use_kl_loss=false", "data.train_batch_size=64"])
    assert cfg.actor.lr == 1e-5
    assert cfg.rollout.n == 8
    assert cfg.actor.use_kl_loss is False
    assert cfg.data.train_batch_size == 64
    assert cfg.actor.clip_ratio_low == 0.2  # untouched keys keep their values


def test_a_preset_lays_its_keys_over_the_recipe_and_under_the_other_overrides():
    cfg = load_config("rloo", ["+presets=qwen3_8b", "actor.lr=2e-6"])
    assert cfg.model.path == "Qwen/Qwen3-8B" and cfg.rollout.name == "vllm"  # the preset's
    assert cfg.algorithm.adv_estimator == "rloo" and cfg.actor.use_kl_loss is False  # the recipe's, untouched
    assert cfg.actor.lr == 2e-6  # an override after the preset wins
    assert "presets" not in cfg  # `# @package _global_`: its keys sit at the top level


def test_loaded_config_is_struct_so_a_misspelled_read_fails():
    cfg = load_config("grpo")
    with pytest.raises(Exception, match="lrr"):
        cfg.actor.lrr


# ---- unknown keys --------------------------------------------------------------------------------
def test_unknown_override_key_names_the_key_the_override_and_the_valid_keys():
    with pytest.raises(ConfigError) as info:
        load_config("grpo", ["actor.lrr=1"])
    message = str(info.value)
    assert "unknown config key 'actor.lrr'" in message
    assert "in override 'actor.lrr=1'" in message
    assert "valid keys under 'actor'" in message and "'lr'" in message and "'clip_ratio_low'" in message


def test_unknown_override_section_lists_the_top_level_keys():
    with pytest.raises(ConfigError, match=r"unknown config key 'actorr.lr'.*at the top level: \['actor', 'algorithm'"):
        load_config("grpo", ["actorr.lr=1"])


def test_appending_an_unknown_key_with_plus_names_the_override():
    with pytest.raises(ConfigError, match=r"unknown config key 'actor.lrr' in override '\+actor.lrr=1'"):
        load_config("grpo", ["+actor.lrr=1"])


def test_a_typo_beside_a_preset_names_the_typo_not_the_preset():
    with pytest.raises(ConfigError, match=r"unknown config key 'actor.lrr' in override 'actor.lrr=1'"):
        load_config("grpo", ["+presets=qwen3_8b", "actor.lrr=1"])


def test_unknown_preset_names_it_and_lists_the_presets():
    with pytest.raises(ConfigError, match=r"^no presets/qwen3_9b.yaml for override '\+presets=qwen3_9b': "
                                          r"choose one of \[.*'qwen3_8b'.*\] \(core/config/presets/\)$"):
        load_config("grpo", ["+presets=qwen3_9b"])


def test_an_open_mapping_takes_new_keys_with_plus_and_says_so_without():
    cfg = load_config("grpo", ["+rollout.engine_kwargs.attention_backend=triton"])
    assert cfg.rollout.engine_kwargs == {"attention_backend": "triton"}
    with pytest.raises(ConfigError, match=r"'rollout.engine_kwargs.max_num_seqs' is a new key under "
                                          r"'rollout.engine_kwargs'.*'\+rollout.engine_kwargs.max_num_seqs=512'"):
        load_config("grpo", ["rollout.engine_kwargs.max_num_seqs=512"])


def write_user_config(tmp_path, body: str):
    path = tmp_path / "my_recipe.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_user_config_outside_the_package_composes_over_base(tmp_path):
    path = write_user_config(tmp_path, """\
        defaults: [base, _self_]
        rollout: {n: 2}
        """)
    cfg = load_config(str(path), ["actor.lr=3e-6"])
    assert cfg.rollout.n == 2
    assert cfg.actor.lr == 3e-6
    assert cfg.actor.clip_ratio_low == 0.2


def test_typo_in_a_user_config_yaml_names_the_key_and_the_file(tmp_path):
    path = write_user_config(tmp_path, """\
        defaults: [base, _self_]
        actorr: {lr: 1}
        """)
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    assert "'actorr'" in str(info.value)
    assert str(path) in str(info.value)


def test_nested_typo_in_a_user_config_yaml_names_the_dotted_key(tmp_path):
    path = write_user_config(tmp_path, """\
        defaults: [base, _self_]
        actor: {clip_ratio_hi: 0.28}
        """)
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) \['actor.clip_ratio_hi'\]"):
        load_config(str(path))


def test_missing_config_file_says_it_does_not_exist(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "absent.yaml"))


def test_unknown_recipe_lists_the_known_recipes():
    with pytest.raises(ConfigError, match=r"unknown recipe 'nope': choose one of \[.*'grpo'.*\]"):
        load_config("nope")


# ---- command line --------------------------------------------------------------------------------
def test_cli_unknown_recipe_exits_2_with_a_config_error_on_stderr(capsys):
    assert main(["train", "--recipe", "nope"]) == 2
    err = capsys.readouterr().err
    assert "config error" in err
    assert "unknown recipe 'nope'" in err


def test_cli_unknown_override_exits_2_naming_the_key(capsys):
    assert main(["train", "--recipe", "grpo", "actor.lrr=1"]) == 2
    assert "unknown config key 'actor.lrr'" in capsys.readouterr().err


# ---- trainer class -------------------------------------------------------------------------------
TRAINER_FILE = """\
    from __future__ import annotations

    from dataclasses import dataclass


    @dataclass
    class Settings:  # a dataclass needs its module in sys.modules while the file runs
        steps: int = 1


    class MyTrainer:
        settings = Settings()
    """


def test_load_trainer_class_from_a_file_path(tmp_path):
    path = tmp_path / "file_loaded_trainer.py"
    path.write_text(textwrap.dedent(TRAINER_FILE))
    cls = load_trainer_class(f"{path}:MyTrainer")
    assert cls.__name__ == "MyTrainer"
    assert cls.settings.steps == 1


def test_load_trainer_class_missing_class_in_file_names_it_and_lists_the_classes(tmp_path):
    path = tmp_path / "file_missing_class.py"
    path.write_text(textwrap.dedent(TRAINER_FILE))
    with pytest.raises(ConfigError) as info:
        load_trainer_class(f"{path}:MyTrainr")
    message = str(info.value)
    assert "has no class 'MyTrainr'" in message
    assert str(path) in message
    assert "['MyTrainer', 'Settings']" in message


def test_load_trainer_class_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_trainer_class(f"{tmp_path / 'absent.py'}:MyTrainer")


def test_load_trainer_class_missing_class_in_module():
    with pytest.raises(ConfigError, match="core.trainer.base has no class 'Nope'"):
        load_trainer_class("core.trainer.base.Nope")


def test_load_trainer_class_misspelled_module_is_a_config_error():
    with pytest.raises(ConfigError, match="no module 'recipes.grpoo'"):
        load_trainer_class("recipes.grpoo.trainer.GRPOTrainer")


def test_the_shipped_trainer_classes_resolve():
    assert load_trainer_class(load_config("grpo").trainer.cls).__name__ == "GRPOTrainer"
    base = OmegaConf.load(CONFIG_DIR / "base.yaml")
    assert load_trainer_class(base.trainer.cls).__name__ == "BaseTrainer"
