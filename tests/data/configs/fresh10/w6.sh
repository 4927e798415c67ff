MODEL="meta-llama/Llama-3.1-8B-Instruct"
case "$NODE_RANK" in
 0) vllm serve $MODEL --tensor-parallel-size 8 --port 8000 ;;
 1) vllm serve $MODEL --tensor-parallel-size 8 --port 8000 ;;
esac
