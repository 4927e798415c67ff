#!/bin/bash
# fresh-user review 9 (2026-12-02) as the reviewer wrote it, warm-up 500 instead of 5000 (their lr_warmup_not_below_decay finding is another test)
#SBATCH -N 4
#SBATCH --ntasks-per-node=8
set -euo pipefail
GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-4}
WORLD=$((GPUS_PER_NODE * NNODES))
TP=${TP:-2}
PP=${PP:-1}
DP=$((WORLD / TP / PP))
MBS=2
GBS=$((DP * MBS * 4))
export CUDA_DEVICE_MAX_CONNECTIONS=1
MODEL_ARGS=(--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32
  --group-query-attention --num-query-groups 8 --seq-length 16384 --max-position-embeddings 131072
  --swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear)
OPT_ARGS=(--lr=3e-4 --min-lr=3e-5 --lr-warmup-iters=500 --lr-decay-iters=4000 --train-iters=10000 --lr-decay-style=cosine)
srun --cpu-bind=none --container-image=/images/megatron.sqsh \
python -u pretrain_gpt.py ${MODEL_ARGS[*]} ${OPT_ARGS[*]} \
  --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP --sequence-parallel \
  --context-parallel-size 2 \
  --micro-batch-size $MBS --global-batch-size $GBS --bf16 --use-distributed-optimizer \
  --data-path /data/x --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-3.1-8B
