export CUDA_VISIBLE_DEVICES=0,1,2,3
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct --tp 8 --port 30000
