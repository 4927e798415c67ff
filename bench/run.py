"""`make bench`: wall time (whole process) and solver time of `planner plan` on the issue's cases.

Speed is measured here, not in timed tests. Prints one row per case: wall seconds of the whole
process, solver seconds, candidates evaluated and candidates per second.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

CASES = [
    ("llama-3.1-70b", "dgx-h100", 64, []),
    ("llama-3.1-405b", "dgx-h100", 16384, ["--seq-len", "8192", "--global-batch-tokens", "16777216"]),
    ("mixtral-8x22b", "dgx-h100", 256, []),
    ("deepseek-v3", "hgx-h800", 2048, []),
]


def main() -> int:
    planner = Path(sys.executable).with_name("planner")
    print(f"{'case':44s} {'wall_s':>7s} {'solver_s':>8s} {'cands':>6s} {'cands/s':>8s} status")
    worst = 0.0
    for model, cluster, gpus, extra in CASES:
        cmd = [str(planner), "plan", "--model", model, "--cluster", cluster, "--gpus", str(gpus),
               "--format", "json", *extra]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        worst = max(worst, wall)
        name = f"{model} on {gpus} x {cluster}"
        if proc.returncode != 0:
            print(f"{name:44s} {wall:7.2f} {'-':>8s} {'-':>6s} {'-':>8s} exit {proc.returncode}: "
                  f"{proc.stderr.strip()[:80]}")
            continue
        solver = json.loads(proc.stdout)["solver"]
        evaluated = solver["candidates_evaluated"]
        print(f"{name:44s} {wall:7.2f} {solver['wall_s']:8.2f} {evaluated:6d} "
              f"{evaluated / max(solver['wall_s'], 1e-9):8.0f} {solver['status']}")
    print(f"slowest wall time: {worst:.2f} s (target < 2 s on a 2-core machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
