"""The SFT pipeline's table: pretrained -> SFT -> SFT + RL, beside RL from the pretrained model at the same budget.

Read from the pretrained-model section (before_after.py) of a store where `recipezoo leaderboard sft-first` ran:
rows `sft+<recipe>` start from an SFT model (their runs tagged `sft_run` and `sft_base_model_sha256`), rows
`<recipe>` from the pretrained model whose file has that hash. One table per (SFT model, recipe): its stages as
rows, the section's eval columns as columns; a stage trained over several seeds shows its mean ± std (n).
"""

from __future__ import annotations

from core.leaderboard.before_after import BeforeAfter, RecipeRow
from core.leaderboard.export import MODEL_SHA_TAG, SFT_BASE_SHA_TAG, SFT_RUN_TAG
from core.leaderboard.tables import markdown_table

SFT_ROW_PREFIX = "sft+"


def _tag(row: RecipeRow, key: str) -> str | None:
    return next((run.train_run.get("tags", {}).get(key) for run in row.runs if key in run.train_run.get("tags", {})),
                None)


def pipeline_pairs(section: BeforeAfter) -> list[tuple[RecipeRow, RecipeRow | None]]:
    """(the sft+<recipe> row, the <recipe> row from the SFT's base model file, or None while it has no run)."""
    pairs = []
    for row in section.rows:
        if not row.recipe.startswith(SFT_ROW_PREFIX):
            continue
        base_sha, recipe = _tag(row, SFT_BASE_SHA_TAG), row.recipe[len(SFT_ROW_PREFIX):]
        plain = next((other for other in section.rows if other.recipe == recipe and base_sha is not None
                      and _tag(other, MODEL_SHA_TAG) == base_sha), None)
        pairs.append((row, plain))
    return pairs


def _after(row: RecipeRow | None, column) -> str:
    stats = row.after(column) if row is not None else None
    return "—" if stats is None else stats.text()


def _before(section: BeforeAfter, model: str | None, column) -> str:
    value = section.befores.get(model, {}).get(column) if model is not None else None
    return "—" if value is None else f"{value:.3f}"


def render_sft_pipeline(section: BeforeAfter | None) -> list[str]:
    """The pipeline's tables; nothing when the section has no sft+<recipe> row."""
    pairs = pipeline_pairs(section) if section is not None else []
    if not pairs:
        return []
    lines = ["", "## From SFT: pretrained → SFT → SFT + RL, beside RL from the pretrained model", "",
             "Each SFT row's starting point is an SFT run's weights (a model file of their own, its sha256 in the "
             "runs' tags), trained from the pretrained model of the RL row beside it, at the same RL budget (the "
             "sections below state it). *pretrained* and *SFT* are one evaluation each; a trained stage is its "
             "seeds' mean ± std (n)."]
    header = ["stage", *[column.name for column in section.columns]]
    for sft_row, plain in pairs:
        base = plain.model if plain is not None else None
        recipe = sft_row.recipe[len(SFT_ROW_PREFIX):]
        lines += ["", f"### {recipe}: `{base or 'the pretrained model (no run yet)'}` and `{sft_row.model}` "
                      f"(SFT run {_tag(sft_row, SFT_RUN_TAG)})", ""]
        rows = [["pretrained", *[_before(section, base, c) for c in section.columns]],
                ["SFT", *[_before(section, sft_row.model, c) for c in section.columns]],
                [f"SFT + {recipe}", *[_after(sft_row, c) for c in section.columns]],
                [recipe, *[_after(plain, c) for c in section.columns]]]
        lines += markdown_table(header, "l" + "r" * len(section.columns), rows)
    return lines
