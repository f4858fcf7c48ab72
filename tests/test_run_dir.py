"""Two runs pointed at one output dir: the second refuses to start, naming the dir, the lock and the owner's pid."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli import main as cli_main
from core.trainer.run_dir import LOCK_NAME, RunDirError, acquire_lock, claimed_run_dirs, release_lock

REPO = Path(__file__).resolve().parent.parent
HOLD_LOCK = """
import sys, time
from core.trainer.run_dir import claimed_run_dirs
with claimed_run_dirs(sys.argv[1], sys.argv[1] + "/checkpoints", True):
    print("locked", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def first_run(tmp_path):
    """Another process that holds `tmp_path/out` as a run does."""
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    yield out, holder.pid
    holder.kill()
    holder.wait()


def test_a_second_run_on_the_same_output_dir_refuses_to_start(first_run, capsys):
    out, pid = first_run  # the second run stops before it builds a model: the embedded default is never made
    code = cli_main(["train", "--recipe", "grpo", "tracking.backends=[console]", f"trainer.output_dir={out}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"recipezoo: trainer.output_dir={out} is in use by another run (pid {pid} on " in err
    assert f"lock file {out / LOCK_NAME}" in err and "Traceback" not in err


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text(f"{dead.pid} {socket.gethostname()}\n")
    lock = acquire_lock(out)
    assert f"left by pid {dead.pid}, which is no longer running" in capsys.readouterr().out
    assert lock.read_text().split()[0] == str(os.getpid())
    release_lock(lock)
    assert not lock.exists()


def test_a_lock_of_another_host_is_not_taken(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text("1 some-other-node\n")
    with pytest.raises(RunDirError, match="in use by another run \\(pid 1 on some-other-node"):
        acquire_lock(out)


def test_the_lock_is_released_when_the_run_ends(tmp_path):
    with claimed_run_dirs(tmp_path / "out", tmp_path / "out" / "checkpoints", saves_checkpoints=True) as lock:
        assert lock.exists()
    assert not lock.exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["checkpoints"]
