"""A runner-up with fewer moving parts that ties plan #1 within the step-time model's own error is
named (senior-engineer review L3: 8B on 8 H100 ranked dp4 pp2 1.4% above dp8, inside the model's
error; an engineer breaks such ties towards the simpler layout). The ranking itself is unchanged."""

from __future__ import annotations

import json

import cli_run
import yaml

from planner.cost import compute
from planner.plan import simpler_alternative


def _plan(step: float, pp: int = 1, vpp: int = 1, cp: int = 1, tp: int = 1, zero_stage: int = 1,
          recompute="none", offload=None) -> dict:
    return {"parallelism": {"pp": pp, "vpp": vpp, "cp": cp, "tp": tp, "zero_stage": zero_stage,
                            "recompute": recompute, "pipeline_layers": [32 // pp] * pp,
                            **({"offload": offload} if offload else {})},
            "time_s": {"step": step}}


def test_a_simpler_runner_up_inside_the_error_is_named():
    # #2 drops the pipeline and is 41.401 / 40.815 - 1 = 1.44% slower, inside a 3.6% error
    alt = simpler_alternative([_plan(40.815, pp=2), _plan(41.401)], 0.036)
    assert alt["plan"] == 2 and alt["fewer"] == ["pipeline stages"]
    assert abs(alt["slower_fraction"] - (41.401 / 40.815 - 1)) < 1e-12


def test_outside_the_error_or_not_simpler_is_not_named():
    assert simpler_alternative([_plan(10.0, pp=2), _plan(10.5)], 0.036) is None      # 5% > 3.6%
    assert simpler_alternative([_plan(10.0, pp=2), _plan(10.1, tp=2)], 0.036) is None  # more tp
    assert simpler_alternative([_plan(10.0, cp=2), _plan(10.1, cp=2)], 0.036) is None  # the same
    assert simpler_alternative([_plan(10.0)], 0.036) is None


def test_fewer_virtual_stages_and_cp_count():
    # pp 4 x vpp 2 = 8 stages against pp 4 x vpp 1 = 4 and cp 4 against cp 2; #2 has less cp but
    # more stages (16), so the first simpler one is #3
    alt = simpler_alternative([_plan(10.0, pp=4, vpp=2, cp=4), _plan(10.2, pp=16, cp=2),
                               _plan(10.3, pp=4, cp=2)], 0.036)
    assert alt["plan"] == 3 and alt["fewer"] == ["pipeline stages", "cp"]


def test_the_error_is_the_calibration_files_held_out_median():
    doc = yaml.safe_load(compute.calibration_path().read_text())
    assert compute.held_out_error() == doc["evaluation"]["all"]["median_abs_error_pct"] / 100


def test_plan_names_it_in_json_and_table():
    args = ("plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8")
    data = json.loads(cli_run.planner(*args, "--format", "json").stdout)
    alt, plans = data["simpler_alternative"], data["plans"]
    if alt is None:   # the ranking moved: then no shown runner-up may qualify
        assert simpler_alternative(plans, compute.held_out_error()) is None
        return
    first, other = plans[0]["parallelism"], plans[alt["plan"] - 1]["parallelism"]
    assert other["pp"] * other["vpp"] <= first["pp"] * first["vpp"] and other["tp"] <= first["tp"]
    assert plans[alt["plan"] - 1]["time_s"]["step"] <= (1 + compute.held_out_error()) * plans[0]["time_s"]["step"]
    table = cli_run.planner(*args).stdout
    assert f"tie within the model: #{alt['plan']} is {100 * alt['slower_fraction']:.1f}% slower" in table


def test_zero3_and_full_recompute_are_moving_parts():
    # senior review 6 M3: FSDP over every rank with most layers fully recomputed ranked first;
    # ZeRO-1 without recompute 2% behind is the simpler layout
    alt = simpler_alternative([_plan(10.0, zero_stage=3, recompute="full"), _plan(10.2)], 0.036)
    assert alt["plan"] == 2 and alt["fewer"] == ["ZeRO-3", "fully recomputed layers"]
    # per-stage mixes count their full layers: 21 + 23 = 44 against 20 + 23 = 43
    mix_a = [{"none": 3, "selective": 0, "full": 21}, {"none": 1, "selective": 0, "full": 23}]
    mix_b = [{"none": 2, "selective": 2, "full": 20}, {"none": 1, "selective": 0, "full": 23}]
    alt = simpler_alternative([_plan(10.0, pp=2, recompute=mix_a), _plan(10.1, pp=2, recompute=mix_b)], 0.036)
    assert alt["plan"] == 2 and alt["fewer"] == ["fully recomputed layers"]
    # more ZeRO-3 than #1 is not simpler, even with less cp
    assert simpler_alternative([_plan(10.0, cp=2), _plan(10.1, zero_stage=3)], 0.036) is None


def test_offloaded_states_are_a_moving_part():
    # a DeepSpeed plan offloading the optimizer ranked first; the same layout on the GPU 1% behind
    # is the simpler one; offloading more than #1 is not simpler
    alt = simpler_alternative([_plan(10.0, offload=["optimizer"]), _plan(10.1)], 0.036)
    assert alt["plan"] == 2 and alt["fewer"] == ["offloaded states"]
    assert simpler_alternative([_plan(10.0, tp=2), _plan(10.1, offload=["optimizer"])], 0.036) is None


def test_the_tie_line_names_the_offloaded_states():
    """Senior review 12, finding 1: the table's tie line had no value for the 'offloaded states'
    axis (KeyError, a traceback on `plan --framework deepspeed` for 70B on 8 H100)."""
    from planner.report import simpler_note
    plans = [_plan(10.0, offload=["optimizer", "parameters"]), _plan(10.1, offload=["optimizer"])]
    alt = simpler_alternative(plans, 0.036)
    assert "offloaded states optimizer vs optimizer,parameters" in simpler_note(alt, plans)
    plans = [_plan(10.0, offload=["optimizer"]), _plan(10.1)]
    assert "offloaded states none vs optimizer" in simpler_note(simpler_alternative(plans, 0.036), plans)
