#!/usr/bin/env bash
# Call 7: torch.compile on cuDNN's SDPA compiled afresh (call 6 reused the
# flash-traced graph) at mid; the large shape: ours with graphs, PyTorch
# torch.compile on cuDNN's SDPA.
set -u
OUT=${OUT:-out}
tar -C .device -xJf .device/bins.txz
timeout 150 python3 bench/transformer_np.py --bench --shape mid --steps 20 --variants compile --sdpa cudnn 2> "$OUT/torch-mid.err" | tee "$OUT/torch-mid.jsonl"
.device/transformer-np --shape large --steps 4 --every 1 --profile --graphs > "$OUT/ours-large.txt" 2>&1
grep -E "^(summary|profile)" "$OUT/ours-large.txt"
timeout 300 python3 bench/transformer_np.py --bench --shape large --steps 3 --variants compile --sdpa cudnn 2> "$OUT/torch-large.err" | tee "$OUT/torch-large.jsonl"
tail -2 "$OUT/torch-mid.err" "$OUT/torch-large.err"
