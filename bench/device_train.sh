#!/usr/bin/env bash
# On the GPU machine (binaries from bench/device_pack.sh, carried in .device/):
# the TransformerNP's GPU tests, its gradients against PyTorch autograd, and
# the benchmark matrix: Rustile with and without CUDA graphs and
# checkpointing beside PyTorch eager and torch.compile, per shape.
# Usage: [PARTS=tests,sanitize,check,ours,torch] [SHAPES="small mid large"] [STEPS=20] bash bench/device_train.sh
# `sanitize` runs each test of tests/gpu_train.rs and train/tests/ in a process of
# its own under compute-sanitizer (SANITIZE_TOOLS, default memcheck,synccheck,racecheck),
# one verdict line per test in sanitize.txt.
# results.jsonl (one JSON line per measured variant) goes to $OUT (or ./out),
# every log into $OUT/train-logs.tgz (the device returns a few files only).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
LOGS="$OUT/logs"; mkdir -p "$LOGS"
[ -f .device/bins.txz ] && tar -C .device -xJf .device/bins.txz
PARTS=${PARTS:-tests,check,ours,torch}
SHAPES=${SHAPES:-small mid large}
STEPS=${STEPS:-20}
status=0
has() { [[ ",$PARTS," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "commit $(cat .device/COMMIT 2>/dev/null)" | tee -a "$OUT/gpu.txt"

if has tests; then
    for t in .device/gpu_train-* .device/transformer_np-*; do
        "$t" --test-threads=1 > "$LOGS/tests-$(basename "$t" | cut -d- -f1).txt" 2>&1 || status=1
        tail -3 "$LOGS/tests-$(basename "$t" | cut -d- -f1).txt"
    done
fi

if has sanitize; then
    for tool in $(echo "${SANITIZE_TOOLS:-memcheck,synccheck,racecheck}" | tr , ' '); do
        for t in .device/gpu_train-* .device/transformer_np-*; do
            for name in $("$t" --list 2>/dev/null | sed -n 's/: test$//p'); do
                log="$LOGS/sanitize-$tool-$(basename "$t" | cut -d- -f1)-$name.txt"
                start=$SECONDS
                timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 86 --print-limit 20 "$t" --exact "$name" --test-threads=1 > "$log" 2>&1
                case $? in 0) v=clean ;; 86) v=ERRORS; status=1 ;; 124) v=TIMEOUT ;; *) v=FAILED; status=1 ;; esac
                grep -q "^SKIPPED" "$log" && v=SKIPPED
                echo "$v $tool $((SECONDS - start)) s $(basename "$t" | cut -d- -f1) $name" | tee -a "$OUT/sanitize.txt"
            done
        done
    done
fi

if has check; then
    # One forward and backward at the small shape, against PyTorch autograd.
    .device/transformer-np --shape small --dump "$OUT/dump" > "$LOGS/check.txt" 2>&1 || status=1
    python3 bench/transformer_np.py --check "$OUT/dump" >> "$LOGS/check.txt" 2>&1 || status=1
    rm -rf "$OUT/dump"
    tail -25 "$LOGS/check.txt"
fi

# Our runner's summary line as one JSON line.
ours() {
    local shape=$1 steps=$2; shift 2
    local log="$LOGS/ours-$shape$(printf -- '%s' "$@" | tr -d ' ').txt"
    .device/transformer-np --shape "$shape" --steps "$steps" --every 5 --profile "$@" > "$log" 2>&1 || { status=1; tail -5 "$log"; return; }
    python3 - "$log" "$shape" "$*" >> "$OUT/results.jsonl" <<'PY'
import json, re, sys
log, shape, flags = sys.argv[1], sys.argv[2], sys.argv[3]
s = open(log).read()
m = re.search(r"median step ([\d.]+) ms, (\d+) tokens/s, loss ([\d.e+-]+|NaN) → ([\d.e+-]+|NaN), device memory in use ([\d.]+) GB", s)
print(json.dumps({"variant": "rustile" + flags.replace("--", " "), "shape": shape, "step_ms": float(m[1]), "tokens_per_s": float(m[2]),
                  "loss_first": m[3], "loss_last": m[4], "peak_gb": float(m[5])}))
PY
    echo "== $shape $*"; grep -E "^(summary|floor|profile)" "$log"
}

if has ours; then
    for shape in $SHAPES; do
        steps=$STEPS; [ "$shape" = large ] && steps=4
        ours "$shape" "$steps"
        ours "$shape" "$steps" --graphs
        ours "$shape" "$steps" --checkpoint
        ours "$shape" "$steps" --graphs --checkpoint
    done
fi

if has torch; then
    for shape in $SHAPES; do
        steps=$STEPS; [ "$shape" = large ] && steps=3
        python3 bench/transformer_np.py --bench --shape "$shape" --steps "$steps" >> "$OUT/results.jsonl" 2> "$LOGS/torch-$shape.txt" || { status=1; tail -5 "$LOGS/torch-$shape.txt"; }
    done
fi
cat "$OUT/results.jsonl" 2>/dev/null
tar -C "$OUT" -czf "$OUT/train-logs.tgz" logs && rm -rf "$LOGS"
exit $status
