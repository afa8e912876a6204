"""``benchmarks/gpu_check.py``, the script a session runs first when a GPU is lent: its CPU smoke
run (toy shapes, the same code paths) must complete, so that a lent machine's minutes are not
spent on a script that no longer matches the runtime's calls."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.benchmark_scripts import BENCHMARKS


def test_the_cpu_smoke_run_takes_every_code_path(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_check.py"), "--cpu-smoke", "--quick", "--json",
         str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for path in ("ARGS", "GenARM", "best-of-N", "policy accuracy"):
        assert f"toy  {path}" in done.stdout
    figures = json.loads(out.read_text())
    assert figures
    assert '"ok": true' in done.stdout
