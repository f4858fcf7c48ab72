"""The documentation is checked like code: the site builds with no broken link, its pages render in a real browser,
the commands it marks as runnable on CPU run, the config reference covers every key, and the README's
leaderboard snapshot is the committed leaderboard's."""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from core.config.reference import BASE_YAML, all_entries, parse_entries, render_reference, uncommented_keys
from core.leaderboard import readme_snapshot
from tests.browser import find_chromium

REPO = Path(__file__).resolve().parent.parent
# A marked block: the line `<!-- test: runs on CPU (tests/test_docs.py) -->` right above a ```bash fence.
RUNNABLE = re.compile(r"^<!-- test: runs on CPU \(tests/test_docs\.py\) -->\n```bash\n(?P<body>.*?)^```", re.M | re.S)
COMMAND_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as `mkdocs build --strict` makes it: a broken link, a missing page or a bad anchor fails."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                            capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    return out


def test_the_site_builds_strict_with_every_page(site):
    for page in ["index.html", "getting-started/index.html", "architecture/index.html", "reference/config/index.html",
                 "recipes/rloo/index.html", "results/perf/index.html", "results/perf/train_mfu.png"]:
        assert (site / page).is_file(), f"{page} is missing from the built site"
    recipe = (site / "recipes" / "rloo" / "index.html").read_text(encoding="utf-8")
    assert "recipes/rloo/config.yaml" in recipe and "recipes/rloo/run_tiny.sh" in recipe  # its files, appended


def runnable_blocks() -> list[tuple[str, str]]:
    """(where, command) for each line of each marked block in README.md and docs/."""
    commands = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for match in RUNNABLE.finditer(path.read_text(encoding="utf-8")):
            for line in match["body"].splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    commands.append((str(path.relative_to(REPO)), line.strip()))
    return commands


def test_the_docs_mark_the_commands_a_cpu_runs():
    assert len(runnable_blocks()) >= 3, "docs/ lost its marked CPU examples"


def test_the_docs_cpu_commands_run(tmp_path):
    """Each marked command as written, from the repository root: exit 0. Two at a time (the machine's 2 cores)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}

    def run(where_and_command):
        where, command = where_and_command
        result = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], cwd=REPO, env=env, capture_output=True,
                                text=True, timeout=COMMAND_TIMEOUT_S)
        return where, command, result

    with ThreadPoolExecutor(max_workers=2) as pool:
        for where, command, result in pool.map(run, runnable_blocks()):
            assert result.returncode == 0, f"{where}: `{command}` exited {result.returncode}:\n{result.stdout[-2000:]}" \
                                           f"\n{result.stderr[-2000:]}"


def test_every_base_yaml_key_has_a_comment():
    assert uncommented_keys() == [], "keys of core/config/base.yaml without a comment (the config reference shows " \
                                     "each key's comment): add one after the key or on the line above it"


def test_the_config_reference_lists_every_key_with_its_default():
    page = render_reference()
    _, roots = parse_entries(BASE_YAML.read_text(encoding="utf-8"))
    parsed = {entry.dotted for entry in all_entries(roots) if not entry.children}
    assert parsed == set(leaves(yaml.safe_load(BASE_YAML.read_text(encoding="utf-8"))))  # the parser missed none
    for key in parsed:
        assert f"| `{key}` |" in page
    assert "| `rollout.n` | int | `8` | ≥ 1 | samples per prompt (GRPO group size) |" in page


def leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_comments_continue_on_aligned_lines_and_above_a_key():
    text = ("# header\n\nblock:               # a block\n  key: 1             # first line\n"
            "                     # second line\n  # above the next key\n  other: [a, b]\n  gone: null\n")
    header, roots = parse_entries(text)
    assert header == [" header"] and len(roots) == 1
    assert [(entry.dotted, " ".join(entry.comment)) for entry in all_entries(roots)] == [
        ("block", "a block"), ("block.key", "first line second line"), ("block.other", "above the next key"),
        ("block.gone", "")]


def test_the_readme_leaderboard_snapshot_is_the_committed_leaderboard():
    assert readme_snapshot.main(["--check"]) == 0, "run: python -m core.leaderboard.readme_snapshot"


def test_the_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci_command = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert f"```bash\n{ci_command}\n```" in readme


@pytest.fixture(scope="module")
def browser(site):
    """Headless Chromium (tests/browser.py finds or fetches one), and the built site served on localhost:
    (browser, the site's base URL)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install -e '.[test]'")
    executable, why_not = find_chromium()
    if executable is None:
        pytest.skip(f"{why_not}: the rendered-site check is skipped")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # Chromium's background services would reach for hosts outside this machine; each launch has a fresh profile.
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"]
    try:
        with sync_api.sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=executable, headless=True, args=args)
            yield chromium, f"http://127.0.0.1:{server.server_address[1]}/"
            chromium.close()
    finally:
        server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


# Material draws each diagram into a closed shadow root; opened, the test can read what was drawn.
OPEN_SHADOW_ROOTS = ("const attach = Element.prototype.attachShadow;"
                     "Element.prototype.attachShadow = function (options) {"
                     "  return attach.call(this, {...options, mode: 'open'});"
                     "};")


def open_page(browser, path: str):
    """A new tab on the site's `path`: (the page, its JavaScript errors, every URL it requested)."""
    chromium, base_url = browser
    page = chromium.new_page()
    page.add_init_script(OPEN_SHADOW_ROOTS)
    errors, requested = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requested.append(request.url))
    response = page.goto(base_url + path, wait_until="load")
    assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
    return page, errors, requested


@pytest.mark.parametrize("path, heading, min_rows", [
    ("", "recipezoo", 7),                          # the recipe table and the leaderboard snapshot
    ("reference/config/", "Config reference", 5),  # one table per block of base.yaml
    ("recipes/rloo/", "RLOO", 3),                  # the key table and the generated leaderboard rows
])
def test_pages_render_with_their_tables(browser, path, heading, min_rows):
    page, errors, _ = open_page(browser, path)
    assert page.locator("article h1").first.inner_text().strip().rstrip("¶") == heading
    tables = page.locator("article table")
    assert tables.count() >= 1 and tables.first.is_visible()
    assert page.locator("article table tbody tr").count() >= min_rows
    assert errors == [], f"{path}: JavaScript errors {errors}"


def test_the_architecture_diagram_renders_offline(browser):
    """Mermaid comes from the site itself (docs/assets/javascripts), so the loop draws with no network."""
    page, errors, requested = open_page(browser, "architecture/")
    diagram = page.locator("article .mermaid svg").first
    diagram.wait_for(state="visible", timeout=20_000)
    assert "compute_advantages" in diagram.text_content()
    assert [url for url in requested if not url.startswith(browser[1])] == []
    assert errors == []


def test_the_benchmark_page_shows_the_committed_plots(browser):
    page, _, _ = open_page(browser, "benchmarks/")
    plots = page.locator("article img")
    assert plots.count() >= 5
    widths = plots.evaluate_all("images => images.map(image => image.naturalWidth)")
    assert all(width > 0 for width in widths), f"a plot did not load: natural widths {widths}"
