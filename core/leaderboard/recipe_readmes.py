"""Each recipe README's own leaderboard rows, rewritten by `recipezoo leaderboard report`.

A README holds generated blocks between markers that name the recipes they show: its rows of the GSM8K
table every recipe's recorded baseline comes from (`gsm8k-leaderboard`, results/leaderboard/gsm8k_coder: GSM8K
trained from Qwen2.5-Coder-0.5B-Instruct), of the tiny-task table (`tiny-leaderboard`) and of the tool-use section
(`tool-use-leaderboard`, from the leaderboard that holds tool-use runs):

    <!-- BEGIN gsm8k-leaderboard: grpo drgrpo reinforce_pp -->
    ...generated...
    <!-- END gsm8k-leaderboard -->

Only the text between the markers is rewritten, from the same export as the leaderboard that shows
the rows, so a README row and the leaderboard row are the same numbers.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from core.leaderboard.before_after import BeforeAfter, before_after_cell, row_costs, steps_cell
from core.leaderboard.export import MODEL_SHA_TAG
from core.leaderboard.tables import markdown_table, steps_text
from core.leaderboard.tool_use import ToolUseSection, tool_use_table, validation_interval

BLOCK = re.compile(r"(<!-- BEGIN gsm8k-leaderboard: (?P<recipes>[\w -]+?) -->\n)(?P<body>.*?)"
                   r"(<!-- END gsm8k-leaderboard -->)", re.S)
TINY_BLOCK = re.compile(r"(<!-- BEGIN tiny-leaderboard: (?P<recipes>[\w -]+?) -->\n)(?P<body>.*?)"
                        r"(<!-- END tiny-leaderboard -->)", re.S)
TOOL_USE_BLOCK = re.compile(r"(<!-- BEGIN tool-use-leaderboard: (?P<recipes>[\w -]+?) -->\n)(?P<body>.*?)"
                            r"(<!-- END tool-use-leaderboard -->)", re.S)
DRIVER = "recipezoo leaderboard run"
LORA_ROW = re.compile(r"(?P<variant>\w+)-lora(?P<rank>\d+)")  # lora_row's names, read back
TINY_DRIVER = "python -m bench.leaderboard.tiny_baselines"
BUDGET_FLAGS = (("--steps", "trainer.total_steps"), ("--prompts", "data.train_batch_size"), ("--n", "rollout.n"),
                ("--max-response", "data.max_response_length"), ("--lr", "actor.lr"),
                ("--temperature", "rollout.temperature"), ("--test-freq", "trainer.test_freq"),
                ("--train-reward", "reward.gsm8k_method"),
                ("--format-score", "reward.format_score"))


def lora_row(variant: str, rank: int | None) -> str:
    """A leaderboard row's name: the variant, or `<variant>-lora<rank>` for its LoRA policies (the GSM8K
    driver's --lora-rank), so both sit side by side."""
    return f"{variant}-lora{rank}" if rank else variant


def selection_flags(recipes: list[str]) -> str:
    """The driver's flags for a block's rows: `--recipes grpo drgrpo`, or for LoRA rows (`grpo-lora16`, named
    by the driver's --lora-rank) `--recipes grpo --lora-rank 16`. A block holds one kind, and one rank."""
    lora = [LORA_ROW.fullmatch(recipe) for recipe in recipes]
    if not any(lora):
        return f"--recipes {' '.join(recipes)}"
    ranks = {match.group("rank") for match in lora if match}
    if not all(lora) or len(ranks) > 1:
        raise ValueError(f"gsm8k-leaderboard block {' '.join(recipes)}: LoRA rows of one rank, or full-weight rows only")
    return f"--recipes {' '.join(match.group('variant') for match in lora)} --lora-rank {ranks.pop()}"


def render_block(section: BeforeAfter | None, recipes: list[str], source: str, table: str) -> str:
    """The block's body: the named recipes' rows (before → after over seeds) of the table in folder `table`, and
    the command that reruns them (the table's budget and model when the block has no row yet)."""
    rows = [row for row in (section.rows if section else []) if row.recipe in recipes]
    rerun = f"{DRIVER} {selection_flags(recipes)}"
    budget_rows = rows or (section.rows if section else [])
    rerun += f"{budget_flags(budget_rows)}{model_flags(budget_rows)}" if budget_rows else ""
    rerun += " --eval-before"
    merge = f"recipezoo leaderboard merge outputs/leaderboard --table {table.removeprefix('results/')}"
    if not rows:
        made = f"`{rerun}` makes them" + (f", then `{merge}`" if section else "")
        return f"No runs of {', '.join(f'`{r}`' for r in recipes)} from a pretrained model on GSM8K in the " \
               f"committed export yet; {made}.\n"
    several_models = len({row.model for row in rows}) > 1
    header = ["recipe", "seeds", *[column.name for column in section.columns], "steps"]
    lines = [f"From pretrained `{rows[0].model}` on GSM8K: the rows of `{table}/leaderboard.md`, generated from "
             f"`{source}` by `recipezoo leaderboard report` (do not edit; the budget, the protocol and the other recipes "
             "are there). Each cell is `before → after`, after as mean ± std [95% t-interval] over the seeds.", ""]
    rendered = []
    for row in rows:
        before = section.befores.get(row.model, {})
        rendered.append([f"{row.recipe} ({row.model})" if several_models else row.recipe, len(row.runs),
                         *[before_after_cell(before.get(column), row.after(column), len(row.runs))
                           for column in section.columns], steps_cell(row_costs(row))])
    lines += markdown_table(header, "l" + "r" * (len(header) - 1), rendered)
    lines += ["", f"Rerun: `{rerun}`, then `{merge}`."]
    return "\n".join(lines) + "\n"


def model_flags(rows) -> str:
    """`--model M --model-sha256 H`: the rows' pretrained model and its file's hash (the driver refuses another)."""
    model = Counter(row.model for row in rows).most_common(1)[0][0]
    digests = Counter(member.train_run.get("tags", {}).get(MODEL_SHA_TAG) for row in rows for member in row.runs)
    digest = digests.most_common(1)[0][0]
    return f" --model {model}" + (f" --model-sha256 {digest}" if digest else "")


def budget_flags(rows) -> str:
    """The driver flags that give the rows' budget (each flag's most common value among their runs)."""
    flags = ""
    for flag, param in BUDGET_FLAGS:
        values = Counter(member.train_run["params"].get(param) for row in rows for member in row.runs)
        value = values.most_common(1)[0][0]
        flags += f" {flag} {value}" if value is not None else ""
    return flags


def render_tiny_block(rows: list, tasks: list[str], recipes: list[str], source: str) -> str:
    """The named recipes' rows of the tiny-task table (`core.leaderboard.board.Row`s) and their rerun command."""
    rows = [row for row in rows if row.recipe in recipes]
    if not rows or not tasks:
        return (f"No tiny-task runs of {', '.join(f'`{r}`' for r in recipes)} in the committed export yet; "
                f"`{TINY_DRIVER} --variants {' '.join(recipes)} --seeds 0 1 2` makes them.\n")
    steps = Counter(steps_text(row.steps) for row in rows).most_common(1)[0][0]
    header = ["recipe", *[f"{task} acc{suffix}" for task in tasks for suffix in ("", " at step 0")], "seeds", "steps"]
    lines = [f"The tiny task: the rows of `results/leaderboard/gsm8k_smollm2/leaderboard.md`, generated from `{source}` by "
             "`recipezoo leaderboard report` (do not edit; the protocol and the other recipes are there). Each cell is "
             "mean ± std (n seeds) of the final held-out accuracy; *at step 0* is where the warm-started model began.",
             ""]
    table = []
    for row in rows:
        cells = [row.recipe]
        for task in tasks:
            start = row.start_acc(task)
            cells += [row.cells[task].text() if task in row.cells else "—", "—" if start is None else f"{start:.3f}"]
        table.append([*cells, row.seeds, steps_text(row.steps)])
    lines += markdown_table(header, "l" + "r" * (len(header) - 1), table)
    rerun = f"{TINY_DRIVER} --variants {' '.join(row.recipe for row in rows)} --seeds 0 1 2 --steps {steps} --test-freq 20"
    lines += ["", f"Rerun: `{rerun}`, then `recipezoo leaderboard report` (`results/README.md`)."]
    return "\n".join(lines) + "\n"


def render_tool_use_block(section: ToolUseSection, recipes: list[str], source: str, out: str) -> str:
    """The named recipes' rows of the tool-use section and their rerun command."""
    rows = [row for row in section.rows if row.recipe in recipes]
    rerun = f"{TINY_DRIVER} --variants {' '.join(recipes)} --seeds 0 1 2"
    if not rows:
        return f"No tool-use runs of {', '.join(f'`{r}`' for r in recipes)} in `{source}` yet; `{rerun}` makes them.\n"
    steps = Counter(steps_text(row.steps) for row in rows).most_common(1)[0][0]
    interval = validation_interval(rows)
    rerun += f" --steps {steps}" + (f" --test-freq {interval}" if interval else "")
    lines = [f"The tool-use rows of `{out}/leaderboard.md`, generated from `{source}` by `recipezoo leaderboard report` (do "
             "not edit; the protocol, the wall times and the curves are there). Each cell is `before → after`: before "
             "RL at step 0, after as mean ± std [95% t-interval] over the seeds.", "",
             *tool_use_table(section, rows), "",
             f"Rerun: `{rerun}`, then `recipezoo leaderboard report` into `{out}` (the commands: `{out}/README.md`)."]
    return "\n".join(lines) + "\n"


def update_gsm8k_readmes(section: BeforeAfter | None, recipes_dir: Path, source: str, table: str) -> list[Path]:
    """Rewrite every gsm8k-leaderboard block under `recipes_dir/*/README.md` from the table in folder `table`;
    returns the READMEs that changed."""
    return _rewrite_readmes(recipes_dir, lambda text: BLOCK.sub(
        lambda m: m.group(1) + render_block(section, m.group("recipes").split(), source, table) + m.group(4), text))


def update_tiny_readmes(tiny_rows: list, tiny_tasks: list[str], recipes_dir: Path, source: str) -> list[Path]:
    """Rewrite every tiny-leaderboard block under `recipes_dir/*/README.md`; returns the READMEs that changed."""
    return _rewrite_readmes(recipes_dir, lambda text: TINY_BLOCK.sub(lambda m: m.group(1) + render_tiny_block(
        list(tiny_rows), list(tiny_tasks), m.group("recipes").split(), source) + m.group(4), text))


def update_tool_use_readmes(section: ToolUseSection, recipes_dir: Path, source: str, out: str) -> list[Path]:
    """Rewrite every tool-use-leaderboard block under `recipes_dir/*/README.md`; returns the READMEs that changed."""
    return _rewrite_readmes(recipes_dir, lambda text: TOOL_USE_BLOCK.sub(lambda m: m.group(1) + render_tool_use_block(
        section, m.group("recipes").split(), source, out) + m.group(4), text))


def _rewrite_readmes(recipes_dir: Path, rewrite) -> list[Path]:
    changed = []
    for readme in sorted(Path(recipes_dir).glob("*/README.md")):
        text = readme.read_text(encoding="utf-8")
        updated = rewrite(text)
        if updated != text:
            readme.write_text(updated, encoding="utf-8")
            changed.append(readme)
    return changed
