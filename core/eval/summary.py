"""Per-data-source accuracy figures of scored samples: the one summary that `recipezoo eval` and
validation during training both report, so the two can never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from core.eval.passk import ks_for, pass_at_k


@dataclass
class PromptResult:
    """The n scored samples of one prompt."""

    data_source: str
    accs: list[float] = field(default_factory=list)  # 1.0 correct, 0.0 wrong (the grader's verdict)
    scores: list[float] = field(default_factory=list)  # the reward (may differ from acc, e.g. format_score)


def summarize(results: list[PromptResult]) -> dict[str, dict[str, float]]:
    """{data_source: {"mean@n", "pass@k" for k = 1, 2, 4 … n, "score", "num_prompts", "num_samples"}},
    plus "all" over every prompt when there is more than one data source.

    mean@n is the accuracy averaged over all n samples of every prompt; with n = 1 it is the
    accuracy. pass@k is unbiased (`pass_at_k`) and averaged over prompts.
    """
    by_source: dict[str, list[PromptResult]] = defaultdict(list)
    for result in results:
        by_source[result.data_source].append(result)
    summary = {source: _summarize_group(group) for source, group in sorted(by_source.items())}
    if len(by_source) > 1:
        summary["all"] = _summarize_group(results)
    return summary


def _summarize_group(results: list[PromptResult]) -> dict[str, float]:
    sizes = {len(r.accs) for r in results}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"every prompt needs the same number of scored samples (>0), got sizes {sorted(sizes)}")
    n = sizes.pop()
    samples = [acc for r in results for acc in r.accs]
    figures = {f"mean@{n}": sum(samples) / len(samples)}
    for k in ks_for(n):
        figures[f"pass@{k}"] = sum(pass_at_k(n, _num_correct(r), k) for r in results) / len(results)
    figures["score"] = sum(s for r in results for s in r.scores) / len(samples)
    figures["num_prompts"] = float(len(results))
    figures["num_samples"] = float(len(samples))
    return figures


def _num_correct(result: PromptResult) -> int:
    return sum(1 for acc in result.accs if acc >= 0.5)  # acc is a 0/1 verdict; 0.5 guards float noise
