export CUDA_VISIBLE_DEVICES=0,1,2,3
vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 --port 8000 &
vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 --port 8001 &
wait
