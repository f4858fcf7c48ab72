"""The config reference: every key of base.yaml with its type, default, valid range and comment, as markdown.

    python -m core.config.reference docs/config.md     # or `-` for stdout

base.yaml's comments are the documentation, so this reads them from the file itself, line by line: a key's
comment is the `# ...` after it, continued by comment-only lines whose `#` sits in the same column, or the
comment-only lines right above it (no blank line between). Types, defaults and ranges come from the same
sources the config check uses (`core/config/schema.py`), so the page states what a run accepts. The
documentation site builds this page on every build (docs/hooks.py), so it never goes stale.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from core.config import CONFIG_DIR
from core.config.schema import KINDS_BEYOND_DEFAULT, RANGES

BASE_YAML = CONFIG_DIR / "base.yaml"
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w-]*):(?P<rest>.*)$")
COMMENT_ONLY = re.compile(r"^(?P<indent> *)#(?P<text>.*)$")
TYPE_NAMES = {bool: "bool", int: "int", float: "number", str: "str", list: "list", dict: "mapping"}


@dataclass
class Entry:
    """One key of base.yaml: `dotted` is its full path, `children` non-empty for a block of keys."""

    dotted: str
    comment: list[str] = field(default_factory=list)
    children: list[Entry] = field(default_factory=list)
    comment_column: int | None = None  # where its inline `#` sits: continuation lines align there


def split_comment(rest: str) -> tuple[str, int | None]:
    """The value text and the column offset of its `#` comment (None if none); a `#` inside quotes is text."""
    quote = None
    for i, char in enumerate(rest):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), i
    return rest.strip(), None


def parse_entries(text: str) -> tuple[list[str], list[Entry]]:
    """(the file's header comment lines, the top-level entries with their nested children)."""
    header: list[str] = []
    roots: list[Entry] = []
    stack: list[tuple[int, Entry]] = []  # (indent, entry) of the open blocks
    pending: list[str] = []  # comment-only lines waiting for the key right below them
    last: Entry | None = None
    for line in text.splitlines():
        if not line.strip():
            if not roots:
                header += pending
            pending, last = [], None  # a blank line ends a comment: it belongs to no key below
            continue
        comment = COMMENT_ONLY.match(line)
        if comment:
            column = len(comment.group("indent"))
            if last is not None and last.comment_column == column:
                last.comment.append(comment.group("text").strip())
            else:
                pending.append(comment.group("text"))
            continue
        match = KEY_LINE.match(line)
        if not match or line.lstrip().startswith("- "):
            continue  # a list item of a block-style list: part of its key's value
        indent = len(match.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else None
        entry = Entry(f"{parent.dotted}.{match.group('key')}" if parent else match.group("key"),
                      comment=[text.strip() for text in pending])
        pending = []
        value, offset = split_comment(match.group("rest"))
        if offset is not None:
            entry.comment = [*entry.comment, match.group("rest")[offset + 1:].strip()]
            entry.comment_column = len(line) - len(match.group("rest")) + offset
        (parent.children if parent else roots).append(entry)
        if not value:
            stack.append((indent, entry))
        last = entry
    return header, roots


def lookup(tree: dict, dotted: str):
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def type_of(dotted: str, default) -> str:
    """The kinds of value the config check accepts for the key (schema.py), else its default's type."""
    kinds = KINDS_BEYOND_DEFAULT.get(dotted)
    if kinds:
        return " or ".join("mapping" if kind == "dict" else kind for kind in kinds)
    return "any" if default is None else TYPE_NAMES.get(type(default), type(default).__name__)


def yaml_text(value) -> str:
    """A default as it is written in base.yaml or an override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True, width=1_000).strip()
    return str(value)


def cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", r"\|")


def render_block(entry: Entry, defaults: dict, level: int) -> list[str]:
    """A heading for the block, its comment, a table of its leaf keys, then its nested blocks."""
    lines = [f"{'#' * level} `{entry.dotted}`", ""]
    if entry.comment:
        lines += [" ".join(entry.comment), ""]
    leaves = [child for child in entry.children if not child.children]
    if leaves:
        lines += ["| key | type | default | valid | what it does |", "|---|---|---|---|---|"]
        for leaf in leaves:
            default = lookup(defaults, leaf.dotted)
            lines.append(f"| `{leaf.dotted}` | {type_of(leaf.dotted, default)} | `{cell(yaml_text(default))}` | "
                         f"{RANGES.get(leaf.dotted, '')} | {cell(' '.join(leaf.comment))} |")
        lines.append("")
    for block in (child for child in entry.children if child.children):
        lines += render_block(block, defaults, level + 1)
    return lines


def render_reference(path: Path = BASE_YAML) -> str:
    text = path.read_text(encoding="utf-8")
    header, roots = parse_entries(text)
    defaults = yaml.safe_load(text)
    lines = ["# Config reference", "",
             "Generated from `core/config/base.yaml` by `python -m core.config.reference` on every build of this "
             "site; do not edit. *type* and *valid* are what the check before a run accepts "
             "(`core/config/schema.py`); a key whose default is null takes what its comment says.", "",
             "```yaml", *(f"#{line}" for line in header), "```", ""]
    for root in roots:
        if root.children:
            lines += render_block(root, defaults, 2)
        else:  # a top-level key that holds a value itself: a block of one
            lines += render_block(Entry(root.dotted, root.comment, [root]), defaults, 2)
    return "\n".join(lines)


def all_entries(entries: list[Entry]):
    for entry in entries:
        yield entry
        yield from all_entries(entry.children)


def uncommented_keys(path: Path = BASE_YAML) -> list[str]:
    """Keys of base.yaml with no comment at all: the reference would show them bare."""
    _, roots = parse_entries(path.read_text(encoding="utf-8"))
    return [entry.dotted for entry in all_entries(roots) if not " ".join(entry.comment).strip()]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m core.config.reference OUT.md   (- for stdout)", file=sys.stderr)
        return 2
    page = render_reference()
    if argv[0] == "-":
        sys.stdout.write(page)
    else:
        Path(argv[0]).write_text(page, encoding="utf-8")
        print(f"wrote {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
