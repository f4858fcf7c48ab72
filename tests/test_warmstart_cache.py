"""The warm-start cache (core/models/warmstart.py, cached_model_dir) when several processes start on an empty cache:
one trains and saves, the others wait for it and load its copy. Before the lock, the second to finish failed in
os.replace (`Directory not empty`), as two pytest workers did on a clean clone."""

from __future__ import annotations

import threading
import time

from core.models.warmstart import cached_model_dir


class SavedModel:
    def __init__(self, marker: str):
        self.marker = marker

    def save_pretrained(self, folder):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(self.marker)


def test_runs_starting_together_on_an_empty_cache_train_once_and_share_the_copy(tmp_path):
    path, trained, results = tmp_path / "cache" / "tiny-model", [], []

    def train():
        trained.append(threading.current_thread().name)
        time.sleep(0.5)  # long enough for the other thread to reach the lock
        return SavedModel(threading.current_thread().name), SavedModel("tokenizer")

    def run():
        results.append(cached_model_dir(path, 1, train))

    threads = [threading.Thread(target=run, name=f"run{i}") for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(trained) == 1 and results == [path, path]
    assert [p.name for p in path.parent.iterdir() if ".tmp" in p.name] == []


def test_a_cached_model_is_loaded_without_training(tmp_path):
    path = tmp_path / "tiny-model"
    path.mkdir()
    (path / "config.json").write_text("{}")
    assert cached_model_dir(path, 1, lambda: (_ for _ in ()).throw(AssertionError("trained again"))) == path
