"""Fan-out to the configured loggers, built from the `tracking:` config section.

    tracking:
      backends: [console, mlflow]
      uri: null              # null: sqlite:///<cwd>/mlflow.db; or http://server:5000
      experiment: recipezoo
      run_name: grpo-tiny
      tags: {}               # extra MLflow tags
      acc_key: critic/acc/mean   # which metric the console shows as `acc`

The trainer talks to one `Tracking` object and never to a backend directly, so adding a backend
is a change here, not in the loop.
"""

from __future__ import annotations

from typing import Any, Mapping

from core.tracking.console import DEFAULT_ACC_KEY, ConsoleLogger
from core.tracking.run_status import exit_status

BACKEND_NAMES = ("console", "mlflow")


class Tracking:
    """Sends every call to each backend; usable as a context manager like its backends.

    Leaving the `with` block by an exception finishes every backend as FAILED (KILLED for
    Ctrl-C) and re-raises, so no MLflow run of a crashed training stays RUNNING.
    """

    def __init__(self, backends: list):
        self.backends = list(backends)

    @property
    def run_id(self) -> str | None:
        """The MLflow run's id (a checkpoint stores it so a resume continues the same run)."""
        return next((b.run_id for b in self.backends if hasattr(b, "run_id")), None)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        for backend in self.backends:
            backend.log_metrics(metrics, step)

    def log_artifact(self, path, artifact_path: str | None = None) -> None:
        """Store a file (plot, checkpoint manifest) with each backend that keeps files."""
        for backend in self.backends:
            if hasattr(backend, "log_artifact"):
                backend.log_artifact(path, artifact_path=artifact_path)

    def finish(self, status: str = "FINISHED") -> None:
        """Finish every backend even if one fails (a flaky server must not leave the local
        store RUNNING), then raise the first error."""
        first_error: BaseException | None = None
        for backend in self.backends:
            try:
                backend.finish(status)
            except Exception as error:  # noqa: BLE001 - re-raised below, after the others
                first_error = first_error or error
        if first_error is not None:
            raise first_error

    def __enter__(self) -> "Tracking":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.finish(exit_status(exc_type))
        return False


def backend_names(cfg_tracking: Mapping[str, Any]) -> list[str]:
    """`tracking.backends` as a list of valid names; a bare string (a CLI override such as
    `tracking.backends=mlflow`) counts as a one-element list."""
    names = cfg_tracking.get("backends", ["console"])
    names = [names] if isinstance(names, str) else list(names or [])
    unknown = [name for name in names if name not in BACKEND_NAMES]
    if unknown:
        raise ValueError(
            f"tracking.backends={names} has unknown backend(s) {unknown}; "
            f"valid names: {', '.join(BACKEND_NAMES)}"
        )
    return names


def build_tracking(
    cfg_tracking: Mapping[str, Any],
    config: Mapping[str, Any],
    seed: int,
    total_steps: int,
    rank: int = 0,
    resume_run_id: str | None = None,
    resume_step: int = 0,
) -> Tracking:
    """The `Tracking` for this process: the configured backends on rank 0, none elsewhere.

    Names are checked on every rank, so a typo fails everywhere at once rather than leaving
    ranks 1..N waiting for a rank 0 that died. `config` is the resolved run config logged
    to MLflow. `resume_run_id`, `resume_step`: the MLflow run and the step a resumed run continues.
    """
    names = backend_names(cfg_tracking)
    if rank != 0:
        return Tracking([])
    backends: list = []
    for name in names:
        if name == "console":
            acc_key = cfg_tracking.get("acc_key") or DEFAULT_ACC_KEY
            backends.append(ConsoleLogger(total_steps, acc_key=acc_key, rank=rank))
        elif name == "mlflow":
            backends.append(_build_mlflow(cfg_tracking, config, seed, resume_run_id, resume_step))
    return Tracking(backends)


def _build_mlflow(cfg_tracking: Mapping[str, Any], config: Mapping[str, Any], seed: int,
                  resume_run_id: str | None = None, resume_step: int = 0):
    # Imported here: `import mlflow` takes ~2 s, which console-only runs and tests need not pay.
    from core.tracking.mlflow_tracker import MLflowTracker

    tracker = MLflowTracker(
        tracking_uri=cfg_tracking.get("uri"),
        experiment=cfg_tracking.get("experiment") or "recipezoo",
        run_name=cfg_tracking.get("run_name"),
        config=_plain(config),
        seed=seed,
        tags=_plain(cfg_tracking.get("tags") or {}),
        resume_run_id=resume_run_id,
        resume_step=resume_step,
    )
    print(f"mlflow run {tracker.run_id}; view with: {tracker.ui_hint()}", flush=True)
    return tracker


def _plain(value: Any) -> Any:
    """An OmegaConf DictConfig as a resolved plain dict; anything else unchanged."""
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return value
