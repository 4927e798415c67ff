"""The README's serving accuracy table is the committed calibration's evaluation (`make calibrate-serving`
writes calibration/serving.yaml `evaluation`, from the evaluation part of serving_measurements.csv): it
went stale once (fresh-user review 7), so each row is compared here."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_readme_serving_accuracy_rows_are_the_calibration_files():
    evaluation = yaml.safe_load((ROOT / "calibration" / "serving.yaml").read_text())["evaluation"]
    want = {engine: (e["n"], e["ttft_mape"], e["tpot_mape"]) for engine, e in evaluation["by_engine"].items()}
    s = evaluation["summary"]
    want["all"] = (s["n"], s["ttft_mape"], s["tpot_mape"])
    text = (ROOT / "README.md").read_text()
    head = text.index("| engine | rows | TTFT MAPE | TPOT MAPE |")
    rows = re.findall(r"^\| (\w+) \| (\d+) \| ([\d.]+)% \| ([\d.]+)% \|$", text[head:head + 600], re.M)
    got = {name: (int(n), float(ttft), float(tpot)) for name, n, ttft, tpot in rows}
    assert got == want
