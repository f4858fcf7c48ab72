"""Which call of a GPU suite wrote each result file, so that a report compares only columns measured together.

    python -m bench.common.suite_calls --dir results/perf --call ID --newer MARKER      # every json written after MARKER
    python -m bench.common.suite_calls --dir results/perf --call ID FILE [FILE ...]     # these files

A suite re-run for part of its columns (`bench/verl/suite.sh --runs "ours verl"`) leaves the other columns' files
from an earlier call beside the new ones; on the same GPU model the device name cannot tell them apart. The suites
record `{file name: call id}` in DIR/calls.json at their end; bench/verl/report.py and bench/perf/e2e_report.py
leave out a column whose call differs from the one it is compared with. Files written before calls.json existed
have no entry: a report compares two files without entries by their device alone, as it did before.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CALLS_FILE = "calls.json"


def calls(directory: Path) -> dict[str, str]:
    """{file name: call id} of the files a suite recorded in `directory` ({} where none did)."""
    path = Path(directory) / CALLS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def record(directory: Path, call: str, names: list[str]) -> dict[str, str]:
    """Record `names` (files in `directory`) as written by `call`; returns the updated mapping."""
    directory = Path(directory)
    missing = [name for name in names if not (directory / name).is_file()]
    if missing:
        raise FileNotFoundError(f"suite_calls: no such result file in {directory}: {', '.join(missing)}")
    mapping = calls(directory) | {name: call for name in names}
    (directory / CALLS_FILE).write_text(json.dumps(dict(sorted(mapping.items())), indent=1) + "\n")
    return mapping


def same_call(directory: Path, first: str, second: str) -> bool | None:
    """True or False where either file has an entry (a file without one is from another call than one with);
    None where neither has, so that the caller falls back to comparing devices."""
    mapping = calls(directory)
    if first not in mapping and second not in mapping:
        return None
    return mapping.get(first) == mapping.get(second)


def separation(directory: Path, files: tuple[str, str], devices: tuple[str, str]) -> str | None:
    """Why two result files cannot be compared: "call" where calls.json puts them in different calls, "device"
    where neither is recorded and they ran on different GPUs; None where they can (a file that did not record its
    device, "?", is kept: bench/scale/suite.py before 2026-11-26)."""
    together = same_call(directory, *files)
    if together is None:
        return None if "?" in devices or devices[0] == devices[1] else "device"
    return None if together else "call"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="the results folder (e.g. results/perf)")
    parser.add_argument("--call", required=True, help="the suite call's id (its start time and host)")
    parser.add_argument("--newer", type=Path, help="record every *.json in --dir modified after this file")
    parser.add_argument("files", nargs="*", help="file names in --dir")
    args = parser.parse_args(argv)
    if not args.call.strip():
        parser.error("--call: an empty id; give the call's start time and host, e.g. 20261129T093700Z-gpu1")
    names = list(args.files)
    if args.newer is not None:
        if not args.newer.exists():
            parser.error(f"--newer {args.newer}: no such marker file (the suite writes it when it starts)")
        since = args.newer.stat().st_mtime
        names += sorted(path.name for path in args.dir.glob("*.json")
                        if path.name != CALLS_FILE and path.stat().st_mtime > since and path.name not in names)
    if not names:
        print(f"suite_calls: nothing to record in {args.dir}")
        return 0
    try:
        record(args.dir, args.call, names)
    except FileNotFoundError as error:
        parser.error(str(error))
    print(f"suite_calls: {args.call}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
