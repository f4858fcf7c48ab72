"""core/data/sources.py: the embedded task materialised into the cache once, safely when several processes
(test workers, Ray workers, leaderboard jobs) start together on an empty cache."""

from __future__ import annotations

import threading

import pyarrow.parquet as pq

from core.data import sources


def test_two_writers_on_an_empty_cache_both_end_with_the_whole_file(tmp_path, monkeypatch):
    """Both write their rows before either renames (a barrier in write_rows), as two processes started together
    can: with one shared temporary name, the second rename found its file already moved and raised
    FileNotFoundError (seen on a clean clone's test run)."""
    both_written, write = threading.Barrier(2, timeout=30), sources.write_rows

    def write_then_wait(rows, path):
        written = write(rows, path)
        both_written.wait()
        return written

    monkeypatch.setattr(sources, "write_rows", write_then_wait)
    results, errors = [], []

    def materialise():
        try:
            results.append(sources.resolve_data_files("embedded://arithmetic", "val", tmp_path))
        except Exception as error:
            errors.append(error)

    writers = [threading.Thread(target=materialise) for _ in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert errors == [] and results[0] == results[1]
    assert pq.read_table(results[0][0]).num_rows == sources.EMBEDDED_SIZES["val"]
    assert [path.name for path in tmp_path.iterdir()] == [results[0][0].rsplit("/", 1)[1]]  # no temporary left
