"""The Python tool's sandbox limits, one test per limit, each with code that tries to break it: a fork bomb, 4 GiB,
an endless loop, 50 MB of prints, connections out and to this machine, writes outside the work dir, children left
behind. Each runs with and without namespaces (`isolation`, from test_python_tool.py) where both are possible.

A limit this machine cannot enforce skips its test, saying which mechanism is missing (`PythonRunner.sandbox`); the
fork bomb and the connection to a public address only run where a limit holds them (the bomb checks from inside that
it is in its pids cgroup before it forks), so a missing limit never lets them out.
"""

import os
import socket
import threading
import time

import pytest

from core.rollout.multi_turn.python_tool import PythonLimits, PythonRunner
from tests.test_python_tool import _processes_gone, isolation  # noqa: F401 (fixture)

FAST = PythonLimits(timeout_s=3, cpu_s=5)


def needs(limit: str) -> PythonRunner:
    runner = PythonRunner(FAST)
    if runner.sandbox[limit] == "none":
        pytest.skip(f"no mechanism for the {limit} limit on this machine: {runner.sandbox}")
    return runner


def test_a_fork_bomb_stops_at_the_process_limit(isolation):  # noqa: F811
    runner = needs("processes")
    if runner.sandbox["processes"] != "pids cgroup":
        pytest.skip("the bomb below checks for its pids cgroup; RLIMIT_NPROC is test_python_tool.py's")
    code = """
import os, time
if "recipezoo-python-" not in open("/proc/self/cgroup").read():
    raise SystemExit("not in a pids cgroup: not detonating")
refused = 0
while refused < 200:
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
    except BlockingIOError:
        refused += 1
print("refused", refused, flush=True)
print(os.getcwd())
"""
    result = PythonRunner(PythonLimits(timeout_s=10, max_processes=16)).run(code)
    assert result.output.startswith("refused 200"), result.output
    assert _processes_gone(result.output.splitlines()[1])  # the 15 sleeping children too


def test_allocating_4_gib_raises_memory_error(isolation):  # noqa: F811
    result = PythonRunner(PythonLimits(memory_mb=1024)).run("blob = bytearray(4 * 1024**3)\nprint(len(blob))")
    assert result.exit_code == 1 and result.output.rstrip().endswith("MemoryError")


def test_an_endless_loop_that_sleeps_is_killed_at_the_wall_clock(isolation):  # noqa: F811
    code = "import os, time\nprint(os.getcwd(), flush=True)\nwhile True:\n    time.sleep(0.01)"  # no CPU: no SIGXCPU
    start = time.monotonic()
    result = PythonRunner(PythonLimits(timeout_s=1.5, cpu_s=60)).run(code)
    assert result.timed_out and 1.5 <= time.monotonic() - start < 3.5
    assert result.output.endswith("[timed out after 1.5 s (the process was killed)]")
    assert _processes_gone(result.output.splitlines()[0])


def test_printing_50_mb_returns_a_bounded_head_and_tail_with_the_cut_stated(isolation):  # noqa: F811
    result = PythonRunner(PythonLimits(max_output_chars=1000)).run("print('h' * 25_000_000)\nprint('t' * 25_000_000)")
    assert result.truncated and len(result.output) < 1100
    assert result.output.startswith("h" * 500) and "characters cut ...]" in result.output


def test_no_connection_reaches_a_server_on_this_machine(isolation):  # noqa: F811
    needs("network")
    server = socket.create_server(("127.0.0.1", 0))
    port, accepted = server.getsockname()[1], []
    server.settimeout(4)
    threading.Thread(target=lambda: accepted.append(_accept_one(server)), daemon=True).start()
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
    result = PythonRunner(FAST).run(code)
    server.close()
    assert result.exit_code == 1 and "connected" not in result.output
    assert any(reason in result.output for reason in ("Permission denied", "Network is unreachable",
                                                      "Connection refused"))
    assert accepted in ([], [None])


def _accept_one(server):
    try:
        return server.accept()
    except OSError:
        return None


def test_no_connection_leaves_the_machine(isolation):  # noqa: F811
    runner = needs("network")
    if isolation == "plain" and runner.sandbox["network"] != "Landlock (TCP only)":
        pytest.skip("without a network namespace only Landlock could refuse the connection")
    result = runner.run("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)")
    assert result.exit_code == 1
    assert "Network is unreachable" in result.output or "Permission denied" in result.output


def test_no_write_escapes_the_work_dir(isolation, tmp_path):  # noqa: F811
    needs("file_writes")
    canary = tmp_path / "canary.txt"
    canary.write_text("untouched")
    code = f"""
import os
attempts = {{
    "relative": lambda: open("../../../../../../{canary}", "w").write("x"),
    "absolute": lambda: open("{canary}", "a").write("x"),
    "new file": lambda: open("{tmp_path}/new.txt", "w"),
    "remove": lambda: os.remove("{canary}"),
    "rename": lambda: os.rename("{canary}", "mine.txt"),
    "symlink": lambda: (os.symlink("{canary}", "link"), open("link", "w").write("x")),
    "etc": lambda: open("/etc/passwd", "a"),
    "tmp": lambda: open("/tmp/recipezoo-escape.txt", "w"),
}}
for name, attempt in attempts.items():
    try:
        attempt()
        print(name, "WROTE")
    except PermissionError:
        print(name, "refused")
open("mine.txt", "w").write("own files are fine")
print(open("mine.txt").read())
"""
    result = PythonRunner(FAST).run(code)
    lines = result.output.splitlines()
    assert lines[:8] == [f"{name} refused" for name in ("relative", "absolute", "new file", "remove", "rename",
                                                         "symlink", "etc", "tmp")], result.output
    assert lines[8] == "own files are fine"
    assert canary.read_text() == "untouched" and not (tmp_path / "new.txt").exists()
    assert not os.path.exists("/tmp/recipezoo-escape.txt")


def test_no_child_is_left_behind_even_one_that_left_the_process_group(isolation):  # noqa: F811
    runner = PythonRunner(FAST)
    if isolation == "plain" and runner.sandbox["processes"] != "pids cgroup":
        pytest.skip("without a PID namespace or a pids cgroup a child that calls setsid escapes (documented)")
    code = """
import os, subprocess
subprocess.Popen(["sleep", "60"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    os.execvp("sleep", ["sleep", "60"])
print(os.getcwd())
"""
    result = runner.run(code)
    assert result.exit_code == 0 and _processes_gone(result.output.strip())
