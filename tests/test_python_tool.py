"""The sandboxed Python tool (`core.rollout.multi_turn.python_tool`): limits, kills, isolation, output cap."""

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.rollout.multi_turn import python_tool
from core.rollout.multi_turn.python_tool import PythonLimits, PythonRunner, python
from core.rollout.multi_turn.tools import call_tool

FAST = PythonLimits(timeout_s=1.5, cpu_s=5)


@pytest.fixture(params=["namespaces", "plain"])
def isolation(request, monkeypatch):
    """Runs a test under `unshare` where this machine allows it, and without, as machines that do not."""
    if request.param == "namespaces" and not PythonRunner().network_isolated:
        pytest.skip("`unshare --net --pid` cannot start Python on this machine")
    if request.param == "plain":
        monkeypatch.setattr(python_tool, "_isolation_prefix", lambda: ())
    return request.param


def _processes_in(directory: str) -> list[int]:
    """Pids of the processes whose working dir is `directory` (or was, if it has been removed)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd").startswith(directory):
                pids.append(int(entry))
        except OSError:  # gone meanwhile, or a zombie
            pass
    return pids


def _processes_gone(directory: str, within_s: float = 3.0) -> bool:
    # SIGKILL is asynchronous: a killed process may still be exiting when the runner returns.
    deadline = time.monotonic() + within_s
    while _processes_in(directory):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_process_scan_finds_a_running_process():
    assert os.getpid() in _processes_in(os.getcwd())


def test_prints_and_stdlib_imports_work():
    result = PythonRunner(FAST).run("import math, json\nprint(json.dumps([math.factorial(5)]))")
    assert result == python_tool.PythonResult(output="[120]\n", exit_code=0, timed_out=False, truncated=False)


def test_an_exception_returns_its_traceback_with_the_source_line():
    result = PythonRunner(FAST).run("x = 1\ny = x / 0\n")
    assert result.exit_code == 1 and not result.timed_out
    assert "y = x / 0" in result.output and result.output.rstrip().endswith("ZeroDivisionError: division by zero")


def test_the_timeout_kills_the_whole_process_group(isolation):
    code = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
if os.fork() == 0:
    time.sleep(60)
    os._exit(0)
print(os.getcwd(), flush=True)
while True:
    pass
"""
    start = time.monotonic()
    result = PythonRunner(FAST).run(code)
    assert time.monotonic() - start < FAST.timeout_s + 1.5
    assert result.timed_out and result.exit_code is None
    assert result.output.endswith("[timed out after 1.5 s (the process was killed)]")
    assert _processes_gone(result.output.splitlines()[0])


def test_children_left_running_when_the_code_exits_are_killed(isolation):
    code = 'import os, subprocess; subprocess.Popen(["sleep", "60"]); print(os.getcwd())'
    start = time.monotonic()
    result = PythonRunner(FAST).run(code)
    assert time.monotonic() - start < 1.0 and result.exit_code == 0 and not result.timed_out
    assert _processes_gone(result.output.strip())


def test_the_pid_namespace_kills_a_child_that_left_the_process_group(isolation):
    if isolation == "plain":
        pytest.skip("without a PID namespace a child that calls setsid escapes the group kill (documented)")
    code = 'import os, subprocess; subprocess.Popen(["sleep", "60"], start_new_session=True); print(os.getcwd())'
    assert _processes_gone(PythonRunner(FAST).run(code).output.strip())


def test_the_cpu_limit_kills_a_busy_loop_before_the_timeout():
    result = PythonRunner(PythonLimits(timeout_s=10, cpu_s=1)).run("while True:\n    pass")
    assert not result.timed_out and result.exit_code == 128 + signal.SIGXCPU
    assert "killed by SIGXCPU (CPU time limit of 1 s)" in result.output


def test_allocating_past_the_memory_limit_raises_memory_error():
    result = PythonRunner(PythonLimits(memory_mb=1024)).run("x = bytearray(2 * 1024**3)")
    assert result.exit_code == 1 and result.output.rstrip().endswith("MemoryError")


def test_writing_past_the_file_size_limit_fails():
    result = PythonRunner(PythonLimits(max_file_mb=16)).run("open('big', 'wb').write(b'0' * 100 * 2**20)")
    assert result.exit_code == 1 and "OSError: [Errno 27] File too large" in result.output


def test_output_is_cut_in_the_middle_with_a_note():
    result = PythonRunner(PythonLimits(max_output_chars=20)).run("print('a' * 30 + 'b' * 30)")
    # 61 bytes printed: the first 10 and the last 10 (nine b's and the newline) are kept.
    assert result.output == "a" * 10 + "\n[... 41 characters cut ...]\n" + "b" * 9 + "\n"
    assert result.truncated


def test_a_huge_print_stays_bounded_and_keeps_the_traceback():
    result = PythonRunner(PythonLimits(max_output_chars=4000)).run("print('x' * 10**8)")
    assert result.truncated and len(result.output) < 4100
    assert result.output.startswith("x" * 100) and "File too large" in result.output[-300:]


def test_the_process_limit_binds_in_a_user_namespace():
    if "--map-root-user" not in python_tool._isolation_prefix():
        pytest.skip("RLIMIT_NPROC is set only in a user namespace of the code's own (non-root trainer)")
    code = """
import subprocess
children = []
try:
    for _ in range(20):
        children.append(subprocess.Popen(["sleep", "5"]))
except OSError as error:
    print(error.errno)
"""
    assert PythonRunner(PythonLimits(max_processes=8)).run(code).output == "11\n"  # EAGAIN


def test_the_environment_is_scrubbed_and_home_is_the_temp_dir(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    code = "import os; e = os.environ; print(e.get('SECRET_TOKEN'), e.get('CUDA_VISIBLE_DEVICES'), os.getcwd() == e['HOME'])"
    assert PythonRunner(FAST).run(code).output == "None None True\n"


def test_the_temp_dir_is_removed_afterwards():
    result = PythonRunner(FAST).run("import os; open('notes.txt', 'w').write('hi'); print(os.getcwd(), os.listdir('.'))")
    directory, listing = result.output.split(" ", 1)
    assert listing.strip() == "['notes.txt']" and not os.path.exists(directory)


def test_no_network_when_isolated():
    runner = PythonRunner(FAST)
    if not runner.network_isolated:
        pytest.skip("no network namespace on this machine: `unshare --net` cannot start Python here")
    result = runner.run("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)")
    # Landlock refuses the connect before the namespace's missing route would (test_python_sandbox.py)
    assert result.exit_code == 1 and ("Network is unreachable" in result.output or "Permission denied" in result.output)


def test_at_most_max_concurrent_executions_run_at_once():
    runner = PythonRunner(PythonLimits(max_concurrent=2))
    code = "import time; start = time.time(); time.sleep(0.5); print(start, time.time())"
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(runner.run, [code] * 4))
    assert time.monotonic() - started >= 1.0  # two rounds of two
    intervals = [tuple(map(float, result.output.split())) for result in outputs]
    most_at_once = max(sum(a <= t < b for a, b in intervals) for t, _ in intervals)
    assert most_at_once <= 2


def test_the_tool_function_has_a_json_schema():
    from transformers.utils import get_json_schema

    schema = get_json_schema(python)["function"]
    assert schema["name"] == "python" and schema["description"] == "Run Python code and return what it prints."
    assert schema["parameters"]["properties"]["code"]["type"] == "string"
    assert schema["parameters"]["required"] == ["code"]


def test_the_tool_function_returns_tracebacks_and_raises_a_counted_timeout(monkeypatch):
    monkeypatch.setattr(python_tool, "_default_runner", PythonRunner(PythonLimits(timeout_s=1)))
    assert python("print(6 * 7)") == "42\n"
    assert "ZeroDivisionError" in python("1 / 0")
    assert python("x = 1") == "(no output: print the values you need)"
    observation, status = call_tool({"python": python}, "python", {"code": "import time; time.sleep(5)"})
    assert status == "timeout" and observation.endswith("[timed out after 1 s (the process was killed)]")
