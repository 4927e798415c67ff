"""`planner check`: aggregated servers of one file behind one regular-mode router (`--worker-urls`) that differ in
layout or batch are a warning (router_unlike_servers): the router has no per-server weight (serve.ROUTER_SPLIT), so
each of n servers gets ~1/n of the requests (fresh-user review 9, finding 1). Servers in different files are not
compared: nothing in a launch file says that two files' servers share a router."""

from __future__ import annotations

import pytest

from planner.check.engine_file import check_launch_file

VLLM = "CUDA_VISIBLE_DEVICES={gpus} vllm serve Qwen/Qwen3-32B --tensor-parallel-size {tp} --max-model-len 32768 " \
       "--max-num-seqs {seqs} --port {port} &\n"
VLLM_ROUTER = "vllm-router --worker-urls {urls} --policy round_robin --host 0.0.0.0 --port 30000 &\nwait\n"
SGLANG = "CUDA_VISIBLE_DEVICES={gpus} python -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp {tp} " \
         "--context-length 32768 --max-running-requests {seqs} --port {port} &\n"
SGLANG_ROUTER = "python -m sglang_router.launch_router --worker-urls {urls} --policy round_robin &\nwait\n"


def _file(tmp_path, server: str, router: str, shapes: list[tuple[int, int]], base: int) -> dict:
    """One server per (tp, batch) on consecutive GPUs and ports from `base`, then the router over all of them."""
    text, gpu, urls = "", 0, []
    for k, (tp, seqs) in enumerate(shapes):
        text += server.format(gpus=",".join(str(gpu + i) for i in range(tp)), tp=tp, seqs=seqs, port=base + k)
        urls.append(f"http://127.0.0.1:{base + k}")
        gpu += tp
    path = tmp_path / "launch.sh"
    path.write_text(text + router.format(urls=" ".join(urls)))
    return check_launch_file(path, cluster="dgx-h100", gpus=8)


@pytest.mark.parametrize("server, router, base", [(VLLM, VLLM_ROUTER, 8000), (SGLANG, SGLANG_ROUTER, 30001)])
def test_unlike_servers_behind_one_router_warn_with_each_kind(tmp_path, server, router, base):
    # the review's shapes, on one node: 1 x tp2 at 17 sequences beside 1 x tp4 at 38
    result = _file(tmp_path, server, router, [(2, 17), (4, 38)], base)
    found = [v for v in result["violations"] if v["rule"] == "router_unlike_servers"]
    assert result["verdict"] == "pass" and len(found) == 1, result["violations"]
    message = found[0]["message"]
    assert "2 servers of 2 kinds" in message and "1 x tp2 (2 GPUs)" in message and "1 x tp4 (4 GPUs)" in message
    assert " 17: " in message and " 38: " in message and "about 1/2 of the requests" in message
    assert "router per kind" in found[0]["fix"]
    assert not [v for v in result["violations"] if v["rule"] == "router_mode"]  # --worker-urls is the regular mode
    assert result["routers"][0]["servers"] == [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"]


@pytest.mark.parametrize("server, router, base", [(VLLM, VLLM_ROUTER, 8000), (SGLANG, SGLANG_ROUTER, 30001)])
def test_alike_servers_and_a_batch_that_differs(tmp_path, server, router, base):
    assert not _file(tmp_path, server, router, [(2, 17), (2, 17), (2, 17), (2, 17)], base)["violations"]
    found = _file(tmp_path, server, router, [(2, 17), (2, 34)], base)["violations"]
    assert [v["rule"] for v in found] == ["router_unlike_servers"]
