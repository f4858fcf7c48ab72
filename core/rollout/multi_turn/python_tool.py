"""A Python tool for multi-turn rollouts: the model's code runs in a child process with resource limits.

Each `PythonRunner.run(code)` writes `code` to a fresh temp dir and starts a new interpreter on it with
`subprocess.Popen` (vfork + exec: no `preexec_fn`, so no Python runs in a fork of the CUDA process). It is
the trainer's interpreter in isolated mode (`-I`), so installed packages such as numpy import.
What is limited (docs/tool-use.md has the table; `PythonRunner.sandbox` says which mechanism holds each here):
- CPU seconds (`RLIMIT_CPU`, the child gets SIGXCPU), address space (`RLIMIT_AS`, a big allocation raises
  MemoryError) and file size (`RLIMIT_FSIZE`, a big write raises `OSError: File too large`).
- Processes: a pids cgroup of its own with `pids.max = max_processes` where this process may make one (root, with
  cgroup v1's `pids` hierarchy or v2 delegating `pids` at the root): a fork bomb's forks fail with EAGAIN, and
  every process in the cgroup is killed when the call ends, one that left the process group included. Else
  `RLIMIT_NPROC` in a user namespace of its own (the second `unshare` below, a non-root trainer): the kernel
  exempts root from it, and elsewhere it would count all of the user's processes and threads, the trainer's
  included, so the code could not start even one. Else no process limit (only the wall clock).
- Wall clock: at `timeout_s` the whole process group is SIGKILLed, grandchildren included; the group is
  also killed when the code exits, so nothing it started in the background outlives the call.
- File writes (Landlock, Linux >= 5.13, unprivileged): creating, writing, truncating, renaming or removing files
  only beneath the call's temp dir (and writing /dev/null); anything else is `PermissionError`, through `..`, an
  absolute path or a symlink alike. Reads are not limited (installed packages must import).
- Network: the child runs under `unshare --net --pid` (as root or with CAP_SYS_ADMIN) or `unshare
  --map-root-user --net --pid` (unprivileged user namespaces), where it has no network but a down loopback, and
  when the runner kills it, every process in its PID namespace dies. Landlock (Linux >= 6.7) also refuses every
  TCP connect and bind, so without a namespace TCP is still closed, but UDP is not.
- Environment: only PATH, locale, HOME/TMPDIR (the temp dir) and single-threaded BLAS; no tokens, keys or
  CUDA_VISIBLE_DEVICES of the trainer. The temp dir is removed afterwards.
- Output: stdout and stderr go to files (bounded by `RLIMIT_FSIZE`), of which the runner reads at most
  `max_output_chars`, cut in the middle with `[... N characters cut ...]`. At most `max_concurrent` executions
  run at once per runner.
What is not: the code runs as the trainer's user and reads what it may. This is sandboxing against runaway or
careless code, not a security boundary against a determined attacker; run untrusted models' code in a container
or VM. If the trainer itself is killed mid-call, a child that sleeps (uses no CPU) is not cleaned up.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from core.rollout.multi_turn.tools import ToolTimeout

_MB = 1024 * 1024

# Runs as the child's first process: sets the limits, then runs the code in a grandchild. A separate
# process because under `unshare --pid` the first one is PID 1, which the kernel shields from signals it
# has no handler for (SIGXCPU would be ignored); it also turns a killing signal into a line the model sees.
_LAUNCHER = r"""
import ctypes, os, resource, signal, struct, sys
cpu, memory, processes, file_size = (int(a) for a in sys.argv[1:5])
cgroup, writable, script = sys.argv[5:8]
for kind, soft, hard in ((resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_AS, memory, memory),
                         (resource.RLIMIT_NPROC, processes, processes), (resource.RLIMIT_FSIZE, file_size, file_size)):
    if hard < 0:
        continue
    old_hard = resource.getrlimit(kind)[1]
    hard = hard if old_hard == resource.RLIM_INFINITY else min(hard, old_hard)
    resource.setrlimit(kind, (min(soft, hard), hard))
if cgroup != "-":  # the pids cgroup the runner made: this process and all it starts count against pids.max
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
        procs.write("0")
libc = ctypes.CDLL(None, use_errno=True)
abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
if abi >= 1:  # Landlock: creating, changing or removing files only beneath `writable`; TCP connect and bind never
    fs_writes = (1 << 1) | (1 << 4) | (1 << 5) | sum(1 << bit for bit in range(6, 13))
    fs_writes |= (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)
    net = 0b11 if abi >= 4 else 0  # LANDLOCK_ACCESS_NET_BIND_TCP | CONNECT_TCP, with no port allowed
    attr = struct.pack("QQ", fs_writes, net) if abi >= 4 else struct.pack("Q", fs_writes)
    ruleset = libc.syscall(444, attr, len(attr), 0)
    if ruleset < 0:
        sys.exit(f"[sandbox: landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}]")
    rules = [(writable, fs_writes), ("/dev/null", (1 << 1) | (1 << 14 if abi >= 3 else 0))]
    for path, access in rules:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = struct.pack("=Qi", access, fd)
        if libc.syscall(445, ruleset, 1, rule, 0) != 0:  # LANDLOCK_RULE_PATH_BENEATH
            sys.exit(f"[sandbox: landlock_add_rule failed: {os.strerror(ctypes.get_errno())}]")
        os.close(fd)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.syscall(446, ruleset, 0) != 0:  # NO_NEW_PRIVS
        sys.exit(f"[sandbox: landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}]")
pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-u", script], os.environ)
status = os.waitpid(pid, 0)[1]
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    why = {signal.SIGXCPU: f" (CPU time limit of {cpu} s)", signal.SIGXFSZ: " (file size limit)"}.get(sig, "")
    print(f"[the process was killed by {signal.Signals(sig).name}{why}]", file=sys.stderr)
    os._exit(128 + sig)
os._exit(os.WEXITSTATUS(status))
"""

# Tried in order once per process; the first that runs Python is used.
_ISOLATIONS = (
    ("unshare", "--net", "--pid", "--fork", "--kill-child"),
    ("unshare", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"),
)


@dataclass(frozen=True)
class PythonLimits:
    timeout_s: float = 10.0  # wall clock; the whole process group is killed at the deadline
    cpu_s: int = 10  # RLIMIT_CPU
    memory_mb: int = 1024  # RLIMIT_AS
    max_processes: int = 64  # RLIMIT_NPROC, only in a user namespace of the code's own (module docstring)
    max_file_mb: int = 16  # RLIMIT_FSIZE, also the most stdout or stderr the child can write
    max_output_chars: int = 4000  # stdout+stderr returned, cut in the middle with a note of how much was cut
    max_concurrent: int = 4  # executions at once across the threads calling one runner


@dataclass
class PythonResult:
    output: str  # what the model sees: stdout, then stderr (a traceback) — capped
    exit_code: int | None  # None when timed out; 128 + signal when a signal killed the code
    timed_out: bool
    truncated: bool


def _scrubbed_env(home: str) -> dict[str, str]:
    # Single-threaded BLAS: numpy's thread pools would otherwise reserve address space under RLIMIT_AS.
    threads = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "HOME": home, "TMPDIR": home, **threads}


@cache
def _isolation_prefix() -> tuple[str, ...]:
    """The first `unshare` command line that can start Python here, or () when none can."""
    if shutil.which("unshare") is None:
        return ()
    for prefix in _ISOLATIONS:
        try:
            probe = subprocess.run([*prefix, sys.executable, "-I", "-c", "pass"], env=_scrubbed_env("/"),
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return ()


@cache
def _landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 without Landlock (before Linux 5.13, or not enabled)."""
    import ctypes

    return max(0, ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1))


@cache
def _pids_cgroup_parent() -> str | None:
    """A cgroup dir where this process may make a child cgroup with `pids.max` (the v1 pids hierarchy, or a v2
    root that delegates pids), or None."""
    candidates = ["/sys/fs/cgroup/pids"]
    v2_controls = Path("/sys/fs/cgroup/cgroup.subtree_control")
    if v2_controls.exists() and "pids" in v2_controls.read_text().split():
        candidates.append("/sys/fs/cgroup")
    for parent in candidates:
        probe = os.path.join(parent, f"recipezoo-probe-{os.getpid()}")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError:
            continue
        return parent
    return None


def _new_pids_cgroup(max_processes: int) -> str | None:
    parent = _pids_cgroup_parent()
    if parent is None:
        return None
    path = tempfile.mkdtemp(prefix="recipezoo-python-", dir=parent)
    Path(path, "pids.max").write_text(str(max_processes))
    return path


def _kill_and_remove_cgroup(path: str) -> None:
    """SIGKILL every process left in the cgroup (one that left the process group, too), then remove it."""
    deadline = time.monotonic() + 5.0
    while True:
        pids = [int(pid) for pid in Path(path, "cgroup.procs").read_text().split()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(path)
            return
        except OSError:  # busy while the killed processes exit
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)


def _wait_unreaped(pid: int, deadline: float) -> bool:
    """Wait until `pid` exits or the deadline passes, leaving it a zombie: while it is unreaped its pid,
    which is also its process group's id, cannot be reused, so killing the group cannot hit a stranger."""
    delay = 0.001
    while True:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.05)


def _read_capped(paths: list[str], max_chars: int) -> tuple[str, bool]:
    """The files' contents joined, with the middle cut out when longer than `max_chars`.

    Counts bytes (the same as characters for ASCII output) so that only the kept head and tail are read."""
    sizes = [os.path.getsize(path) for path in paths]
    if sum(sizes) <= max_chars:
        text = b"".join(Path(path).read_bytes() for path in paths)
        return text.decode(errors="replace"), False
    keep_head, keep_tail = max_chars // 2, max_chars - max_chars // 2
    head, tail = b"", b""
    for path, size in zip(paths, sizes):
        with open(path, "rb") as file:
            head += file.read(keep_head)
            file.seek(max(0, size - keep_tail))
            tail += file.read(keep_tail)
    # Each file gave its first and last bytes, so the joined ones start and end the joined stream.
    head, tail = head[:keep_head], tail[max(0, len(tail) - keep_tail):]
    cut = sum(sizes) - len(head) - len(tail)
    text = head.decode(errors="replace") + f"\n[... {cut} characters cut ...]\n" + tail.decode(errors="replace")
    return text, True


class PythonRunner:
    """Runs Python code under `limits`; `run` is thread-safe and lets `max_concurrent` calls in at once."""

    def __init__(self, limits: PythonLimits = PythonLimits()):
        self.limits = limits
        self._slots = threading.BoundedSemaphore(limits.max_concurrent)

    @property
    def network_isolated(self) -> bool:
        """Whether the code runs without network (and in its own PID namespace) on this machine."""
        return bool(_isolation_prefix())

    @property
    def sandbox(self) -> dict[str, str]:
        """Which mechanism holds each limit on this machine ("none" where none can): the module docstring's list."""
        isolation, abi = _isolation_prefix(), _landlock_abi()
        processes = ("pids cgroup" if _pids_cgroup_parent() else
                     "RLIMIT_NPROC in a user namespace" if "--map-root-user" in isolation else "none")
        network = ("network namespace" if isolation else "Landlock (TCP only)" if abi >= 4 else "none")
        return {"network": network, "processes": processes, "file_writes": "Landlock" if abi else "none"}

    def run(self, code: str) -> PythonResult:
        with self._slots:
            root = tempfile.mkdtemp(prefix="recipezoo-python-")
            try:
                return self._run_in(root, code)
            finally:
                shutil.rmtree(root, ignore_errors=True)

    def _run_in(self, root: str, code: str) -> PythonResult:
        # The code's working dir is a subdir, so that its own files are all it sees there.
        work, script = os.path.join(root, "work"), os.path.join(root, "main.py")
        out_paths = [os.path.join(root, "stdout"), os.path.join(root, "stderr")]
        os.mkdir(work)
        with open(script, "w", encoding="utf-8") as file:
            file.write(code)
        lim, isolation = self.limits, _isolation_prefix()
        processes = lim.max_processes if "--map-root-user" in isolation else -1  # -1: unset, see the docstring
        limit_args = [str(lim.cpu_s), str(lim.memory_mb * _MB), str(processes), str(lim.max_file_mb * _MB)]
        cgroup = _new_pids_cgroup(lim.max_processes)
        command = [*isolation, sys.executable, "-I", "-c", _LAUNCHER, *limit_args, cgroup or "-", root, script]
        try:
            with open(out_paths[0], "wb") as stdout, open(out_paths[1], "wb") as stderr:
                proc = subprocess.Popen(command, cwd=work, env=_scrubbed_env(work), stdin=subprocess.DEVNULL,
                                        stdout=stdout, stderr=stderr, start_new_session=True)
            try:
                finished = _wait_unreaped(proc.pid, time.monotonic() + lim.timeout_s)
            finally:
                # On time-out, on exit (background children) and on an exception here alike: nothing outlives
                # the call.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        finally:
            if cgroup:
                _kill_and_remove_cgroup(cgroup)
        output, truncated = _read_capped(out_paths, lim.max_output_chars)
        if not finished:
            output += f"\n[timed out after {lim.timeout_s:g} s (the process was killed)]"
        return PythonResult(output=output, exit_code=proc.returncode if finished else None,
                            timed_out=not finished, truncated=truncated)


_default_runner = PythonRunner()


# What a prompt adds for the tool as a tag action (rollout.multi_turn.format=tags): `recipezoo data gsm8k
# --instruction "$(python -c 'from core.rollout.multi_turn.python_tool import TAGS_INSTRUCTION; print(TAGS_INSTRUCTION)')"`.
TAGS_INSTRUCTION = ("To compute, write Python code between <python> and </python> tags, for example "
                    "<python>print(3 * 4)</python>, and you will get what it prints. Then write the final answer "
                    'after "####".')


def python(code: str) -> str:
    """Run Python code and return what it prints.

    Args:
        code: Python source; print the values you need.
    """
    result = _default_runner.run(code)
    if result.timed_out:  # counted in tool/timeouts; the text (what it printed, and why it stopped) is the observation
        raise ToolTimeout(result.output)
    return result.output if result.output.strip() else "(no output: print the values you need)"
