#!/bin/bash
# DeepSeek-V3 on 1024 H100 as Megatron-Bridge 25.09 (E10): TP2 PP8 VPP4 EP64 ETP1, mbs1 gbs8192 seq4096, fp8, selective recompute
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 --nnodes 128 pretrain_gpt.py \
  --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 \
  --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 \
  --num-experts 256 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 --moe-router-topk 8 \
  --moe-layer-freq "([0]*3+[1]*58)" --moe-grouped-gemm --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep \
  --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-topk-scaling-factor 2.5 \
  --moe-router-num-groups 8 --moe-router-group-topk 4 --moe-router-dtype fp32 \
  --seq-length 4096 --max-position-embeddings 4096 --position-embedding-type rope --normalization RMSNorm --swiglu \
  --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 129280 \
  --tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 8 \
  --pipeline-model-parallel-layout "Et|(tt|)*30L" \
  --expert-model-parallel-size 64 --expert-tensor-parallel-size 1 \
  --micro-batch-size 1 --global-batch-size 8192 --bf16 --fp8-format hybrid --fp8-recipe blockwise \
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
  --recompute-granularity selective --recompute-modules mla_up_proj mlp \
  --mock-data --tokenizer-type NullTokenizer
