#!/usr/bin/env bash
# dK from the stored dS above d = 128 (dev/bwd_dk_from_ds.patch), checked and timed in one device
# call. The patch touches the host library too (a third program, two kernels, their launches), so
# it is applied to a copy of this tree (never to the checkout), built there, and timed against
# itself: FLASHCL_BWD_DK_DS=0 takes the dK slices of main in the same build, so the two forms
# alternate in one process tree. The copy first runs test_mma (with and without the new path) and
# the d > 128 cases of test_variants in bf16 and f16; a failure stops before the timing (the bench
# checks no output). Run from the repository root on the device machine, after sourcing
# .nvcl/nvidia-opencl.sh (CMAKE_ARGS). Environment: TURNS (default 2), WORK (default /tmp/dk_ds).
set -euo pipefail
turns=${TURNS:-2} work=${WORK:-/tmp/dk_ds} here=$(pwd)
rm -rf "$work" && mkdir -p "$work/src"
# The tree as it is (the device's copy has no .git), without builds and the driver's files.
tar --exclude='./build*' --exclude=./.nvcl --exclude=./.gpu --exclude=./.git --exclude=./.venv -cf - . | tar -x -C "$work/src"
(cd "$work/src" && patch -s -p1 <"$here/dev/bwd_dk_from_ds.patch")
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of options
cmake -S "$work/src" -B "$work/build" ${CMAKE_ARGS:-} -DCMAKE_BUILD_TYPE=Release -DFLASHCL_MPI=OFF >/dev/null
cmake --build "$work/build" -j"$(nproc)" --target flashcl_tool test_mma test_variants >/dev/null
export FLASHCL_CACHE_DIR=$work/cache
t=$work/build/tests
"$t/test_mma" | tail -1
FLASHCL_BWD_DK_DS=0 "$t/test_mma" | tail -1
for storage in bf16 f16; do # the sliced cases: d = 256, 144, 192 with windows, block masks, GQA, dropout
    for c in 40 41 44 49; do "$t/test_variants" --case $c --no-family-check --storage $storage --tensor-cores | tail -1; done
done
echo "dk_ds_experiment: tests passed"
shapes=("--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --head-dim 256"
    "--dtype bf16 --batch 2 --heads 16 --kv-heads 8 --seqlen 8192 --head-dim 256 --causal --softcap 50 --window 4095,0"
    "--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --head-dim 192")
for shape in "${shapes[@]}"; do
    echo "== $shape"
    for turn in $(seq "$turns"); do
        for form in 1 0; do # 1: the dS part and dk_ds; 0: the dK slices (main)
            # shellcheck disable=SC2086  # the shape is a list of options
            FLASHCL_BWD_DK_DS=$form "$work/build/tools/flashcl" bench $shape --path flash --no-plain --iters 10 \
                --read-bw off --backward --kernels 2>&1 | grep -E '^(kernels|flash\+variants) ' | sed "s/^/dk_ds=$form turn $turn: /"
        done
    done
done
