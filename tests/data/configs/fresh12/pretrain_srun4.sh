#!/bin/bash
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
export CUDA_DEVICE_MAX_CONNECTIONS=1
MODEL_ARGS="--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 --group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 131072 --swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256"
srun --container-image=nvcr.io#nvidia/nemo:25.04 bash -c "python pretrain_gpt.py $MODEL_ARGS --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel --micro-batch-size 1 --global-batch-size 128 --bf16 --use-distributed-optimizer --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
