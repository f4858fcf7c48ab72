"""An LLM judge's text side: the prompt it reads and the parser that turns its answer into a score.

The template names its inputs by placeholder: `{question}` (the prompt's last user message), `{response}` (the
policy's answer; required) and `{reference}` (the ground truth, "(none)" where a row has none). Literal braces
are doubled, as in `str.format`. The parser reads either a score ("Score: 7", scaled by `max_score` to [0, 1])
or a verdict ("Verdict: correct" → 1, "incorrect" → 0); the last match in the text counts, so a judge that
reasons first and concludes last is read by its conclusion. A text with no match is a parse failure: it
scores `failure_score` and is counted (reward/judge/parse_failures), never a silent 0.
"""

from __future__ import annotations

import re
import string

from core.config import ConfigError

PLACEHOLDERS = ("question", "response", "reference")
PARSERS = ("score", "verdict")
SCORE_PATTERN = re.compile(r"score\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
VERDICT_PATTERN = re.compile(r"verdict\s*[:=]\s*\**\s*(incorrect|correct)\b", re.IGNORECASE)
NO_REFERENCE = "(none)"


def check_template(template: str, key: str = "reward.judge.template") -> None:
    """A ConfigError naming `key` unless `template` is a valid format string with `{response}` and no
    placeholder beyond PLACEHOLDERS."""
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as error:
        raise ConfigError(f"{key}: not a valid template ({error}); write literal braces as {{{{ and }}}}") from None
    unknown = sorted({field for field in fields if field not in PLACEHOLDERS})
    if unknown:
        raise ConfigError(f"{key} has placeholders {unknown}: it may use {{question}}, {{response}}, {{reference}}")
    if "response" not in fields:
        raise ConfigError(f"{key} has no {{response}} placeholder: the judge would never see the answer it grades "
                          f"(its placeholders: {sorted(set(fields)) or 'none'})")


def check_parser(parser: str, max_score: float) -> None:
    if parser not in PARSERS:
        raise ConfigError(f"reward.judge.parser={parser!r}: expected one of {list(PARSERS)}")
    if parser == "score" and not max_score > 0:
        raise ConfigError(f"reward.judge.max_score={max_score:g}: must be > 0 (a score is divided by it)")


def render_prompt(template: str, question: str, response: str, reference) -> str:
    reference = NO_REFERENCE if reference is None or reference == "" else str(reference)
    return template.format(question=question, response=response, reference=reference)


def parse_judgement(text: str, parser: str, max_score: float = 10.0) -> float | None:
    """The judge's score of one response in [0, 1] (a score clipped there), or None when `text` holds none."""
    if parser == "verdict":
        matches = VERDICT_PATTERN.findall(text)
        return None if not matches else float(matches[-1].lower() == "correct")
    matches = SCORE_PATTERN.findall(text)
    if not matches:
        return None
    return min(1.0, max(0.0, float(matches[-1]) / max_score))


def question_text(raw_prompt) -> str:
    """The question a judge is shown: the last user message of a chat prompt, or the prompt string itself."""
    if isinstance(raw_prompt, str):
        return raw_prompt
    users = [message.get("content", "") for message in raw_prompt or [] if message.get("role") == "user"]
    return users[-1] if users else ""
