"""Megatron-LM multi-latent attention sizes its heads from the qk, rope and v head dims and never reads
--kv-channels (NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/multi_latent_attention.py l. 165-168:
q_head_dim = qk_head_dim + qk_pos_emb_head_dim), so `check` must not compare --kv-channels (or its
hidden / heads default, 7168 / 128 = 56) with DeepSeek-V3's head_dim (senior review 6 H5: NVIDIA's own
examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh l. 64 sets --kv-channels 128; the tool exited 2).

tests/data/configs/megatron/deepseek_v3_e10_1024xh100.sh: E10's recipe (Megatron-Bridge 25.09 DeepSeek-V3
on 1,024 H100, expert_configs.yaml) written as a Megatron-LM launch, without --kv-channels."""

from pathlib import Path

import cli_run

SCRIPT = Path("tests/data/configs/megatron/deepseek_v3_e10_1024xh100.sh")
ARGS = ("-m", "deepseek-v3", "-c", "dgx-h100", "--gpus", "1024")


def test_mla_script_without_kv_channels_is_read():
    proc = cli_run.planner("check", str(SCRIPT), *ARGS)
    assert proc.returncode in (0, 1), proc.stderr
    assert "--kv-channels" not in proc.stderr + proc.stdout


def test_mla_script_with_nvidias_kv_channels_128_is_read(tmp_path):
    text = SCRIPT.read_text().replace("--num-attention-heads 128", "--num-attention-heads 128 --kv-channels 128")
    assert "--kv-channels 128" in text
    path = tmp_path / "dsv3_kv128.sh"
    path.write_text(text)
    proc = cli_run.planner("check", str(path), *ARGS)
    assert proc.returncode in (0, 1), proc.stderr
