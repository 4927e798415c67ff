"""SGLang's scheduler in the serving validation: its admission check (new_token_ratio reservation), the launch
defaults of the releases the measurements ran (chunked_prefill_size, mem_fraction_static), the lock-step wave of a
fixed-length benchmark, and the explicit measurement-harness column. Expected values are hand arithmetic from the
SGLang sources' defaults, written here."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from planner import serve_validate as v
from planner.cost import serving as sv
from planner.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests/data/reference/serving_measurements.csv"
H100_MIB = 81559
"""nvidia-smi memory.total of an H100 SXM (hardware/dgx-h100.yaml)."""
H200_MIB = 143771


# ---------------------------------------------------------------- admission (PrefillAdder)

def test_admission_two_batches_hand_arithmetic():
    """pool 20,000 tokens, 1,024 in / 512 out, chunk 8,192: batch 1 takes 8 prompts (the chunk), each reserving
    1,024 + 512 = 1,536 (8 x 1,536 = 12,288 < 20,000). Batch 2: the 8 running hold 1,025 + 511 x 0.7 = 1,382.7
    each (11,061.6), 8,938.4 left; the k-th new prompt needs 1,536 < 8,938.4 - (k - 1) x 1,536: k <= 5. 13."""
    assert sv.sglang_admitted(20_000, 1024, 512, clients=64, chunk_tokens=8192) == 13


def test_admission_clips_max_new_tokens_at_4096():
    """8,000 output tokens count as 4,096 (CLIP_MAX_NEW_TOKENS): each prompt of 1,000 needs 5,096; 3 x 5,096 =
    15,288 < 20,000, a fourth needs 20,384 >= 20,000: 3 (all in the first batch; NO_TOKEN ends admission)."""
    assert sv.sglang_admitted(20_000, 1000, 8000, clients=16, chunk_tokens=8192) == 3


def test_admission_caps_and_floor():
    """Fewer clients than the pool holds: all of them; max_running_requests caps; a lone request is tried."""
    assert sv.sglang_admitted(1_000_000, 1024, 128, clients=16, chunk_tokens=8192) == 16
    assert sv.sglang_admitted(1_000_000, 1024, 128, clients=64, chunk_tokens=8192, max_running=20) == 20
    assert sv.sglang_admitted(100, 1024, 128, clients=4, chunk_tokens=8192) == 1


def test_admission_of_prompts_longer_than_a_batch():
    """20,000-token prompts, chunk 8,192: each is chunked over three batches (8,192 + 8,192 + 3,616, the next one
    starting in the third); a pool of 10^6 admits all 4 clients."""
    assert sv.sglang_admitted(1_000_000, 20_000, 100, clients=4, chunk_tokens=8192) == 4


def test_inferencex_sglang_launch_flags(cases):
    """InferenceX's SGLang DeepSeek-R1 launch: --chunked-prefill-size 32768, --mem-fraction-static 0.82."""
    case = _one(cases, engine="sglang", harness="inferencex", input_len=1024, output_len=1024)
    assert v._launch(case, v.INFERENCEX, 921, 921) == (32768, 0.82, 0.0)


def test_admission_uses_the_init_ratio_of_the_source():
    assert sv.SGLANG_INIT_NEW_TOKEN_RATIO == 0.7 and sv.SGLANG_CLIP_MAX_NEW_TOKENS == 4096


# ---------------------------------------------------------------- launch defaults by release

@pytest.mark.parametrize("version, mib, tp, expected", [
    # 0.5.1.post1: reserved (9.5 + tp/2) GiB below 90 GiB: tp 2 -> 10,752 MiB, (81,559 - 10,752) / 81,559 = 0.868
    ("0.5.1.post1", H100_MIB, 2, (8192, 0.868)),
    # tp 8 -> 13.5 GiB = 13,824 MiB: 67,735 / 81,559 = 0.83050 -> 0.831
    ("0.5.1.post1", H100_MIB, 8, (8192, 0.831)),
    # 0.5.8.post1 tp 1: 512 + 1.5 x 8,192 + 2 x 256 + 1/8 x 1,024 = 13,440 MiB: 0.8352 -> 0.835
    ("0.5.8.post1", H100_MIB, 1, (8192, 0.835)),
    # 0.5.6.post2 H200 tp 4: graph max batch 512: 512 + 12,288 + 1,024 + 512 = 14,336: 0.9003 -> 0.9
    ("0.5.6.post2", H200_MIB, 4, (8192, 0.9)),
])
def test_sglang_release_defaults_hand_arithmetic(version, mib, tp, expected):
    chunk, fraction = v.sglang_defaults(version, mib, tp=tp, pp=1, adp=1, mla=False)
    assert (chunk, fraction) == (expected[0], pytest.approx(expected[1]))


def test_current_release_defaults_come_from_the_framework_table():
    from planner.frameworks import sglang

    got = v.sglang_defaults("", H200_MIB, tp=8, pp=1, adp=1, mla=False)
    assert got == (8192, sglang.default_mem_fraction_static(H200_MIB, tp=8, pp=1, chunked_prefill_size=8192,
                                                             max_running_requests=None, mla=False, attn_dp=1,
                                                             role=None, a2a=sglang.A2A_NONE))


# ---------------------------------------------------------------- the lock-step wave

@pytest.fixture(scope="module")
def cases():
    return v.load_cases()


def _one(cases, **match):
    return next(c for c in cases if all(getattr(c, k) == x for k, x in match.items()))


def test_wave_term_is_the_burst_of_every_cycle(cases):
    """qwen3-32b tp2, 1,024 in, 16 clients, chunk 8,192 (8 prompts a batch): one batch of 16 needs two batches;
    mean wait (16 + 8) / 2 - 1 = 11 prefills beyond its own; the start-burst terms are 0 (the wave includes it)."""
    case = _one(cases, engine="sglang", model="qwen3-32b", input_len=1024, output_len=128, concurrency=16,
                inst=sv.Instance(tp=2))
    terms = v.case_terms(case)
    assert case.harness == "sweep" and v.harness_of(case).synchronised
    assert terms["wave_s"] == pytest.approx(11 * terms["prefill_one_s"])
    assert terms["burst_s"] == terms["burst_unknown_share_s"] == 0.0


def test_mixed_engine_lock_step_group_is_one_step(cases):
    """vLLM mixes prefills into decode steps: a wave of 128 prompts of 1,024 tokens splits into groups of
    8,192 / 1,024 = 8 that start and finish together; each waits for its own step: 7 prefills beyond its own.
    The start burst stays a separate term (its share fitted)."""
    case = next(c for c in cases if c.engine == "vllm" and c.harness == "sweep" and c.input_len == 1024
                and c.concurrency == 128 and c.inst.adp == 1)
    terms = v.case_terms(case)
    assert terms["wave_s"] == pytest.approx(7 * terms["prefill_one_s"])
    assert terms["burst_unknown_share_s"] > 0


def test_no_wave_outside_lock_step(cases):
    """sweep-sla and InferenceX rows (lengths not in lock-step): no wave term."""
    sla = _one(cases, engine="sglang", harness="sweep-sla")
    ix = _one(cases, engine="sglang", harness="inferencex")
    assert v.case_terms(sla)["wave_s"] == 0.0 and v.case_terms(ix)["wave_s"] == 0.0


# ---------------------------------------------------------------- the harness column

def _write(path: Path, rows: list[dict], header: list[str]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _reference() -> tuple[list[str], list[dict]]:
    with REFERENCE.open(newline="") as handle:
        reader = csv.DictReader(line for line in handle if not line.startswith("#"))
        return list(reader.fieldnames), list(reader)


def test_reference_copy_names_each_rows_harness():
    """Dated ids are InferenceX runs; aiconfigurator's rows split by lengths (powers of two: its grid)."""
    _, rows = _reference()
    pow2 = lambda n: n & (n - 1) == 0
    for row in rows:
        dated = row["id"][:4].isdigit() and row["id"][4] == "_"
        expected = "inferencex" if dated else "sweep" if pow2(int(row["isl"])) and pow2(int(row["osl"])) else "sweep-sla"
        assert row["harness"] == expected, row["id"]


def test_user_file_without_the_column_gets_the_plain_harness(tmp_path):
    """A dated id no longer implies InferenceX's burst harness: without the column, `plain`, and validate says so."""
    header, rows = _reference()
    dated = next(r for r in rows if r["harness"] == "inferencex")
    path = _write(tmp_path / "mine.csv", [dated], [h for h in header if h != "harness"])
    (case,) = v.load_cases(path)
    assert case.harness == "plain" and v.harness_of(case) is v.PLAIN
    terms = v.case_terms(case)
    assert terms["burst_s"] == terms["burst_unknown_share_s"] == terms["wave_s"] == 0.0
    assert v.validate([case])["harness"] == {"plain": 1}


def test_unknown_harness_value_is_one_line_error(tmp_path):
    header, rows = _reference()
    path = _write(tmp_path / "bad.csv", [{**rows[0], "harness": "burst"}], header)
    with pytest.raises(SpecError, match="harness.*'burst' not allowed"):
        v.load_cases(path)
