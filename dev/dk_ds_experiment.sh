#!/usr/bin/env bash
# dK and dV from stored scratches above d = 128 (in the library since 2026-12-07; it was
# dev/bwd_dk_from_ds.patch), checked and timed against the older forms in one device call. One
# build runs all three forms, alternating in one process tree:
#   ps      the default: the dS part stores dS^T and (P Z)^T, flash_bwd_mma_dk_ds forms dK and dV
#   ds      FLASHCL_BWD_DV_PS=0: dK from dS^T, dV from the dV part
#   slices  FLASHCL_BWD_DK_DS=0: the dV part and two dK slices (the library before)
# It first runs test_mma in each form and the d > 128 cases of test_variants (bf16, f16), and
# checks that the three forms give the same dQ, dK and dV bit for bit (the same products in the
# same order) on a GQA d = 256 call with a window and dropout; a failure stops before the timing
# (the bench checks no output). Run from the repository root on the device machine, after sourcing
# .nvcl/nvidia-opencl.sh (CMAKE_ARGS). Environment: TURNS (default 2), WORK (default /tmp/dk_ds),
# PYTHON (a python3 with numpy; default python3).
set -euo pipefail
turns=${TURNS:-2} work=${WORK:-/tmp/dk_ds} here=$(pwd)
rm -rf "$work" && mkdir -p "$work"
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of options
cmake -S "$here" -B "$work/build" ${CMAKE_ARGS:-} -DCMAKE_BUILD_TYPE=Release -DFLASHCL_MPI=OFF >/dev/null
cmake --build "$work/build" -j"$(nproc)" --target flashcl_tool test_mma test_variants >/dev/null
export FLASHCL_CACHE_DIR=$work/cache
t=$work/build/tests
forms=(ps ds slices)
form_env() { case $1 in ps) echo "FLASHCL_BWD_DV_PS=1" ;; ds) echo "FLASHCL_BWD_DV_PS=0" ;; slices) echo "FLASHCL_BWD_DK_DS=0" ;; esac; }
for f in "${forms[@]}"; do env "$(form_env "$f")" "$t/test_mma" | tail -1; done
for storage in bf16 f16; do # the sliced cases: d = 256, 144, 192 with windows, block masks, GQA, dropout
    for c in 40 41 44 49; do "$t/test_variants" --case $c --no-family-check --storage $storage --tensor-cores | tail -1; done
done
FLASHCL_BWD_DV_PS=0 "$t/test_variants" --case 49 --no-family-check --storage bf16 --tensor-cores | tail -1
"${PYTHON:-python3}" - "$work" <<'PY'
import sys, numpy as np
w = sys.argv[1]; r = np.random.default_rng(5)
for name, shape in (("q", (2, 200, 4, 256)), ("k", (2, 230, 2, 256)), ("v", (2, 230, 2, 256)), ("do", (2, 200, 4, 256))):
    np.save(f"{w}/{name}.npy", r.standard_normal(shape).astype(np.float32))
PY
for f in "${forms[@]}"; do
    env "$(form_env "$f")" "$work/build/tools/flashcl" attention --q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy" \
        --out "$work/o_$f.npy" --dout "$work/do.npy" --dq "$work/dq_$f.npy" --dk "$work/dk_$f.npy" --dv "$work/dv_$f.npy" \
        --dtype bf16 --causal --window 100,0 --dropout 0.1,7 >/dev/null
done
"${PYTHON:-python3}" - "$work" <<'PY'
import sys, numpy as np
w = sys.argv[1]
for g in ("dq", "dk", "dv"):
    a = np.load(f"{w}/{g}_slices.npy")
    for f in ("ds", "ps"):
        b = np.load(f"{w}/{g}_{f}.npy")
        same = np.array_equal(a, b)
        print(f"{g} {f} vs slices: {'bitwise equal' if same else 'DIFFERENT, max %.3g' % np.abs(a - b).max()}")
        if not same: sys.exit(1)
PY
echo "dk_ds_experiment: tests passed"
shapes=("--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --head-dim 256"
    "--dtype bf16 --batch 2 --heads 16 --kv-heads 8 --seqlen 8192 --head-dim 256 --causal --softcap 50 --window 4095,0"
    "--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --head-dim 192")
for shape in "${shapes[@]}"; do
    echo "== $shape"
    for turn in $(seq "$turns"); do
        for f in "${forms[@]}"; do
            # shellcheck disable=SC2086  # the shape is a list of options
            env "$(form_env "$f")" "$work/build/tools/flashcl" bench $shape --path flash --no-plain --iters 10 \
                --read-bw off --backward --kernels 2>&1 | grep -E '^(kernels|flash\+variants) ' | sed "s/^/$f turn $turn: /"
        done
    done
done
