#!/usr/bin/env bash
# Here, where Rust is: packs what bench/device_run.sh runs on the GPU machine
# (which has no Rust) into .device/: the release bench, tuner and transformer-np
# runner and the GPU test binaries (host/tests/gpu.rs, tests/gpu_{ops,fuzz,train}.rs,
# train/tests/transformer_np.rs) as
# .device/bins.txz, the commit (plus "+dirty" for uncommitted changes) in
# .device/COMMIT. Build the kernels first: `cargo xtask build --arch sm90a`
# (the binaries embed the cubins in target/cubins). Then carry .device:
#   device run: carry [".device"], command: bash bench/device_run.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the archive travels (the carry limit is 64 MiB). Every binary embeds the same
# kernel images (~50 MB): xz with a dictionary larger than one binary stores them once
# (8.6 MB for all eight, against 78 MB as gzip, which compresses each on its own).
rm -rf .device/pack && mkdir -p .device/pack
# The lent GPUs are Hopper: the binaries embed only the sm_90a images (PACK_ARCHES
# to change), which halves them. A change of this list rebuilds rustile-ops.
# (The folder is left alone when it already holds those links: its build script watches it.)
mkdir -p target/pack-cubins
for link in target/pack-cubins/*; do
    [[ -L $link && " ${PACK_ARCHES:-sm_90a} " == *" $(basename "$link") "* ]] || rm -rf "$link"
done
for arch in ${PACK_ARCHES:-sm_90a}; do
    [ -L "target/pack-cubins/$arch" ] || ln -s "$PWD/target/cubins/$arch" "target/pack-cubins/$arch"
done
export RUSTILE_CUBIN_DIR=$PWD/target/pack-cubins
# ONLY=train packs only what bench/device_train.sh runs (the runner and the training tests).
if [ "${ONLY:-}" = train ]; then
    cargo build --release -p rustile-train --bins
    cp target/release/transformer-np .device/pack/
    TESTS="-p rustile-tests -p rustile-train --test gpu_train --test transformer_np"
else
    cargo build --release -p rustile-bench -p rustile-train --bins
    cp target/release/rustile-bench target/release/rustile-tune target/release/transformer-np .device/pack/
    TESTS="-p rustile-host -p rustile-tests -p rustile-train --test gpu --test gpu_ops --test gpu_fuzz --test gpu_train --test transformer_np --test quasar"
fi
cargo test --release --no-run $TESTS --message-format=json \
    | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        exe = m["executable"]
        shutil.copy(exe, ".device/pack/" + exe.rsplit("/", 1)[1])
        print("packed", exe.rsplit("/", 1)[1])
'
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +dirty)" > .device/COMMIT
rm -f .device/bins.tgz
tar -C .device/pack -cf - . | xz -T1 --lzma2=preset=1,dict=256MiB > .device/bins.txz && rm -rf .device/pack
ls -la .device/bins.txz; cat .device/COMMIT
