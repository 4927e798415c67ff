# fresh-user review 9 finding 4 (2026-12-02), as the reviewer wrote it: old batch names with pp 2
NGPU=${NGPU:-8}
torchrun --nproc_per_node=$NGPU --nnodes=4 --rdzv_backend c10d --rdzv_endpoint=$MASTER_ADDR:29500 \
  -m torchtitan.train --module llama3 --config llama3_70b \
  --parallelism.tensor_parallel_degree 8 --parallelism.pipeline_parallel_degree 2 \
  --parallelism.data_parallel_shard_degree -1 --training.local_batch_size 2 --training.seq_len 8192 \
  --compile.enable --activation_checkpoint.mode selective
