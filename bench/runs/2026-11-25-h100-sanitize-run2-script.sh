#!/usr/bin/env bash
# Every GPU test and the GEMM family's --check under memcheck, synccheck and racecheck
# (racecheck at most 240 s a test), on the tree of .device/COMMIT.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
cat .device/COMMIT
for tool in memcheck synccheck racecheck; do
    t=300; [ $tool = racecheck ] && t=240
    SANITIZE=$tool SANITIZE_JOBS=8 SANITIZE_TIMEOUT=$t bash bench/device_run.sh > "$OUT/run-$tool.txt" 2>&1
    echo "$tool: exit $?"
    mv "$OUT/sanitize-logs.tgz" "$OUT/logs-$tool.tgz" 2>/dev/null
done
grep -h -v "^clean" "$OUT"/sanitize-*.txt
grep -h "==> .*clean" "$OUT"/run-*.txt
# Few files come back: the runs' output and per-test logs as one archive.
tar -C "$OUT" -czf "$OUT/all-logs.tgz" $(cd "$OUT" && ls run-*.txt logs-*.tgz) && rm -f "$OUT"/run-*.txt "$OUT"/logs-*.tgz
