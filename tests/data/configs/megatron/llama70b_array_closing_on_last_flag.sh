export CUDA_DEVICE_MAX_CONNECTIONS=1
ARGS=(--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 --group-query-attention --num-query-groups 8
 --seq-length 4096 --max-position-embeddings 131072 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu
 --untie-embeddings-and-output-weights --disable-bias-linear --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 --sequence-parallel
 --micro-batch-size 1 --global-batch-size 1024 --bf16 --use-distributed-optimizer)
torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py "${ARGS[@]}"
