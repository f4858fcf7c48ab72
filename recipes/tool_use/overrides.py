"""Print this recipe's tool-use keys as command-line overrides, one per line, for another algorithm's config.

`run_tiny.sh --recipe rloo` trains RLOO with them: config.yaml stays the one place the task is written down.
"""

from pathlib import Path

from omegaconf import OmegaConf

RECIPE_KEYS = ("defaults", "trainer.cls", "tracking.run_name", "tracking.tags.recipe")  # the algorithm's own


def tool_use_overrides() -> list[str]:
    config = OmegaConf.to_container(OmegaConf.load(Path(__file__).with_name("config.yaml")))
    return [f"{key}={_override_value(value)}" for key, value in _flatten(config) if not key.startswith(RECIPE_KEYS)]


def _override_value(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def _flatten(tree: dict, prefix: str = "") -> list[tuple[str, object]]:
    items = []
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        items += _flatten(value, f"{dotted}.") if isinstance(value, dict) else [(dotted, value)]
    return items


if __name__ == "__main__":
    print("\n".join(tool_use_overrides()))
