torchrun --nproc_per_node 8 pretrain_gpt.py \
  # the model
 --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --seq-length 4096 --max-position-embeddings 131072 --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 --untie-embeddings-and-output-weights --disable-bias-linear --bf16 --micro-batch-size 1 --global-batch-size 256 --use-distributed-optimizer
