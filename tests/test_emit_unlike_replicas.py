"""An aggregated mix of unlike replicas is emitted with each kind's share of the requests and the warning that a
round-robin balancer would overload the smaller ones (fresh-user review 9, finding 1: qwen3-32b at 5 requests/s on
24 H100 planned 1 x tp2 (0.52 requests/s) + 4 x tp4 (1.16 each) behind an unweighted round-robin)."""
import re

from tests.cli_run import planner


def test_unlike_replicas_name_their_shares():
    out = planner("serve-plan", "-m", "qwen3-32b", "-c", "dgx-h100", "--gpus", "24", "--input-len", "16000",
                  "--output-len", "800", "--ttft-ms", "3000", "--tpot-ms", "40", "--request-rate", "5", "--emit", "vllm")
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stdout.splitlines() if "independent servers" in l)
    shares = [float(x) for x in re.findall(r": ([\d.]+) requests/s each", line)]
    assert len(shares) == 2  # the plan mixes tp2 and tp4 servers
    assert "would overload the smaller ones" in line and "weight" in line
    assert max(shares) > min(shares)


def test_alike_replicas_are_spread_evenly():
    out = planner("serve-plan", "-m", "llama-3.1-70b", "-c", "hgx-h200", "--gpus", "8", "--input-len", "4000",
                  "--output-len", "500", "--ttft-ms", "2000", "--tpot-ms", "50", "--emit", "vllm")
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stdout.splitlines() if "independent servers" in l)
    assert "spread evenly" in line
