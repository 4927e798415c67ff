# fresh-user review 9 finding 9 (2026-12-02), as the reviewer wrote it: FSDP + pp 2, a 26 GiB transient on stage 1
NGPU=${NGPU:-8}
torchrun --nproc_per_node=$NGPU --nnodes=4 --rdzv_backend c10d --rdzv_endpoint=$MASTER_ADDR:29500 \
  -m torchtitan.train --module llama3 --config llama3_70b \
  --parallelism.tensor_parallel_degree 8 --parallelism.pipeline_parallel_degree 2 \
  --parallelism.data_parallel_shard_degree -1 --training.num_tokens_per_microbatch_per_dp_rank 16384 --training.max_context_length 8192 --parallelism.num_pp_microbatches 2 \
  --compile.enable activation-checkpoint:selective
