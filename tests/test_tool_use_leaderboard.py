"""The leaderboard's tool-use section (before -> after RL over seeds, with the tool-call rate), from a synthetic
export with hand-computed numbers; the recipe README block that shows its rows, and the committed one."""

from __future__ import annotations

import json
import math
from pathlib import Path

from core.leaderboard.board import build_leaderboard, write_leaderboard
from core.leaderboard.export import TOOL_CALL_RATE_KEY, TOOL_TURNS_KEY, load_export
from core.leaderboard.recipe_readmes import TOOL_USE_BLOCK, render_tool_use_block, update_tool_use_readmes
from core.leaderboard.tool_use import after, before

REPO = Path(__file__).resolve().parent.parent
ACC = "val/calculator/acc"
PARAMS = {"data.val_files": "embedded://calculator", "data.val_max_samples": "128", "rollout.val_n": "1",
          "rollout.val_temperature": "0.0", "rollout.top_p": "1.0"}


def tool_run(recipe: str, seed: int, acc: float) -> dict:
    """A run whose policy learned to call the tool in every held-out episode (5% at step 0), in 2 turns."""
    history = {ACC: [[0, 0.0], [10, acc / 2], [20, acc]], TOOL_CALL_RATE_KEY: [[0, 0.05], [10, 0.5], [20, 1.0]],
               TOOL_TURNS_KEY: [[0, 1.05], [10, 1.5], [20, 2.0]], "critic/score/mean": [[1, 0.0], [20, acc]]}
    return {"run_id": f"{recipe}{seed}", "recipe": recipe, "model": "embedded://tiny-calc", "seed": seed, "steps": 20,
            "wall_seconds": 60.0, "generated_tokens": 1000, "params": PARAMS, "tags": {},
            "final": {key: points[-1][1] for key, points in history.items() if key.startswith("val/")},
            "history": history}


EXPORT = {"schema": 1, "experiment": "tiny-tool-use",
          "runs": [tool_run("tool_use_grpo", seed, acc) for seed, acc in enumerate((0.90, 0.95, 1.00))]}


def test_section_is_before_at_step_0_and_after_over_the_seeds():
    section = build_leaderboard(EXPORT).tool_use
    assert [title for _, title in section.columns] == ["calculator acc", "tool-call rate", "turns per episode"]
    row = section.rows[0]
    assert before(row, ACC) == 0.0 and math.isclose(before(row, TOOL_CALL_RATE_KEY), 0.05)
    stats = after(row, ACC)  # mean 0.95, std 0.05, half-width 4.303 · 0.05 / √3 = 0.1242
    assert math.isclose(stats.mean, 0.95) and math.isclose(stats.std, 0.05)
    assert math.isclose(stats.interval[0], 0.95 - 4.303 * 0.05 / math.sqrt(3))


def test_markdown_json_and_curves_show_the_tool_use_rows(tmp_path):
    write_leaderboard(EXPORT, tmp_path, export_path="results/tool_use/runs.json")
    md = (tmp_path / "leaderboard.md").read_text()
    assert ("| tool_use_grpo | embedded://tiny-calc | 3 | 0.000 → 0.950 ± 0.050 [0.826, 1.074] ↑ | "
            "0.050 → 1.000 ± 0.000 [1.000, 1.000] ↑ | 1.050 → 2.000 ± 0.000 [2.000, 2.000] ↑ | 20 |") in md
    assert "| grader | gsm8k strict `#### N` |" in md and "(n = 3: t = 4.303)" in md
    record = json.loads((tmp_path / "leaderboard.json").read_text())["tool_use"][0]
    assert record[ACC]["before"] == 0.0 and record[ACC]["after"]["ci95"] == [0.825783, 1.074217]
    assert record[TOOL_CALL_RATE_KEY]["after"]["values"] == [1.0, 1.0, 1.0]
    assert (tmp_path / "curves_calculator.png").stat().st_size > 10_000


def test_an_export_without_tool_runs_has_no_section():
    runs = [{**run, "final": {ACC: run["final"][ACC]}} for run in EXPORT["runs"]]
    assert build_leaderboard({**EXPORT, "runs": runs}).tool_use is None


def test_readme_block_shows_the_rows_and_reruns_at_their_budget(tmp_path):
    readme = tmp_path / "tool_use" / "README.md"
    readme.parent.mkdir()
    readme.write_text("# Tool use\n\n<!-- BEGIN tool-use-leaderboard: tool_use_grpo -->\nold\n"
                      "<!-- END tool-use-leaderboard -->\n\nafter\n")
    section = build_leaderboard(EXPORT).tool_use
    assert update_tool_use_readmes(section, tmp_path, "results/tool_use/runs.json", "results/tool_use") == [readme]
    text = readme.read_text()
    assert "| tool_use_grpo | embedded://tiny-calc | 3 | 0.000 → 0.950 ± 0.050 [0.826, 1.074] ↑ |" in text
    assert ("Rerun: `python -m bench.leaderboard.tiny_baselines --variants tool_use_grpo --seeds 0 1 2 --steps 20 "
            "--test-freq 10`") in text
    assert text.endswith("<!-- END tool-use-leaderboard -->\n\nafter\n")
    assert update_tool_use_readmes(section, tmp_path, "results/tool_use/runs.json", "results/tool_use") == []


def test_committed_recipe_readme_shows_the_committed_tool_use_rows():
    board_dir = "results/tool_use"
    source = json.loads((REPO / board_dir / "leaderboard.json").read_text())["source"]
    section = build_leaderboard(load_export(REPO / source)).tool_use
    blocks = [match for readme in sorted((REPO / "recipes").glob("*/README.md"))
              for match in TOOL_USE_BLOCK.finditer(readme.read_text())]
    assert sorted(recipe for match in blocks for recipe in match.group("recipes").split()) == sorted(
        row.recipe for row in section.rows)  # every tool-use row is in one README
    for match in blocks:
        assert match.group("body") == render_tool_use_block(section, match.group("recipes").split(), source, board_dir)
