"""The host's memory while the leaderboard's jobs run: the heartbeat shows it, and a job killed by SIGKILL from
outside the driver (no exception in its log) is reported with the lowest reading, since the kernel's OOM killer
ends a process that way when the host runs out of memory. Linux only (/proc/meminfo); elsewhere it reads nothing."""

from __future__ import annotations

import signal
from pathlib import Path

MEMINFO = Path("/proc/meminfo")
GIB_IN_KIB = 1 << 20


def read_meminfo(path: Path = MEMINFO) -> tuple[float, float] | None:
    """(available, total) host memory in GiB, from MemAvailable and MemTotal; None where the file is missing."""
    if not path.is_file():
        return None
    fields = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("MemAvailable", "MemTotal"):
            fields[name] = int(value.split()[0]) / GIB_IN_KIB  # the file counts kB (KiB)
    if len(fields) < 2:
        return None
    return fields["MemAvailable"], fields["MemTotal"]


class HostMemory:
    """The latest and the lowest available host memory of the readings taken with `sample`."""

    def __init__(self, path: Path = MEMINFO):
        self.path, self.latest, self.lowest, self.total = path, None, None, None

    def sample(self) -> None:
        reading = read_meminfo(self.path)
        if reading is None:
            return
        self.latest, self.total = reading
        self.lowest = self.latest if self.lowest is None else min(self.lowest, self.latest)

    def text(self) -> str:
        """`host memory free 180 of 251 GiB`, or "" without a reading."""
        return "" if self.latest is None else f"host memory free {self.latest:.0f} of {self.total:.0f} GiB"

    def killed_reason(self, exit_code: int | None, stopped_by_driver: bool) -> str | None:
        """Why a job ended by SIGKILL the driver did not send, as far as the driver can tell; None otherwise."""
        if exit_code != -signal.SIGKILL or stopped_by_driver:
            return None
        low = "" if self.lowest is None else (f"; the host's available memory fell to {self.lowest:.1f} of "
                                              f"{self.total:.0f} GiB during this invocation")
        return ("killed by SIGKILL from outside the driver, no exception in its log (the kernel's OOM killer "
                f"ends a process so when the host runs out of memory{low})")
