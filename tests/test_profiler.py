"""`trainer.profile_steps`: the listed steps, and only those, leave a profile report a user can read."""

import pytest

from core.config import ConfigError, load_config
from core.trainer.config_checks import validate_config
from recipes.grpo.trainer import GRPOTrainer


def test_the_profiled_step_writes_its_stages_and_top_operators(fast_overrides, tmp_path):
    overrides = [o for o in fast_overrides if not o.startswith("trainer.total_steps")]
    config = load_config("grpo", overrides + ["trainer.total_steps=2", "trainer.profile_steps=[2]",
                                              "trainer.profile_trace=true"])
    GRPOTrainer(config).fit()
    folder = tmp_path / "out" / "profile"
    assert sorted(p.name for p in folder.iterdir()) == ["step_2_rank0.json.gz", "step_2_rank0.txt"]
    report = (folder / "step_2_rank0.txt").read_text()
    stages = dict(line.split() for line in report.split("\n\n")[0].splitlines()[1:])
    assert set(stages) >= {"gen", "old_log_prob", "update_actor", "step"}
    assert float(stages["step"]) >= float(stages["update_actor"]) > 0
    assert "device busy" not in report  # no device kernels on CPU: the host-time table only
    assert "# top operators by host time" in report and "aten::" in report


@pytest.mark.parametrize("steps", ["[0]", "[1, -2]", "[true]"])
def test_profile_steps_must_be_step_numbers(fast_overrides, steps):
    with pytest.raises(ConfigError, match=r"trainer.profile_steps=.* expected step numbers ≥ 1"):
        validate_config(load_config("grpo", fast_overrides + [f"trainer.profile_steps={steps}"]))
