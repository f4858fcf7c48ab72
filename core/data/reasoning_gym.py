"""`recipezoo data reasoning-gym`: procedural reasoning tasks as verl-schema parquet, with fixed seeds.

    recipezoo data reasoning-gym --tasks basic_arithmetic syllogism --difficulty basic_arithmetic.max_digits=1 \
        --size 2000 --test-size 200 --seed 0 --out data/rg

writes `train.parquet` (every task's rows, interleaved) and `test.parquet` (`--test-size` distinct questions per
task, none of which is ever in train). Each row: data_source `reasoning_gym/<task>`, the task's question plus an
answer-format instruction as the user turn, and as ground truth the generator's entry as JSON, which the
task's own verifier reads (core/reward/reasoning_gym.py). `--difficulty TASK.KEY=VALUE` sets a field of the
task's config dataclass (values read as YAML: `3`, `[+, -]`, `false`); the chosen settings are written into
every row's extra_info, so a table can state them.

After writing it prints two shortcut scores per task. The constant-answer share: the share of its test rows whose
answer is the most common test answer, i.e. what always giving that one answer scores. A task with a tiny answer
set (syllogism: Yes/No) can be "learnt" by RL as a constant; `--max-constant-share 0.1` refuses such a task
before anything is written. The answer-in-the-question share: the share of its test rows whose answer stands in
the question as a whole token (`answer_in_question`), i.e. what copying the right piece of the question can
score. fraction_simplification at the open suite's settings gives 21 of its 100 test fractions already in lowest
terms, so copying the question's fraction scores 0.21. A task that lists its options in the question (syllogism:
"(Answer Yes or No)") gets 1.00 there, and its constant-answer share is the one to read. This share is only
printed; nothing is refused on it. For countdown a third: the share one fixed row of operators solves, put between
the numbers in the order the question lists them (`fixed_operator_shares`; every row above a tenth is printed, the
best at least): adding all three numbers solves 44 of the Coder suite's 100 test problems, adding the two numbers 32
of the open suite's and multiplying them 27, so a policy that settles on one row scores so much without searching
(printed only, as the second). Beside them, the share some row solves (`some_operator_row_share`): 0.84 of the Coder
suite's problems, so only 16 need the numbers reordered. For knights_knaves likewise: the share of one fixed pattern
of knights and knaves in the order the question names the people (`fixed_role_shares`): with two people, "the first
a knight, the second a knave" is the solution of 30 of 100 test problems, so copying the names and role words in that
pattern scores 0.30. For propositional_logic, whose verifier accepts any valid conclusion that is not a tautology,
the share that restating the question's first premise solves (`premise_copy_share`).

Generators come from `reasoning-gym` (`pip install reasoning-gym`; https://github.com/open-thought/reasoning-gym).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import re
from collections import Counter
from pathlib import Path

from core.data.rows import write_rows
from core.reward.reasoning_gym import DATA_SOURCE_PREFIX, compute_score

INSTRUCTION = "Give your final answer inside <answer></answer> tags."
TEST_SEED_OFFSET = 1_000_003  # test problems come from another stream of the generator than train's
POOL_FACTOR = 4               # rows drawn per wanted row before giving up on distinct (test) or unseen (train) ones


class TaskError(ValueError):
    """A task name, difficulty key or size that cannot be generated; the message is the whole error."""


def registered_tasks() -> dict:
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise TaskError("recipezoo data reasoning-gym needs the reasoning-gym package: pip install reasoning-gym") from None
    return DATASETS


def parse_difficulty(items: list[str], tasks: list[str]) -> dict[str, dict]:
    """`TASK.KEY=VALUE` items -> {task: {key: value}}; every key checked against the task's config fields."""
    import yaml

    datasets, settings = registered_tasks(), {task: {} for task in tasks}
    for item in items:
        target, sep, text = item.partition("=")
        task, dot, key = target.partition(".")
        if not sep or not dot or not key:
            raise TaskError(f"--difficulty {item!r}: expected TASK.KEY=VALUE, e.g. basic_arithmetic.max_digits=1")
        if task not in settings:
            raise TaskError(f"--difficulty {item!r}: task {task!r} is not among --tasks {tasks}")
        fields = sorted(f.name for f in dataclasses.fields(datasets[task][1]) if f.name not in ("seed", "size"))
        if key not in fields:
            raise TaskError(f"--difficulty {item!r}: {task} has no difficulty key {key!r}; its keys are {fields}")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or type(error).__name__
            raise TaskError(f"--difficulty {item!r}: {text!r} is not a YAML value ({problem}); quote strings YAML "
                            "reads otherwise, e.g. operators=[+, -, \"*\"]") from None
        settings[task][key] = tuple(value) if isinstance(value, list) else value
    return settings


def check_tasks(tasks: list[str], size: int, test_size: int, max_constant_share: float | None = None) -> None:
    datasets = registered_tasks()
    unknown = [task for task in tasks if task not in datasets]
    if unknown:
        raise TaskError(f"--tasks: unknown reasoning-gym task{'s' if len(unknown) > 1 else ''} {unknown}; "
                        f"the {len(datasets)} tasks are {sorted(datasets)}")
    if not tasks:
        raise TaskError("--tasks: name at least one reasoning-gym task")
    for flag, value in (("--size", size), ("--test-size", test_size)):
        if value < 1:
            raise TaskError(f"{flag}={value}: expected a positive number of rows per task")
    if max_constant_share is not None and not 0 <= max_constant_share <= 1:
        raise TaskError(f"--max-constant-share={max_constant_share}: expected a share between 0 and 1, e.g. 0.1")


def generate(task: str, settings: dict, size: int, seed: int) -> list[dict]:
    """`size` entries of `task` from `seed`; a setting the generator rejects becomes one TaskError line."""
    import reasoning_gym

    try:
        dataset = reasoning_gym.create_dataset(task, size=size, seed=seed, **settings)
        return [dataset[index] for index in range(size)]
    except (AssertionError, ValueError, TypeError, KeyError, IndexError) as error:
        shown = ", ".join(f"{key}={value!r}" for key, value in settings.items()) or "its defaults"
        raise TaskError(f"{task} with {shown}: the generator rejected these settings "
                        f"({type(error).__name__}: {error or 'failed check'})") from None


def to_row(task: str, entry: dict, settings: dict, split: str, index: int, instruction: str) -> dict:
    truth = {"task": task, "question": entry["question"], "answer": entry["answer"], "metadata": entry["metadata"]}
    return {
        "data_source": DATA_SOURCE_PREFIX + task,
        "prompt": [{"role": "user", "content": f"{entry['question'].rstrip()}\n\n{instruction}" if instruction
                    else entry["question"]}],
        "ability": "reasoning",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(truth, default=str, sort_keys=True)},
        "extra_info": {"split": split, "index": index, "task": task,
                       "difficulty": json.dumps(settings, default=str, sort_keys=True)},
    }


def task_rows(task: str, settings: dict, size: int, test_size: int, seed: int,
              instruction: str) -> tuple[list[dict], list[dict]]:
    """(train rows, test rows) of one task. The test questions are drawn first, distinct; training rows are then
    drawn from the rest, so no test question is ever trained on, even where a task has few distinct questions
    (one-digit sums: 200), and training rows may repeat there."""
    test = test_entries(task, settings, test_size, seed)
    held_out = {entry["question"] for entry in test}
    pool = generate(task, settings, size * POOL_FACTOR, seed)
    train = [entry for entry in pool if entry["question"] not in held_out][:size]
    if len(train) < size:
        raise TaskError(f"{task}: only {len(train)} of {len(pool)} training questions drawn are not test questions; "
                        "lower --size or --test-size, or make the task harder (--difficulty)")
    return ([to_row(task, e, settings, "train", i, instruction) for i, e in enumerate(train)],
            [to_row(task, e, settings, "test", i, instruction) for i, e in enumerate(test)])


def test_entries(task: str, settings: dict, test_size: int, seed: int) -> list[dict]:
    """A task's `test_size` distinct test entries, drawn from their own seed (`task_rows` draws training rows
    apart from them)."""
    test = _distinct(generate(task, settings, test_size * POOL_FACTOR, seed + TEST_SEED_OFFSET), test_size, set())
    if len(test) < test_size:
        raise TaskError(f"{task}: only {len(test)} distinct test questions among {test_size * POOL_FACTOR} drawn; "
                        "lower --test-size, or make the task harder (--difficulty)")
    return test


def _distinct(entries: list[dict], count: int, seen: set[str]) -> list[dict]:
    """The first `count` entries whose questions differ from each other and from `seen`."""
    kept = []
    for entry in entries:
        if entry["question"] not in seen:
            seen.add(entry["question"])
            kept.append(entry)
        if len(kept) == count:
            break
    return kept


SMALL_ANSWER_SET = 5  # up to this many distinct test answers, the command lists each one's count


def ground_truths(test_rows: list[dict]) -> list[dict]:
    """Each row's ground truth as to_row wrote it: the question, the answer and the task's metadata."""
    return [json.loads(row["reward_model"]["ground_truth"]) for row in test_rows]


def test_answers(test_rows: list[dict]) -> Counter:
    """How many of `test_rows` have each answer, most common first."""
    return Counter(str(truth["answer"]) for truth in ground_truths(test_rows))


def most_common_share(answers: Counter) -> tuple[str, float]:
    """(most common answer, its share): what a policy that always gives that answer scores.
    On a tie the answer met first is named; the share is the same whichever is."""
    answer, count = answers.most_common(1)[0]
    return answer, count / answers.total()


def constant_answer(test_rows: list[dict]) -> tuple[str, float]:
    """`most_common_share` of the rows' answers."""
    return most_common_share(test_answers(test_rows))


TOKEN_BEFORE = r"(?<![\w/.])"       # a letter, digit, '_', '/' or '.' right before: inside a longer token
TOKEN_AFTER = r"(?!\w|[/.]\w)"      # one after, or a '/' or '.' that goes on into one ("4/9", "4.5", not "4.")


def answer_in_question(answer: str, question: str) -> bool:
    """Whether `answer` (stripped) stands verbatim in `question` as a whole token: the characters around it are not
    letters, digits, '_', '/' or '.', except that a '/' or '.' after it with no letter or digit next (a sentence's
    full stop) ends the token. So "4" is in "Calculate 8 - 4." but not in "14", "4/9", "1/4" or "4.5"; "11/17",
    "-3", "Yes" and "7 + 11" are matched whole ("Yes" not in "Yesterday", "-3" not in "5-3"). Case counts, and an
    empty answer is in no question. A "3" does match inside "-3": the sign is not part of the token."""
    answer = answer.strip()
    return bool(answer) and re.search(TOKEN_BEFORE + re.escape(answer) + TOKEN_AFTER, question) is not None


def answer_in_question_share(test_rows: list[dict]) -> float:
    """The share of `test_rows` whose answer (as `test_answers` counts it) stands in its question as a whole token:
    what a policy that copies the right piece of the question scores."""
    truths = ground_truths(test_rows)
    return sum(answer_in_question(str(truth["answer"]), truth["question"]) for truth in truths) / len(truths)


FIXED_OPERATORS = ("+", "-", "*")
FIXED_SHOWN_ABOVE = 0.1  # the share above which a shortcut is worth a line, as --max-constant-share


def operator_row_value(numbers: list[int], operators: tuple[str, ...]) -> int:
    """`n0 op0 n1 op1 n2 ...` with the usual precedence (products first, then sums left to right)."""
    terms, sign, product = [], 1, numbers[0]
    for operator, number in zip(operators, numbers[1:]):
        if operator == "*":
            product *= number
        else:
            terms.append(sign * product)
            sign, product = (1 if operator == "+" else -1), number
    return sum(terms) + sign * product


def countdown_metadata(test_rows: list[dict]) -> list[dict] | None:
    """Each row's countdown metadata (`numbers`, `target`), or None for rows without it or with different counts
    of numbers (one row of operators cannot fit them all)."""
    metadata = [truth.get("metadata", {}) for truth in ground_truths(test_rows)]
    if not metadata or not all("numbers" in m and "target" in m for m in metadata):
        return None
    return metadata if len({len(m["numbers"]) for m in metadata}) == 1 else None


def operator_rows_solving(metadata: list[dict]) -> dict[tuple[str, ...], list[bool]]:
    """Every row of +, -, * between the numbers in order -> whether it solves each problem."""
    rows = itertools.product(FIXED_OPERATORS, repeat=len(metadata[0]["numbers"]) - 1)
    return {ops: [operator_row_value(m["numbers"], ops) == m["target"] for m in metadata] for ops in rows}


def fixed_operator_shares(test_rows: list[dict]) -> list[tuple[str, float]] | None:
    """(operators, share) for every row of +, -, * between the numbers in the question's order: the share of
    `test_rows` it solves, most first. None where countdown_metadata is None."""
    metadata = countdown_metadata(test_rows)
    if metadata is None:
        return None
    shares = [(" ".join(ops), sum(solved) / len(solved)) for ops, solved in operator_rows_solving(metadata).items()]
    return sorted(shares, key=lambda item: -item[1])


def some_operator_row_share(test_rows: list[dict]) -> float | None:
    """The share of countdown's `test_rows` that some row of +, -, * between the numbers in order solves: the
    problems a policy searching only those rows can answer. None where countdown_metadata is None."""
    metadata = countdown_metadata(test_rows)
    if metadata is None:
        return None
    return sum(map(any, zip(*operator_rows_solving(metadata).values()))) / len(metadata)


def fixed_role_shares(test_rows: list[dict]) -> list[tuple[str, float]] | None:
    """(roles, share) for each pattern of knights and knaves, in the order the question names the people, that is
    the solution of some of `test_rows`, most first. None for rows without knights_knaves' `solution` metadata."""
    metadata = [truth.get("metadata", {}) for truth in ground_truths(test_rows)]
    if not metadata or not all(isinstance(m.get("solution"), list) for m in metadata):
        return None
    patterns = Counter(" ".join("knight" if truthful else "knave" for truthful in m["solution"]) for m in metadata)
    return [(roles, count / len(metadata)) for roles, count in patterns.most_common()]


def premise_copy_share(test_rows: list[dict]) -> float | None:
    """The share of propositional_logic's `test_rows` that answering with the question's first premise solves, as
    the task's own verifier scores it: a premise is a valid conclusion of the premises, and the verifier gives full
    marks to any valid one that is not a tautology. None for rows without `premises` metadata."""
    truths = ground_truths(test_rows)
    if not truths or not all(isinstance(t.get("metadata", {}).get("premises"), list) for t in truths):
        return None
    return sum(compute_score(f"<answer>{t['metadata']['premises'][0]}</answer>", t)["acc"] for t in truths) / len(truths)


FIXED_SHORTCUTS = (("one fixed row of operators between the numbers in order", fixed_operator_shares),
                   ("one fixed pattern of roles in the order the question names the people", fixed_role_shares))


def fixed_shortcut(test_rows: list[dict]) -> tuple[str, list[tuple[str, float]]] | None:
    """(what is fixed, its shares most first) for a task one fixed pattern can answer: countdown, knights_knaves."""
    for label, shares_of in FIXED_SHORTCUTS:
        shares = shares_of(test_rows)
        if shares is not None:
            return label, shares
    return None


def refuse_constant_answer(task: str, answers: Counter, max_constant_share: float | None) -> None:
    """A TaskError naming the task's most common answer and its share when that share is above the limit."""
    answer, share = most_common_share(answers)
    if max_constant_share is not None and share > max_constant_share:
        raise TaskError(f"{task}: {share:.2f} of its {answers.total()} test answers are {answer!r}, above "
                        f"--max-constant-share {max_constant_share} (always answering {answer!r} would score that); "
                        "make the answers more varied (--difficulty) or pick another task")


def write_suite(tasks: list[str], difficulty: list[str], out_dir: str | Path, *, size: int, test_size: int,
                seed: int, instruction: str = INSTRUCTION, max_constant_share: float | None = None,
                ) -> tuple[list[tuple[Path, int]], dict[str, list[dict]]]:
    """Check everything, generate every task, then write train.parquet (interleaved) and test.parquet.
    Returns ((path, rows) per file, {task: its test rows})."""
    check_tasks(tasks, size, test_size, max_constant_share)
    settings = parse_difficulty(difficulty, tasks)
    train, test_by_task = [], {}
    for task in tasks:
        task_train, test_by_task[task] = task_rows(task, settings[task], size, test_size, seed, instruction)
        refuse_constant_answer(task, test_answers(test_by_task[task]), max_constant_share)
        train += task_train
    random.Random(seed).shuffle(train)  # each batch mixes the tasks
    test = [row for rows in test_by_task.values() for row in rows]
    out = Path(out_dir)
    written = [(write_rows(rows, out / f"{split}.parquet"), len(rows)) for split, rows in (("train", train), ("test", test))]
    return written, test_by_task


def answer_share_lines(test_by_task: dict[str, list[dict]]) -> list[str]:
    """One line per task for the command's output: its most common test answer and that answer's share, the
    answer-in-the-question share, and each answer's count where there are few (a task a constant can score on)."""
    lines = []
    for task, rows in test_by_task.items():
        answers = test_answers(rows)
        answer, share = most_common_share(answers)
        line = (f"{task}: constant-answer share {share:.2f} (most common test answer {answer[:40]!r}); "
                f"answer in the question {answer_in_question_share(rows):.2f}")
        fixed = fixed_shortcut(rows)
        if fixed is not None:
            label, shares = fixed
            shown = [shares[0]] + [item for item in shares[1:] if item[1] > FIXED_SHOWN_ABOVE]
            line += f"; {label}: " + ", ".join(f"{pattern!r} {share:.2f}" for pattern, share in shown)
            some = some_operator_row_share(rows)
            line += "" if some is None else f" (some row {some:.2f})"
        premise = premise_copy_share(rows)
        line += "" if premise is None else f"; restating the first premise {premise:.2f}"
        if len(answers) <= SMALL_ANSWER_SET:
            line += f"; its {len(answers)} answers: " + ", ".join(f"{a[:40]} {n}" for a, n in answers.most_common())
        lines.append(line)
    return lines


def write_suite_from_args(args) -> tuple[list[tuple[Path, int]], dict[str, list[dict]]]:
    """`recipezoo data reasoning-gym ...`'s options (core/data/preprocess.py's parser) -> write_suite."""
    return write_suite(args.tasks or [], args.difficulty or [], args.out, size=args.size, test_size=args.test_size,
                       seed=args.seed, instruction=INSTRUCTION if args.instruction is None else args.instruction,
                       max_constant_share=args.max_constant_share)
