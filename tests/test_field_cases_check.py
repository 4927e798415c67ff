"""The training field cases of ../shared/reference/field_cases.yaml as `planner check` tests, in each
file format they arise in (Megatron-LM arguments, DeepSpeed JSON, torchtitan TOML, plan files):
the verdict, the rule and the numbers its message names, for the case's own input.

Models are given the way each format gives them: Megatron-LM's architecture flags, else a Hugging
Face llama config written next to the file (`--model PATH`, or `model:` of a plan file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

FC05 = dict(h=6656, layers=60, heads=52, kv=52, inter=17920, vocab=32000)
FC06 = dict(h=3584, layers=28, heads=28, kv=4, inter=18944, vocab=152064)  # Qwen2-7B
FC07 = dict(h=4096, layers=32, heads=32, kv=4, inter=11008, vocab=32000)
FC08 = dict(h=4096, layers=32, heads=32, kv=32, inter=11008, vocab=250682)
FC09 = dict(h=1024, layers=30, heads=16, kv=16, inter=2816, vocab=32000)
FC10 = dict(h=1024, layers=80, heads=16, kv=16, inter=2816, vocab=32000)
FC11 = dict(h=5120, layers=40, heads=40, kv=8, inter=13824, vocab=32000)
FC12 = dict(h=4096, layers=32, heads=32, kv=32, inter=11008, vocab=32000)
SMALL = dict(h=1024, layers=16, heads=16, kv=16, inter=2816, vocab=32000)


def _hf(m: dict) -> dict:
    return dict(model_type="llama", hidden_size=m["h"], num_hidden_layers=m["layers"],
                num_attention_heads=m["heads"], num_key_value_heads=m["kv"],
                intermediate_size=m["inter"], vocab_size=m["vocab"],
                max_position_embeddings=131072, tie_word_embeddings=False)


def _model_file(tmp: Path, m: dict) -> Path:
    path = tmp / "model.yaml"
    path.write_text(yaml.safe_dump(_hf(m)))
    return path


def megatron(tmp, m, *, tp=1, pp=1, cp=1, gpus, seq=4096, gbs=None, extra=""):
    """A torchrun + pretrain_gpt.py script with the model as Megatron's architecture flags."""
    per_node = min(gpus, 8)
    gqa = f"--group-query-attention --num-query-groups {m['kv']} " if m["kv"] != m["heads"] else ""
    dp = max(1, gpus // (tp * pp * cp))
    text = (f"torchrun --nproc_per_node {per_node} --nnodes {max(1, gpus // per_node)} "
            f"pretrain_gpt.py \\\n"
            f"  --tensor-model-parallel-size {tp} --pipeline-model-parallel-size {pp} \\\n"
            f"  --context-parallel-size {cp} \\\n"
            f"  --num-layers {m['layers']} --hidden-size {m['h']} --num-attention-heads {m['heads']} "
            f"{gqa}--ffn-hidden-size {m['inter']} --max-position-embeddings 131072 --swiglu \\\n"
            f"  --normalization RMSNorm --position-embedding-type rope --vocab-size {m['vocab']} \\\n"
            f"  --untie-embeddings-and-output-weights --disable-bias-linear \\\n"
            f"  --seq-length {seq} --micro-batch-size 1 --global-batch-size {gbs or dp * 8} --bf16 "
            f"--use-distributed-optimizer {extra}\n")
    path = tmp / "pretrain.sh"
    path.write_text(text)
    return [path, "--cluster", "dgx-h100"]


def deepspeed(tmp, m, *, tp=1, zero=1, gpus, seq=4096, cluster="dgx-h100"):
    dp = max(1, gpus // tp)
    doc = {"train_batch_size": dp * 8, "train_micro_batch_size_per_gpu": 1,
           "zero_optimization": {"stage": zero}, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW"}}
    if tp > 1:
        doc["tensor_parallel"] = {"autotp_size": tp}
    path = tmp / "ds_config.json"
    path.write_text(json.dumps(doc, indent=2))
    return [path, "--model", _model_file(tmp, m), "--cluster", cluster, "--gpus", str(gpus),
            "--seq-len", str(seq)]


def torchtitan(tmp, m, *, tp=1, pp=1, cp=1, gpus, seq=4096, local_batch=1,
               cluster="dgx-h100", ac="selective"):
    text = (f"[training]\nlocal_batch_size = {local_batch}\nseq_len = {seq}\n\n[parallelism]\n"
            f"data_parallel_shard_degree = -1\ntensor_parallel_degree = {tp}\n"
            f"pipeline_parallel_degree = {pp}\ncontext_parallel_degree = {cp}\n\n"
            f"[activation_checkpoint]\nmode = \"{ac}\"\nselective_ac_option = \"op\"\n")
    path = tmp / "job.toml"
    path.write_text(text)
    return [path, "--model", _model_file(tmp, m), "--cluster", cluster, "--gpus", str(gpus)]


def plan_file(tmp, m, *, tp=1, pp=1, cp=1, gpus, seq=4096, sp=None, split=None, vpp=1):
    """The shipped example plan file with the case's model (a path) and layout."""
    doc = yaml.safe_load((ROOT / "examples/llama-3.1-70b-64xh100-tp8.plan.yaml").read_text())
    dp = max(1, gpus // (tp * pp * cp))
    _model_file(tmp, m)
    doc.update(model="model.yaml", gpus=gpus)
    doc["request"].update(seq_len=seq, global_batch_size=dp * 8)
    doc["plan"]["parallelism"].update(
        dp=dp, tp=tp, pp=pp, cp=cp, zero_stage=1, sequence_parallel=tp > 1 if sp is None else sp,
        micro_batch_size=1, global_batch_size=dp * 8, num_microbatches=8, vpp=vpp,
        recompute="none", pipeline_layers=list(split or [m["layers"] // pp] * pp))
    doc.pop("predicted", None)
    path = tmp / "run.plan.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return [path]


def check(args):
    result = runner.invoke(app, ["check", *map(str, args), "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.output)
    return result.exit_code, data


def error(args, rule):
    code, data = check(args)
    assert code == 1, data["violations"]
    found = {v["rule"]: v for v in data["violations"] if v["severity"] == "error"}
    assert rule in found, [v["rule"] for v in data["violations"]]
    return " ".join(f"{found[rule]['message']} {found[rule]['fix']}".split())


WRITERS = {"megatron": megatron, "deepspeed": deepspeed, "torchtitan": torchtitan,
           "plan": plan_file}


# FC-05 (vLLM #414): 52 heads on tp 3 (and tp 8) is rejected naming both numbers.
@pytest.mark.parametrize("fmt", ["megatron", "deepspeed", "torchtitan", "plan"])
@pytest.mark.parametrize("tp", [3, 8])
def test_fc05_52_heads_tp_rejected(tmp_path, fmt, tp):
    args = WRITERS[fmt](tmp_path, FC05, tp=tp, gpus=tp if fmt != "torchtitan" else tp)
    message = error(args, "heads_divisible_by_tp")
    assert f"num_attention_heads=52 is not divisible by tp={tp}" in message


# FC-06 (vLLM #11797): 28 heads, tp 8 rejected; tp 4 (x dp 2) passes that rule.
@pytest.mark.parametrize("fmt", ["megatron", "deepspeed", "torchtitan", "plan"])
def test_fc06_28_heads_tp8_rejected_tp4_accepted(tmp_path, fmt):
    assert "num_attention_heads=28 is not divisible by tp=8" in error(
        WRITERS[fmt](tmp_path, FC06, tp=8, gpus=8), "heads_divisible_by_tp")
    _, data = check(WRITERS[fmt](tmp_path, FC06, tp=4, gpus=8))
    assert "heads_divisible_by_tp" not in {v["rule"] for v in data["violations"]}


# FC-07 (transformers #48307): 4 KV heads on tp 8: Megatron and torchtitan do not replicate KV heads.
@pytest.mark.parametrize("fmt", ["megatron", "torchtitan"])
def test_fc07_kv_heads_4_tp8_rejected_where_not_replicated(tmp_path, fmt):
    message = error(WRITERS[fmt](tmp_path, FC07, tp=8, gpus=8), "kv_heads_divisible_by_tp")
    assert "num_key_value_heads=4 is not divisible by tp=8" in message
    assert "past 1 KV head per rank" in message  # which frameworks replicate, and the KV limit


# FC-08 (vLLM #440): vocab 250682 at tp 8 is padded: Megatron to 128 x 8 multiples (250880),
# torchtitan to multiples of tp (250688); the padded rows are reported (and counted).
@pytest.mark.parametrize("fmt, padded", [("megatron", 250880), ("torchtitan", 250688)])
def test_fc08_vocab_padding_named(tmp_path, fmt, padded):
    _, data = check(WRITERS[fmt](tmp_path, FC08, tp=8, gpus=8))
    warning = {v["rule"]: v for v in data["violations"]}["vocab_padding"]
    assert f"vocab_size=250682 is padded to {padded} rows" in warning["message"]
    assert f"({padded - 250682} padding rows counted in memory)" in warning["message"]


# FC-09 (Megatron-LM #1304): 30 layers over pp 4 builds 28 evenly: rejected naming 30, 4 and 28;
# the uneven split 8/7/7/8 passes (Megatron: first and last stage counts).
@pytest.mark.parametrize("fmt", ["megatron", "plan"])
def test_fc09_30_layers_pp4(tmp_path, fmt):
    # A plan file states its split: the even one it holds (7 x 4) is the rule pipeline_layers.
    rule = "layers_divisible_by_pp" if fmt == "megatron" else "pipeline_layers"
    message = error(WRITERS[fmt](tmp_path, FC09, pp=4, gpus=4), rule)
    assert "num_hidden_layers=30" in message and "28" in message
    assert ("pp=4" if fmt == "megatron" else "[7, 7, 7, 7]") in message
    assert "[8, 7, 7, 8]" in message or fmt == "megatron"
    uneven = (megatron(tmp_path, FC09, pp=4, gpus=4, extra="--decoder-first-pipeline-num-layers 8 "
                       "--decoder-last-pipeline-num-layers 8") if fmt == "megatron"
              else plan_file(tmp_path, FC09, pp=4, gpus=4, split=[8, 7, 7, 8]))
    _, data = check(uneven)
    assert not {"layers_divisible_by_pp", "uneven_pipeline", "pipeline_layers"} & {
        v["rule"] for v in data["violations"] if v["severity"] == "error"}


# FC-10 (Megatron-LM #468): 80 layers, pp 16, 2 layers per virtual stage: 5 layers per stage is
# no multiple of 2 (2 virtual stages of 2 build 64 layers): rejected naming 80, 16, 2 and 64.
def test_fc10_80_layers_pp16_two_layers_per_virtual_stage(tmp_path):
    args = megatron(tmp_path, FC10, pp=16, gpus=16,
                    extra="--num-layers-per-virtual-pipeline-stage 2")
    message = error(args, "virtual_pipeline_args")
    for number in ("num_layers=80", "pp=16", "--num-layers-per-virtual-pipeline-stage 2",
                   "64 layers"):
        assert number in message, message


def test_fc10_plan_file_vpp2(tmp_path):
    """The plan-file form: 16 stages of 5 layers with vpp 2 (interleaving needs equal chunks)."""
    message = error(plan_file(tmp_path, FC10, pp=16, gpus=16, vpp=2, split=[5] * 16),
                    "pipeline_layers")
    assert "not multiples of vpp=2" in message and "[5, 5" in message


# FC-11 (verl #1226): head-splitting CP (Megatron --cp-comm-type a2a) of degree 16 on 40 heads /
# 8 KV heads is rejected with the valid degrees; ring attention (p2p) is suggested.
def test_fc11_ulysses_degree_16_on_40_heads(tmp_path):
    args = megatron(tmp_path, FC11, cp=16, gpus=16, seq=65536, extra="--cp-comm-type a2a")
    message = error(args, "ulysses_heads")
    assert "40 query and 8 key/value heads per rank" in message and "cp=16" in message
    assert "p2p (ring attention: no head constraint)" in message and "[1, 2, 4, 8]" in message


# FC-12 (NeMo-RL #3563): cp 2 x tp 4 with SP needs the sequence divisible by 8: 4100 fails, 4104 fixes.
@pytest.mark.parametrize("fmt", ["megatron", "torchtitan", "plan"])
def test_fc12_sequence_divisible_by_cp_and_tp(tmp_path, fmt):
    extra = {"extra": "--sequence-parallel"} if fmt == "megatron" else {}
    message = error(WRITERS[fmt](tmp_path, FC12, tp=4, cp=2, gpus=8, seq=4100, **extra),
                    "sequence_divisible")
    assert "seq_len=4100 is not divisible by 8" in message and "4104" in message


# FC-13 (TensorRT-LLM #1992): tp 2 launched on 1 rank: rejected printing both numbers.
@pytest.mark.parametrize("fmt, phrase", [
    ("megatron", "world size 1 is not divisible by tp x pp x cp = 2 x 1 x 1 = 2"),
    ("deepspeed", "dp*tp*pp*cp = 1*2*1*1 = 2 differs from the 1 GPUs (ranks) launched"),
    ("torchtitan", "dp*tp*pp*cp = 1*2*1*1 = 2 differs from the 1 GPUs (ranks) launched")])
def test_fc13_world_size(tmp_path, fmt, phrase):
    assert phrase in error(WRITERS[fmt](tmp_path, SMALL, tp=2, gpus=1), "world_size")


# FC-16 (DeepSpeed #237): 30B params, tp 8 x dp 1, ZeRO-2 on 8 V100-32GB: ZeRO has no effect at dp 1
# (16 B/param / 8 = 60 GB > 32 GB): rejected, saying so.
def test_fc16_zero2_at_dp1_deepspeed(tmp_path):
    m = dict(h=7168, layers=48, heads=56, kv=56, inter=28672, vocab=32000)  # ~30B parameters
    args = deepspeed(tmp_path, m, tp=8, zero=2, gpus=8, seq=2048, cluster="dgx2-v100")
    code, data = check(args)
    assert code == 1
    rules = {v["rule"]: v for v in data["violations"]}
    assert "dp=1" in rules["zero_without_dp"]["message"]
    assert rules["memory_exceeds"]["severity"] == "error"


# FC-04 (torchtitan #191) / FC-17 (llama-cookbook #100): torchtitan FSDP runs near capacity are
# "at risk" (a warning naming the margin), and the unsharded initialisation peak is reported.
def test_fc04_torchtitan_at_risk_is_a_warning_naming_the_margin():
    result = runner.invoke(app, ["check", str(ROOT / "tests/data/configs/torchtitan/llama3_8b.toml"),
                                 "--cluster", "dgx-h100", "--gpus", "8", "--format", "json"])
    assert result.exit_code == 0, result.output
    warning = {v["rule"]: v for v in json.loads(result.output)["violations"]}["memory_at_risk"]
    assert "inside the 10% at-risk margin" in warning["message"] and "FC-04" in warning["message"]


# FC-17 (llama-cookbook #100): Llama-2-7B (6.74e9 parameters, 27 GB in fp32) on 8 x 24 GB: the
# steady state can fit, building the unsharded model on each GPU first does not. A DeepSpeed ZeRO-2
# JSON builds it unsharded (no deepspeed.zero.Init below stage 3): the check names that peak and
# the meta-device fix. torchtitan builds on the meta device and shards first: no such warning.
LLAMA2_7B = dict(h=4096, layers=32, heads=32, kv=32, inter=11008, vocab=32000)


def test_fc17_initialisation_peak_named_where_the_model_is_built_unsharded(tmp_path):
    args = deepspeed(tmp_path, LLAMA2_7B, zero=2, gpus=8, seq=2048, cluster="rtx-4090x8")
    _, data = check(args)
    rules = {v["rule"]: v for v in data["violations"]}
    assert "initialization_peak" in rules, list(rules)
    assert "exceeds the" in rules["initialization_peak"]["message"]
    assert "meta device" in rules["initialization_peak"]["fix"]
    _, data = check(torchtitan(tmp_path, LLAMA2_7B, gpus=8, seq=2048, cluster="rtx-4090x8",
                               ac="full"))
    assert "initialization_peak" not in {v["rule"] for v in data["violations"]}


# FC-14 (SGLang #21347): tied embeddings under PP: the last stage holds its own copy of the
# 128,256 x 2,048 embedding (525,336,576 B in bf16), counted by `check` of a Megatron script that
# does not untie them (16 layers, pp 2: 8 layers a stage).
def test_fc14_tied_embedding_copy_counted_on_the_last_stage(tmp_path):
    m = dict(h=2048, layers=16, heads=32, kv=8, inter=8192, vocab=128256)
    path, *rest = megatron(tmp_path, m, pp=2, gpus=2, gbs=8)
    path.write_text(path.read_text().replace("--untie-embeddings-and-output-weights ", ""))
    code, data = check([path, *rest])
    assert code == 0, data["violations"]
    # a layer: q 2048 x 32 x 64, k and v 2048 x 8 x 64 each, o 32 x 64 x 2048, SwiGLU 3 x 2048 x
    # 8192, two RMSNorms of 2048
    layer = 2048 * 2048 + 2 * 2048 * 512 + 2048 * 2048 + 3 * 2048 * 8192 + 2 * 2048
    embedding = 128256 * 2048
    first, last = (s["memory_bytes"]["parameters"] for s in data["stages"])
    assert first == (8 * layer + embedding) * 2
    assert last == (8 * layer + 2048 + embedding) * 2  # final norm + the tied copy
    assert embedding * 2 == 525_336_576


# Issue 8 item 3 (pipeline layouts of any layer count), read from Megatron-LM flags: 30 layers on
# pp 4 with vpp 2 and both account-for options: (30 + 2) slots / 8 virtual stages = 4 each, the
# embedding taking one of chunk 0's and the loss one of chunk 7's -> chunks 3,4,4,4,4,4,4,3;
# chunk c on rank c % 4: ranks hold 3+4, 4+4, 4+4, 4+3 = 7, 8, 8, 7 layers.
def test_account_for_options_give_the_uneven_interleaved_split(tmp_path):
    extra = ("--num-virtual-stages-per-pipeline-rank 2 --account-for-embedding-in-pipeline-split "
             "--account-for-loss-in-pipeline-split")
    code, data = check(megatron(tmp_path, FC09, pp=4, gpus=8, extra=extra))
    assert code == 0, data["violations"]
    assert data["parallelism"]["vpp"] == 2
    assert data["parallelism"]["pipeline_layers"] == [7, 8, 8, 7]


def test_layout_string_sets_vpp_and_refuses_the_vpp_flag_beside_it(tmp_path):
    """`--pipeline-model-parallel-layout "Et|(tttt|)*6tttL"`: 8 virtual stages on pp 4 -> vpp 2,
    the same 7/8/8/7 split; Megatron-LM refuses the layout with a vpp flag."""
    layout = "--pipeline-model-parallel-layout 'Et*3|(t*4|)*6t*3L'"
    code, data = check(megatron(tmp_path, FC09, pp=4, gpus=8, extra=layout))
    assert code == 0, data["violations"]
    assert (data["parallelism"]["vpp"], data["parallelism"]["pipeline_layers"]) == (2, [7, 8, 8, 7])
    text = error(megatron(tmp_path, FC09, pp=4, gpus=8,
                          extra=f"{layout} --num-virtual-stages-per-pipeline-rank 2"),
                 "pipeline_layout_args")
    assert "--num-virtual-stages-per-pipeline-rank" in text and "takes the layout alone" in text
