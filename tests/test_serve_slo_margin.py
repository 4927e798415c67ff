"""serve-plan says when a chosen instance's predicted TTFT or TPOT lies closer to its SLO than the
latency model's error on held-out measurements of the engine (senior review 6 H4: recommended
deployments predicted just under the SLO were measured above it). The plan itself is unchanged."""

from planner import serve

CAL = {"evaluation": {"summary": {"ttft_mape": 26.0, "tpot_mape": 9.6},
                      "by_engine": {"vllm": {"ttft_mape": 22.8, "tpot_mape": 13.7}}}}


def _chosen(ttft_ms: float, tpot_ms: float) -> dict:
    return {"parallelism": {"tp": 4, "pp": 1, "ep": 1, "dp": 1}, "concurrency": 68,
            "ttft_ms": ttft_ms, "tpot_ms": tpot_ms}


def test_tpot_within_the_engines_error_of_the_slo_is_named_with_the_margin_slo():
    req = serve.ServeRequest(gpus=8, input_len=4000, output_len=500, ttft_ms=2000, tpot_ms=50)
    # vLLM's TPOT error 13.7%: 50 / 1.137 = 43.98 ms; 49.87 ms is above it; TTFT 726 < 2000 / 1.228 = 1,629
    notes = serve._slo_margin_note(req, [_chosen(726, 49.87)], CAL)
    assert len(notes) == 1 and notes[0].startswith("TPOT 49.87 ms of tp4 @68")
    assert "13.7% TPOT error on held-out vllm" in notes[0] and "--tpot-ms 44 " in notes[0]


def test_plans_with_the_margin_or_without_slos_get_no_note():
    req = serve.ServeRequest(gpus=8, input_len=4000, output_len=500, ttft_ms=2000, tpot_ms=50)
    assert serve._slo_margin_note(req, [_chosen(726, 43.9)], CAL) == []
    free = serve.ServeRequest(gpus=8, input_len=4000, output_len=500)
    assert serve._slo_margin_note(free, [_chosen(726, 49.87)], CAL) == []


def test_an_engine_without_its_own_error_uses_the_summary():
    req = serve.ServeRequest(gpus=8, input_len=4000, output_len=500, ttft_ms=1000, engine="sglang")
    # summary TTFT error 26%: 1000 / 1.26 = 793.7 ms; 900 ms is above it
    notes = serve._slo_margin_note(req, [_chosen(900, 20)], CAL)
    assert len(notes) == 1 and "26% TTFT error" in notes[0] and "--ttft-ms 794 " in notes[0]


def test_a_margin_slo_above_a_thousand_is_written_as_a_plain_number():
    """fresh-user review 9: `--ttft-ms 1.67e+03` -- 2000 / 1.2 = 1,666.7 ms, 3 significant digits: 1670."""
    cal = {"evaluation": {"summary": {"ttft_mape": 20.0, "tpot_mape": 9.6}, "by_engine": {}}}
    req = serve.ServeRequest(gpus=8, input_len=4000, output_len=500, ttft_ms=2000, engine="sglang")
    notes = serve._slo_margin_note(req, [_chosen(1900, 20)], cal)
    assert len(notes) == 1 and "--ttft-ms 1670 " in notes[0] and "e+" not in notes[0]
