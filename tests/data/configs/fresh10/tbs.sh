torchrun --nproc_per_node=8 -m torchtitan.train --module llama3 --config llama3_8b \ 
 --parallelism.tensor_parallel_degree 2
