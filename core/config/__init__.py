"""Load a recipe config: Hydra composition over the base config, strict keys, clear errors."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

CONFIG_DIR = Path(__file__).resolve().parent
RECIPES_DIR = CONFIG_DIR.parent.parent / "recipes"


class ConfigError(ValueError):
    """A config file or override the user must fix."""


def recipe_config_path(recipe: str) -> Path:
    """A recipe name (`grpo`) or a path to a config yaml."""
    path = Path(recipe)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return path.resolve()
    path = RECIPES_DIR / recipe / "config.yaml"
    if not path.is_file():
        known = sorted(p.parent.name for p in RECIPES_DIR.glob("*/config.yaml"))
        raise ConfigError(f"unknown recipe {recipe!r}: choose one of {known} or pass a path to a config .yaml")
    return path


def load_config(recipe: str, overrides: list[str] = ()) -> DictConfig:
    """Compose `recipe` (which lists `base` in its defaults) with command-line overrides; `+presets=NAME`
    among them lays core/config/presets/NAME.yaml over the recipe, below the other overrides."""
    path = recipe_config_path(recipe)
    search_path = f"hydra.searchpath=[file://{CONFIG_DIR},file://{RECIPES_DIR}]"
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base=None):
            cfg = compose(config_name=path.stem, overrides=[search_path, *overrides])
    except ConfigCompositionException as error:
        unknown = unknown_override_message(overrides)
        if unknown:
            raise ConfigError(unknown) from None
        cause = error.__cause__ or error
        raise ConfigError(f"{path}: {cause}. Check the key against core/config/base.yaml") from None
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    check_known_keys(cfg, path, overrides)
    OmegaConf.set_struct(cfg, True)
    return cfg


def unknown_override_message(overrides: list[str]) -> str | None:
    """For the first override whose dotted key base.yaml lacks (or whose preset does not exist): what is wrong
    and the valid keys (or presets)."""
    base = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "base.yaml"))
    for override in overrides:
        dotted = override.split("=", 1)[0].lstrip("+~")
        group = CONFIG_DIR / dotted
        if group.is_dir():  # `+presets=qwen3_8b` picks a file of a config group, not a key
            name = override.split("=", 1)[-1]
            if not (group / f"{name}.yaml").is_file():
                known = sorted(path.stem for path in group.glob("*.yaml"))
                return f"no {dotted}/{name}.yaml for override {override!r}: choose one of {known} (core/config/{dotted}/)"
            continue
        node, parents = base, []
        for part in dotted.split("."):
            if not isinstance(node, dict):
                break  # a key below a plain value: leave the message to Hydra
            if part not in node and not node and parents:  # an open mapping (tracking.tags, rollout.engine_kwargs)
                return (f"{dotted!r} is a new key under {'.'.join(parents)!r}, which takes any: add it with a "
                        f"leading +, '+{override.lstrip('+~')}'")
            if part not in node:
                where = f"under {'.'.join(parents)!r}" if parents else "at the top level"
                return (f"unknown config key {dotted!r} in override {override!r}; valid keys {where}: "
                        f"{sorted(node)} (see core/config/base.yaml)")
            node, parents = node[part], parents + [part]
    return None


def check_known_keys(cfg: DictConfig, path: Path, overrides: list[str] = ()) -> None:
    """Every key must exist in the base config: a typo in a recipe yaml fails, not silently ignored."""
    base = OmegaConf.load(CONFIG_DIR / "base.yaml")
    unknown = _unknown_keys(OmegaConf.to_container(cfg, resolve=False), OmegaConf.to_container(base), "")
    if unknown:
        # A `+key=value` override adds the key past Hydra's check: name the override, not the file.
        from_override = unknown_override_message(overrides)
        if from_override:
            raise ConfigError(from_override)
        raise ConfigError(f"{path}: unknown config key(s) {unknown}; the valid keys are those of core/config/base.yaml")


def _unknown_keys(cfg: dict, base: dict, prefix: str) -> list[str]:
    unknown = []
    for key, value in cfg.items():
        dotted = f"{prefix}{key}"
        if key not in base:
            unknown.append(dotted)
        elif isinstance(value, dict) and isinstance(base[key], dict) and base[key]:  # empty = open (tags)
            unknown += _unknown_keys(value, base[key], dotted + ".")
    return unknown


MISSING = object()  # what `lookup` returns for an absent key


def lookup(tree: dict, dotted: str):
    """`tree["a"]["b"]` for "a.b"; `MISSING` when a level is absent."""
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return MISSING
        tree = tree[part]
    return tree
