"""The task suites bench/leaderboard/driver.py trains and evaluates on (`--suite NAME`).

A suite names its training and held-out files under --data-dir, how the missing ones are made, the eval sets
of the before → after table, the MLflow experiment and where --merge writes its results.

- `gsm8k`: GSM8K train/test (the mission's baseline), as the committed GSM8K section.
- `reasoning-gym`: SUITE_TASKS from reasoning-gym at the difficulties below, chosen so that SmolLM2-135M-Instruct
  starts between 5% and 50% on each (results/leaderboard/reasoning_gym/leaderboard.md gives the measured starts);
  GSM8K, MATH-500 and AIME24 stay as columns, evaluated as in the GSM8K section.
- `reasoning-gym-open`: OPEN_SUITE_TASKS, reasoning-gym tasks with open answers (no answer is more than 10% of a
  task's test problems), the same budget and eval sets; results/leaderboard/reasoning_gym_open/candidates/README.md says why.
- `reasoning-gym-coder`: CODER_SUITE_TASKS, open-answer tasks at settings where Qwen2.5-Coder-0.5B-Instruct starts
  between 5% and 50% on each (the stronger model's suite; SmolLM2-135M starts near 0 on most of them).
- `tool-arithmetic`: arithmetic where the tool decides the answer (core/data/tool_arithmetic.py), every recipe
  trained twice, with the sandboxed Python tool (rollout.multi_turn) and single-turn, on the same problems
  (bench/leaderboard/tool_modes.py); its table joins results/tool_use/leaderboard.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core.data.tool_arithmetic import INSTRUCTION as TOOL_INSTRUCTION

# (name, file under --data-dir, samples per prompt, temperature, top-p, max new tokens, GSM8K graders).
# GSM8K is scored by both graders (a 135M model often ends without `#### N`); the MATH sources use
# math_verify whatever the grader flag says, reasoning-gym tasks their own verifier. AIME24 is sampled:
# greedy on 30 problems says little.
BASELINE_EVAL_SETS = (
    ("gsm8k", "gsm8k/test.parquet", 1, 0.0, 1.0, 512, ("strict", "flexible", "math_verify")),
    ("math500", "math500/test.parquet", 1, 0.0, 1.0, 1024, ("strict",)),
    ("aime24", "aime24/test.parquet", 16, 0.6, 0.95, 1024, ("strict",)),
)
# The GSM8K suite adds AIME 2025 (verl's and SimpleRL-Zoo's tables report both years).
GSM8K_EVAL_SETS = (*BASELINE_EVAL_SETS, ("aime25", "aime25/test.parquet", 16, 0.6, 0.95, 1024, ("strict",)))
BASELINE_DATA = {"gsm8k": ("train", "test"), "math500": ("test",), "aime24": ("test",), "aime25": ("test",)}

# reasoning-gym: (task, difficulty settings) where SmolLM2-135M-Instruct starts between 5% and 47% (the `before`
# figures of results/leaderboard/reasoning_gym/leaderboard.md, 100 test problems a task). Arithmetic, number theory,
# dates, logic, string algorithms and a game; no algebra: at simple_equations' easiest settings the model restates the
# equation instead of solving it, so it starts near 0.
SUITE_TASKS = (
    ("basic_arithmetic", ("max_digits=1", "max_terms=2", "operators=[+, -]", "allow_negation=false",
                          "allow_parentheses=false")),
    ("chain_sum", ("min_terms=2", "max_terms=2", "min_digits=1", "max_digits=2")),
    ("gcd", ("max_value=20",)),
    ("calendar_arithmetic", ()),
    ("syllogism", ()),
    ("isomorphic_strings", ()),
    ("mahjong_puzzle", ("min_num_rounds=5", "max_num_rounds=12")),
)

# reasoning-gym-open: tasks whose answers are open (numbers, fractions, expressions), so that no single answer is more
# than 10% of a task's 100 test problems (`--max-constant-share 0.1`): in the suite above syllogism is "Yes" 66 times,
# isomorphic_strings "False" 54, mahjong_puzzle "Chi" 43, and its runs learn that constant. Arithmetic, algebra
# (simple_equations), logic (aiw) and a game (countdown) at their easiest settings with open answers; even there
# SmolLM2-135M-Instruct starts below 5% on those three and on leg_counting
# (results/leaderboard/reasoning_gym_open/candidates), and bench/leaderboard/task_screen.py finds only one of
# reasoning-gym's tasks in that band at their easiest levels.
OPEN_SUITE_TASKS = (
    ("basic_arithmetic", ("max_digits=2", "max_terms=2", "operators=[+, -]", "allow_negation=false",
                          "allow_parentheses=false")),
    ("products", ("min_digits=1", "max_digits=2")),
    ("leg_counting", ("min_animals=1", "max_animals=2", "max_instances=5")),
    ("fraction_simplification", ("max_value=20", "max_factor=5", "styles=[plain]")),
    ("simple_equations", ("min_terms=2", "max_terms=2", "max_value=30", "operators=[+, -]", "operators_weights=[0.5, 0.5]")),
    ("aiw", ("max_entities=20",)),
    ("countdown", ("min_numbers=2", "max_numbers=2", "max_value=20", "min_target=1", "max_target=100")),
)

# reasoning-gym-coder: the settings of results/leaderboard/reasoning_gym_open/candidates/coder-hard-screen.md, where
# Qwen2.5-Coder-0.5B-Instruct started at 0.10-0.44 greedy on each task's 100 test problems (vLLM CPU, fp32), no answer
# above 10% of them. Arithmetic, algebra and a game; no logic task: the Coder starts at 0 on knights_knaves, aiw's easier
# settings give one answer to a quarter or more of their problems and its harder ones start at 0, and the other logic
# tasks fail the screen's shortcut or size checks (candidates/README.md, candidates/screen-*.md).
CODER_SUITE_TASKS = (
    ("basic_arithmetic", ("min_terms=3", "max_terms=3", "max_digits=2", "operators=[+, -]", "allow_negation=false",
                          "allow_parentheses=false")),
    ("products", ("min_digits=2", "max_digits=2")),
    ("fraction_simplification", ("max_value=20", "max_factor=10", "styles=[plain]")),
    ("decimal_chain_sum", ("min_terms=2", "max_terms=2", "max_digits=2", "max_decimal_places=2")),
    ("simple_equations", ("min_terms=3", "max_terms=3", "max_value=30", "operators=[+, -]", "operators_weights=[0.5, 0.5]")),
    ("complex_arithmetic", ("operations=[+, -]", "operations_weights=[0.5, 0.5]")),
    ("countdown", ("min_numbers=3", "max_numbers=3", "max_value=10", "min_target=1", "max_target=30",
                   "operators=[+, -]")),
)
SUITE_TRAIN_ROWS, SUITE_TEST_ROWS, SUITE_SEED = 500, 100, 0

# tool-arithmetic: one set of problems (the same seed: the same rows in the same order) written three times, each
# with the instruction of the rollout that reads it. Single-turn: only the answer format, as a run without a tool
# would be told. The tool's prompts say to use it; in the chat format the template shows the tool's schema, in the
# tags format the prompt says how to call it. The default digits (4-6, core/data/tool_arithmetic.py) put even the
# smallest product past what Qwen2.5-Coder-0.5B-Instruct computes in its head (docs/tool-use.md says how).
TOOL_ARITHMETIC_TRAIN_ROWS, TOOL_ARITHMETIC_TEST_ROWS, TOOL_ARITHMETIC_SEED = 2000, 200, 0
NO_TOOL_INSTRUCTION = "Put the exact integer result, digits only, within \\boxed{}."
TAGS_TOOL_INSTRUCTION = (f"{TOOL_INSTRUCTION} To compute, write Python code between <python> and </python> tags, for "
                         "example <python>print(3 * 4)</python>, and you will get what it prints.")
TOOL_ARITHMETIC_FOLDERS = {  # rollout -> (folder under --data-dir, the prompts' instruction)
    "single": ("tool_arithmetic_plain", NO_TOOL_INSTRUCTION),
    "chat": ("tool_arithmetic", TOOL_INSTRUCTION),
    "tags": ("tool_arithmetic_tags", TAGS_TOOL_INSTRUCTION),
}


@dataclass(frozen=True)
class Suite:
    name: str
    experiment: str
    train_file: str            # under --data-dir
    val_file: str              # validated during training (the curves)
    eval_sets: tuple           # BASELINE_EVAL_SETS' shape
    results_dir: str           # under results/: --merge writes runs.json, README.md and leaderboard.md here
    own_leaderboard: bool      # False: the table also holds the tiny tasks' sections (board.TINY_EXPORT beside it)
    max_response: int          # the suite's default data.max_response_length
    max_prompt: int            # its default data.max_prompt_length
    tasks: tuple = ()          # reasoning-gym (task, settings) pairs, SUITE_TASKS' shape: train_file's folder holds them
    max_constant_share: float | None = None  # `recipezoo data reasoning-gym --max-constant-share`
    # A tool suite's data folders: rollout (single, chat, tags) -> (folder, instruction), TOOL_ARITHMETIC_FOLDERS'
    # shape. Each recipe then trains with the tool and single-turn (tool_modes.py).
    tool_folders: dict = field(default_factory=dict)
    board_dir: str | None = None   # under results/: where --merge writes the leaderboard, when not results_dir
    board_exports: tuple = ()      # under results/: further exports that table is built from

    def data_commands(self, data_dir: str, local_data: str | None) -> list[tuple[str, list[str]]]:
        """(parquet that must exist, `recipezoo` argv that makes it) for every file the suite reads."""
        commands = []
        read = [self.train_file, *(file for _, file, *_ in self.eval_sets)]
        for name, splits in BASELINE_DATA.items():
            if not any(file.startswith(f"{name}/") for file in read):
                continue
            for split in splits if self.train_file.startswith(f"{name}/") else ("test",):  # train: only what trains
                argv = ["data", name, "--out", f"{data_dir}/{name}", "--split", split]
                argv += ["--local", f"{local_data}/{name}/{split}.jsonl"] if local_data else []
                commands.append((f"{data_dir}/{name}/{split}.parquet", argv))
        if self.tasks:
            commands.append((f"{data_dir}/{self.train_file}", self.reasoning_gym_argv(data_dir)))
        for folder, instruction in self.tool_folders.values():  # both splits, one command a folder
            commands.append((f"{data_dir}/{folder}/train.parquet", [
                "data", "tool-arithmetic", "--out", f"{data_dir}/{folder}", "--size", str(TOOL_ARITHMETIC_TRAIN_ROWS),
                "--test-size", str(TOOL_ARITHMETIC_TEST_ROWS), "--seed", str(TOOL_ARITHMETIC_SEED),
                "--instruction", instruction]))
        return commands

    def reasoning_gym_argv(self, data_dir: str) -> list[str]:
        """`recipezoo data reasoning-gym` writing the suite's tasks into train_file's folder."""
        folder = self.train_file.rpartition("/")[0]
        argv = ["data", "reasoning-gym", "--out", f"{data_dir}/{folder}", "--tasks", *[task for task, _ in self.tasks],
                "--size", str(SUITE_TRAIN_ROWS), "--test-size", str(SUITE_TEST_ROWS), "--seed", str(SUITE_SEED)]
        if self.max_constant_share is not None:
            argv += ["--max-constant-share", str(self.max_constant_share)]
        settings = [f"{task}.{setting}" for task, task_settings in self.tasks for setting in task_settings]
        return argv + (["--difficulty", *settings] if settings else [])


def reasoning_gym_suite(name: str, folder: str, tasks: tuple, max_constant_share: float | None = None) -> Suite:
    """A suite trained and validated on reasoning-gym tasks written to --data-dir/<folder>, with GSM8K, MATH-500
    and AIME24 as further eval sets, its own MLflow experiment and results/leaderboard/<folder>/leaderboard.md."""
    val_file = f"{folder}/test.parquet"
    return Suite(name, f"{name}-leaderboard", f"{folder}/train.parquet", val_file,
                 ((folder, val_file, 1, 0.0, 1.0, 256, ("strict",)), *BASELINE_EVAL_SETS), f"leaderboard/{folder}", True,
                 256, 512,
                 tasks=tasks, max_constant_share=max_constant_share)


SUITES = {
    "gsm8k": Suite("gsm8k", "gsm8k-leaderboard", "gsm8k/train.parquet", "gsm8k/test.parquet", GSM8K_EVAL_SETS,
                   "leaderboard/gsm8k_smollm2", False, 384, 320),
    "reasoning-gym": reasoning_gym_suite("reasoning-gym", "reasoning_gym", SUITE_TASKS),
    "reasoning-gym-open": reasoning_gym_suite("reasoning-gym-open", "reasoning_gym_open", OPEN_SUITE_TASKS,
                                              max_constant_share=0.1),
    "reasoning-gym-coder": reasoning_gym_suite("reasoning-gym-coder", "reasoning_gym_coder", CODER_SUITE_TASKS,
                                               max_constant_share=0.1),
    # Held out: every test problem, greedy, under the training runs' response limit (512 tokens: every turn and
    # tool reply of an episode), so the pretrained evaluations are the runs' step 0 (step_zero.py).
    "tool-arithmetic": Suite(
        "tool-arithmetic", "tool-arithmetic-leaderboard", "tool_arithmetic_plain/train.parquet",
        "tool_arithmetic_plain/test.parquet",
        (("tool_arithmetic", "tool_arithmetic_plain/test.parquet", 1, 0.0, 1.0, 512, ("math_verify",)),),
        "tool_use/tool_arithmetic", True, 512, 768, tool_folders=TOOL_ARITHMETIC_FOLDERS, board_dir="tool_use",
        board_exports=("tool_use/runs.json",)),
}


def eval_prompt_length(model_path: str, data: Path, suite: Suite, floor: int = 1024) -> int:
    """The eval sets' prompt limit: `floor`, raised to the next multiple of 256 if a prompt is longer, so
    every problem is evaluated (the limit is in each eval run's protocol)."""
    from core.data.dataset import PromptDataset
    from core.models.loading import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    files = [str(data / file) for _, file, *_ in suite.eval_sets]
    longest = max(len(item.prompt_ids) for item in PromptDataset(files, tokenizer, max_prompt_length=1 << 20).items)
    return max(floor, -(-longest // 256) * 256)


def context_length(model_path: str) -> int:
    """The model's longest sequence (config.json max_position_embeddings): the engine cannot go past it."""
    import json

    config = Path(model_path) / "config.json"
    return int(json.loads(config.read_text()).get("max_position_embeddings") or 1 << 30) if config.is_file() else 1 << 30
