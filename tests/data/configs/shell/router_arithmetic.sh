# planner serve-plan --emit vllm: llama-3.1-8b on up to 8 x dgx-h100 (vLLM 0.33.0 (g4ba787ec9); one command per instance, each on its own GPUs and port)
# serve-plan -m llama-3.1-8b -c dgx-h100 --gpus 8 --input-len 2000 --output-len 200 --disaggregated --emit vllm, its router ports rewritten as $((BASE)) and $((BASE + 7))
# max-model-len 2203: input + output = 2,200 tokens rounded up to the longest at which each worker's KV pool still holds its planned batch at full length, so that a prompt a few chat-template tokens longer is not refused; the KV pool and concurrency are planned for 2,200-token requests (the engine allocates KV as a sequence grows)
# tp1 @1 prefill worker 1 of 6 (node 0)
VLLM_NIXL_SIDE_CHANNEL_PORT=5600 CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1 --max-model-len 2203 --gpu-memory-utilization 0.92 --max-num-seqs 1 --max-num-batched-tokens 8192 --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8000 &
# tp1 @1 prefill worker 2 of 6 (node 0)
VLLM_NIXL_SIDE_CHANNEL_PORT=5601 CUDA_VISIBLE_DEVICES=1 vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1 --max-model-len 2203 --gpu-memory-utilization 0.92 --max-num-seqs 1 --max-num-batched-tokens 8192 --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8001 &
# tp1 @1 prefill worker 3 of 6 (node 0)
VLLM_NIXL_SIDE_CHANNEL_PORT=5602 CUDA_VISIBLE_DEVICES=2 vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1 --max-model-len 2203 --gpu-memory-utilization 0.92 --max-num-seqs 1 --max-num-batched-tokens 8192 --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8002 &
# tp1 @1 prefill worker 4 of 6 (node 0)
VLLM_NIXL_SIDE_CHANNEL_PORT=5603 CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1 --max-model-len 2203 --gpu-memory-utilization 0.92 --max-num-seqs 1 --max-num-batched-tokens 8192 --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8003 &
# tp1 @1 prefill worker 5 of 6 (node 0)
VLLM_NIXL_SIDE_CHANNEL_PORT=5604 CUDA_VISIBLE_DEVICES=4 vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1 --max-model-len 2203 --gpu-memory-utilization 0.92 --max-num-seqs 1 --max-num-batched-tokens 8192 --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8004 &
# tp1 @1 prefill worker 6 of 6 (node 0)
VLLM_NIXL_SIDE_CHANNEL_PORT=5605 CUDA_VISIBLE_DEVICES=5 vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1 --max-model-len 2203 --gpu-memory-utilization 0.92 --max-num-seqs 1 --max-num-batched-tokens 8192 --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8005 &
# tp1 @201 decode worker 1 of 2 (node 0)
VLLM_NIXL_SIDE_CHANNEL_PORT=5606 CUDA_VISIBLE_DEVICES=6 vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1 --max-model-len 2203 --gpu-memory-utilization 0.92 --max-num-seqs 201 --max-num-batched-tokens 8192 --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8006 &
# tp1 @201 decode worker 2 of 2 (node 0)
VLLM_NIXL_SIDE_CHANNEL_PORT=5607 CUDA_VISIBLE_DEVICES=7 vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1 --max-model-len 2203 --gpu-memory-utilization 0.92 --max-num-seqs 201 --max-num-batched-tokens 8192 --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' --port 8007 &
# router (vllm-router 0.1.17, a package of its own: pip install vllm-router==0.1.17), on node 0: it sends each request to a prefill worker, then to a decode worker; clients send requests to its port 30000
BASE=8000
vllm-router --vllm-pd-disaggregation --prefill http://127.0.0.1:$((BASE)) --prefill http://127.0.0.1:8001 --prefill http://127.0.0.1:8002 --prefill http://127.0.0.1:8003 --prefill http://127.0.0.1:8004 --prefill http://127.0.0.1:8005 --decode http://127.0.0.1:8006 --decode http://127.0.0.1:$((BASE + 7)) --kv-connector nixl --host 0.0.0.0 --port 30000 &
wait
