"""MkDocs hooks: the pages that live beside docs/ join the site, at their repository paths, without copies.

- README.md is the home page (index.md); each recipes/<name>/README.md is that recipe's page, followed by its
  config files, launchers and trainer as they are in the repository; results/**/*.md and their plots,
  bench/README.md and bench/perf/rerun.md are the benchmark pages.
- reference/config.md is generated from core/config/base.yaml on every build (core/config/reference.py).
- A relative link is read as a path in the repository, from the file that holds it, and pointed at that
  file's page: `../results/perf/README.md` in docs/benchmarks.md and `results/perf/README.md` in README.md
  both reach the same page, so each link works on the repository's file view and in the site alike.
  A link to a file the site does not hold is left as it is, and `mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `mkdocs build` runs from anywhere; the generator is part of the package
    sys.path.insert(0, str(REPO))

MIRRORED = ("recipes/*/README.md", "results/**/*.md", "results/**/*.png", "bench/README.md", "bench/perf/rerun.md")
CONFIG_REFERENCE = "reference/config.md"
LINK = re.compile(r"(?P<head>!?\[[^\]\n]*\]\()(?P<target>[^)\s]+)(?P<tail>(?:\s+\"[^\"]*\")?\))")
FENCE = re.compile(r"^(```|~~~)", re.M)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)
RECIPE_PAGE = re.compile(r"recipes/(?P<name>[^/]+)/README\.md")
LANGUAGES = {".yaml": "yaml", ".sh": "bash", ".py": "python"}
README_TABLE = re.compile(r"<!-- include the table under README\.md's \"(?P<heading>[^\"]+)\" -->")

site_paths: dict[str, str] = {}  # repository path -> the site page or asset made from it, for this build


def on_files(files, config):
    """Add the home page, the mirrored files and the generated config reference."""
    from core.config.reference import render_reference

    docs_dir = Path(config["docs_dir"])
    site_paths.clear()
    site_paths.update({f"{docs_dir.relative_to(REPO).as_posix()}/{file.src_uri}": file.src_uri for file in files})
    if files.get_file_from_path("index.md") is None:
        files.append(File.generated(config, "index.md", abs_src_path=str(REPO / "README.md")))
        site_paths["README.md"] = "index.md"
    for pattern in MIRRORED:
        for path in sorted(REPO.glob(pattern)):
            src_uri = path.relative_to(REPO).as_posix()
            files.append(File.generated(config, src_uri, abs_src_path=str(path)))
            site_paths[src_uri] = src_uri
    files.append(File.generated(config, CONFIG_REFERENCE, content=render_reference()))
    return files


def on_page_markdown(markdown, page, config, files):
    source = repository_path(page.file, Path(config["docs_dir"]))
    markdown = README_TABLE.sub(lambda match: readme_table(match["heading"]), markdown)
    markdown = rewrite_links(markdown, source, page.file.src_uri)
    recipe = RECIPE_PAGE.fullmatch(page.file.src_uri)
    if recipe:
        markdown += recipe_files_section(REPO / "recipes" / recipe.group("name"))
    return markdown


def repository_path(file, docs_dir: Path) -> str:
    """Where a page's text lives in the repository (generated pages count as docs/ files)."""
    if file.abs_src_path and not Path(file.abs_src_path).resolve().is_relative_to(docs_dir.resolve()):
        return Path(file.abs_src_path).resolve().relative_to(REPO).as_posix()
    return f"{docs_dir.relative_to(REPO).as_posix()}/{file.src_uri}"


def rewrite_links(markdown: str, source: str, page_uri: str) -> str:
    """Point each relative link of `markdown` (held by repository file `source`) at its page in the site,
    leaving fenced code alone."""
    inside, out = False, []
    for index, part in enumerate(FENCE.split(markdown)):  # text, fence marker, text, ...: a marker opens or closes
        if index % 2:
            inside = not inside
        elif not inside:
            part = LINK.sub(lambda m: m["head"] + site_link(m["target"], source, page_uri) + m["tail"], part)
        out.append(part)
    return "".join(out)


def site_link(target: str, source: str, page_uri: str) -> str:
    if SCHEME.match(target) or target.startswith(("#", "/")):
        return target
    path, hash_, anchor = target.partition("#")
    in_repository = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    if in_repository not in site_paths:
        return target  # not in the site: --strict names it
    return posixpath.relpath(site_paths[in_repository], posixpath.dirname(page_uri) or ".") + hash_ + anchor


def readme_table(heading: str) -> str:
    """The first table under README.md's `## heading`, so a page shows it without a copy that could drift."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = section.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def recipe_files_section(recipe_dir: Path) -> str:
    """The recipe's configs, launchers and trainer, each folded, read from the repository at build time."""
    configs = sorted(recipe_dir.glob("*.yaml"), key=lambda p: (p.name != "config.yaml", p.name))
    paths = [*configs, *sorted(recipe_dir.glob("run_*.sh")), *sorted(recipe_dir.glob("trainer.py"))]
    lines = ["", "", "## Config, launchers and trainer", "",
             f"The files in `recipes/{recipe_dir.name}/`, as they are in the repository. A config states only its "
             "deltas over the one it inherits (`defaults:`); the [config reference](../../reference/config.md) "
             "has every key.", ""]
    for path in paths:
        code = path.read_text(encoding="utf-8").rstrip("\n")
        lines += [f'??? example "`recipes/{recipe_dir.name}/{path.name}`"', "",
                  f"    ````{LANGUAGES[path.suffix]}", *(f"    {line}" if line else "" for line in code.split("\n")),
                  "    ````", ""]
    return "\n".join(lines)
