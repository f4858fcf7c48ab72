"""The commit a source archive of recipezoo was made from, for runs started outside a git checkout.

`git archive` (and so GitHub's tarballs and zips) writes the commit into ARCHIVE_COMMIT below, as
.gitattributes marks this file `export-subst`; in a checkout the placeholder stays, and git itself answers.
"""

from __future__ import annotations

ARCHIVE_COMMIT = "$Format:%H$"


def archive_commit() -> str | None:
    """The archive's commit, or None in a checkout (the placeholder unreplaced)."""
    return None if ARCHIVE_COMMIT.startswith("$") else ARCHIVE_COMMIT
