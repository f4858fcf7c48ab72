import pytest

from core.algos import ADV_ESTIMATORS, AGG_MODES, KL_ESTIMATORS, POLICY_LOSSES, Registry


def test_register_returns_function_and_aliases_resolve_to_it():
    reg = Registry("widget")

    @reg.register("main", "alias")
    def fn():
        return 1

    assert fn() == 1
    assert reg.get("main") is fn
    assert reg.get("alias") is fn
    assert reg.names() == ["alias", "main"]


def test_unknown_name_error_names_kind_and_lists_valid_names():
    with pytest.raises(KeyError, match=r"unknown advantage estimator 'gpro'; choose one of: .*grpo"):
        ADV_ESTIMATORS.get("gpro")


def test_unknown_aggregation_mode_lists_all_modes():
    with pytest.raises(KeyError) as info:
        AGG_MODES.get("token_mean")
    message = str(info.value)
    assert "loss aggregation mode 'token_mean'" in message
    modes = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
    for mode in modes:
        assert mode in message


def test_duplicate_registration_is_refused():
    reg = Registry("widget")
    reg.register("a")(lambda: 0)
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        reg.register("a")(lambda: 1)


def test_builtin_registries_hold_expected_names():
    assert set(KL_ESTIMATORS.names()) == {"k1", "kl", "k2", "mse", "k3", "low_var_kl"}
    assert POLICY_LOSSES.get("vanilla") is POLICY_LOSSES.get("ppo_clip")
    assert "grpo" in ADV_ESTIMATORS
