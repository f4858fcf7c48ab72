"""bench/perf/sglang_report.py (the SGLang section of results/perf/README.md) from SYNTHETIC json files: the numbers
below are made up to pin the table's arithmetic and layout, and are written to tmp_path only, never to results/.
The real files come from bench/perf/sglang_suite.sh on a GPU."""

import json
import shutil
import sys
from pathlib import Path

from bench.perf import report as perf_report
from bench.perf import sglang_report

ROOT = Path(__file__).resolve().parents[1]


def synthetic_run(backend: str, model: str, raw: list[float], ours: list[float]) -> dict:
    raw_name, ours_name = sglang_report.BACKENDS[backend]
    calls = [1.0, 1.0] + [0.5] * (len(raw) + len(ours))  # warm-ups, then every round's engine calls
    return {"engine_generate_s": calls, "backend": backend, "model": model, "device": "SYNTHETIC GPU",
            "engine_version": "0.0.0", "torch": "0.0",
            "command": f"python -m bench.perf.sglang_rollout --backend {backend} --name {model}", "prompts": 4,
            "prompt_len": 8, "new_tokens": 16, "engine_start_s": 30.0, "sampling": "temperature 1.0",
            "tokens_per_s": {raw_name: raw, ours_name: ours}, "ours_over_raw": sorted(ours)[1] / sorted(raw)[1],
            "sleep": {"freed_gib": 30.5}, "weight_sync": {"bytes": 2.0e9, "seconds": [0.5, 0.4], "gb_per_s": 5.0}}


def write(directory: Path, run: dict) -> None:
    (directory / f"sglang_rollout_{run['backend']}_{run['model']}.json").write_text(json.dumps(run))


def test_the_table_puts_both_engines_of_a_model_on_one_row(tmp_path):
    write(tmp_path, synthetic_run("sglang", "m1", [1000, 1100, 1200], [1000, 1078, 1300]))  # 98%
    write(tmp_path, synthetic_run("vllm", "m1", [900, 1000, 1100], [800, 900, 950]))  # 90%
    write(tmp_path, synthetic_run("sglang", "m2", [500, 500, 500], [500, 500, 500]))  # no vLLM run for m2
    lines = sglang_report.sglang_section(tmp_path)
    row = next(line for line in lines if line.startswith("| m1 |"))
    assert row == ("| m1 | 1,100 | 1,078 | **98.0%** (met) | 1,000 | 900 | **90.0%** (missed by 5.0%) | "
                   "5.0 GB/s (2.00 GB) | 5.0 GB/s (2.00 GB) | 30.5 GiB | 30.5 GiB |")
    row = next(line for line in lines if line.startswith("| m2 |"))
    assert row.endswith("| 500 | 500 | **100.0%** (met) | not run | not run | not run | 5.0 GB/s (2.00 GB) | not run | "
                        "30.5 GiB | not run |")
    assert any("`m1` vllm rounds (tok/s, in order): raw vllm.LLM.generate: 900, 1,000, 1,100" in line for line in lines)
    assert sglang_report.write_sglang_plot(tmp_path) == ["sglang_rollout.png"]
    assert (tmp_path / "sglang_rollout.png").stat().st_size > 0


def test_no_files_no_section(tmp_path):
    assert sglang_report.sglang_section(tmp_path) == [] and sglang_report.write_sglang_plot(tmp_path) == []


def test_perf_report_includes_the_section(tmp_path, monkeypatch):
    directory = tmp_path / "perf"
    shutil.copytree(ROOT / "results" / "perf", directory, ignore=shutil.ignore_patterns("*.png", "README.md"))
    write(directory, synthetic_run("sglang", "m1", [1000, 1000, 1000], [990, 990, 990]))
    monkeypatch.setattr(sys, "argv", ["perf_report.py", "--dir", str(directory)])
    perf_report.main()
    readme = (directory / "README.md").read_text()
    assert "## Rollout: our SGLang backend vs raw SGLang" in readme and "![sglang_rollout.png](sglang_rollout.png)" in readme
    assert readme.index("## Rollout: our vLLM backend") < readme.index("## Rollout: our SGLang backend")


def test_engine_split_pairs_each_call_with_its_path_in_the_order_the_rounds_ran():
    """Hand-computed: 64 tokens a call; raw at 64, 32, 64 tok/s takes 1, 2, 1 s, ours at 32, 32, 16 takes 2, 2, 4 s.
    After the two warm-ups the calls ran raw, ours | ours, raw | raw, ours (every other round reversed)."""
    run = synthetic_run("sglang", "m", [64, 32, 64], [32, 32, 16])
    run.update(prompts=4, new_tokens=16, engine_generate_s=[9.0, 9.0, 0.9, 1.5, 1.8, 1.95, 0.95, 3.0])
    split = sglang_report.engine_split(run)
    raw, ours = (split[name] for name in sglang_report.BACKENDS["sglang"])
    assert raw[0] == 0.95 and abs(raw[1] - 0.05) < 1e-9  # inside 0.9, 1.95, 0.95; outside 0.1, 0.05, 0.05
    assert ours[0] == 1.8 and abs(ours[1] - 0.5) < 1e-9  # inside 1.5, 1.8, 3.0; outside 0.5, 0.2, 1.0
