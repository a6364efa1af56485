#!/usr/bin/env bash
# Kernel forms of the backward that are not in the library, timed side by side in one process tree:
# each form is a copy of cl/ with patches from dev/ applied (never the library's kernels), timed with
# `flashcl bench --kernels` through FLASHCL_KERNEL_DIR, the forms alternating over TURNS rounds so
# that the machine's drift touches them all alike. The forms:
#   main        cl/ as it is
#   a0          dkdv_ablate.patch with every switch off (must time as main: the patch is neutral)
#   a1 a2 a4 a8 a15   dkdv_ablate.patch's MB_ABLATE bits in the plain dK/dV kernel: 1 the tile
#               loop's barriers, 2 the exp2, 4 the dS store, 8 the dV products, 15 all four (wrong
#               results: timing only; docs/nvidia.md has the H100's figures)
#   dpfirst     dkdv_ablate.patch's MB_ORDER_DP_FIRST=1: dP^T issued beside S^T (measured: slower)
#   dsstages    ds_part_stages.patch: the dS part above d = 128 (MB_PART = 3) double-buffers its
#               Q/dO tiles; bitwise equal to main in a review's H100 check, not yet timed
#   split2x2    ds_products_2x2.patch: above d = 128, flash_bwd_mma_dk_ds and flash_bwd_mma_dq_ds
#               on 2 x 2 warps (32 keys or rows x half the dims each): 10 ldmatrix a 16-row k-step
#               where there were 17 at d = 256; not yet run on a GPU
#   dsstages_split2x2  both
# (Measured and gone from dev/, in git history: bwd_one_barrier.patch, whose plain dK/dV hunk is in
# the library and whose dQ hunks were slower; dkdv_int_positions.patch, slower.)
# The forms that compute (every one but a0 and the a* ablations) run test_mma first and are dropped
# from the timing if it fails. Run from the repository root with a Release build in BUILD (default
# build-gpu, targets flashcl_tool and test_mma). Environment: TURNS (default 3), FORMS (default
# main dsstages split2x2 dsstages_split2x2), SHAPES (bench options, one shape per line; default the README's b4
# h16 N4096 d128 bf16 backward, plain and causal, b16 N1024 d64, the causal window-4095 GQA row, b4
# h16 N4096 d256 and the Gemma-2 row: d256 causal softcap 50 window 4095, GQA).
set -euo pipefail
build=${BUILD:-build-gpu} turns=${TURNS:-3}
forms=${FORMS:-main dsstages split2x2 dsstages_split2x2}
shapes=${SHAPES:-"--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --head-dim 128
--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --head-dim 128 --causal
--dtype bf16 --batch 16 --heads 16 --seqlen 1024 --head-dim 64
--dtype bf16 --batch 2 --heads 16 --kv-heads 8 --seqlen 8192 --head-dim 128 --causal --window 4095,0
--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --head-dim 256
--dtype bf16 --batch 2 --heads 16 --kv-heads 8 --seqlen 8192 --head-dim 256 --causal --softcap 50 --window 4095,0"}
[ -x "$build/tools/flashcl" ] || { echo "dkdv_experiment: no $build/tools/flashcl" >&2; exit 2; }
work=$(mktemp -d /tmp/dkdv_experiment.XXXX) here=$(pwd)
trap 'rm -rf "$work"' EXIT # the kernel copies and their program caches, also when a form fails

apply() { # kernel directory, patch name in dev/
    (cd "$1" && patch -s -p2 <"$here/dev/$2")
}
make_form() { # form name -> kernel directory
    local dir=$work/$1
    [ -d "$dir" ] && return 0 # made already (main, for the bitwise check)
    cp -r cl "$dir"
    case $1 in
    main) ;;
    a*) apply "$dir" dkdv_ablate.patch && sed -i "1i #define MB_ABLATE ${1#a}" "$dir/flash_bwd_mma.cl" ;;
    dpfirst) apply "$dir" dkdv_ablate.patch && sed -i '1i #define MB_ORDER_DP_FIRST 1' "$dir/flash_bwd_mma.cl" ;;
    dsstages) apply "$dir" ds_part_stages.patch ;;
    split2x2) apply "$dir" ds_products_2x2.patch ;;
    dsstages_split2x2) apply "$dir" ds_part_stages.patch && apply "$dir" ds_products_2x2.patch ;;
    *) echo "dkdv_experiment: no form $1" >&2; exit 2 ;;
    esac
}
# The gradients of a form that does the same products in the same order (dsstages, split2x2) must
# equal main's bit for bit: GQA d = 256 causal with a window and dropout, and a varlen d = 192 call
# (two sequences) with a window; inputs written by PYTHON (default python3, with numpy).
"${PYTHON:-python3}" - "$work" <<'PY'
import sys, numpy as np
w = sys.argv[1]; r = np.random.default_rng(5)
for name, shape in (("q", (2, 200, 4, 256)), ("k", (2, 230, 2, 256)), ("v", (2, 230, 2, 256)), ("do", (2, 200, 4, 256)),
                    ("vq", (330, 6, 192)), ("vk", (390, 2, 192)), ("vv", (390, 2, 192)), ("vdo", (330, 6, 192))):
    np.save(f"{w}/{name}.npy", r.standard_normal(shape).astype(np.float32))
np.save(f"{w}/cq.npy", np.array([0, 130, 330], np.int32)); np.save(f"{w}/ck.npy", np.array([0, 250, 390], np.int32))
PY
gradients() { # form -> its dq/dk/dv .npy files in $work/g-<form>/
    local g=$work/g-$1 e=(env "FLASHCL_KERNEL_DIR=$work/$1" "FLASHCL_CACHE_DIR=$work/cache-$1")
    mkdir -p "$g"
    "${e[@]}" "$build/tools/flashcl" attention --q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy" --dout "$work/do.npy" \
        --out "$g/o.npy" --dq "$g/a_dq.npy" --dk "$g/a_dk.npy" --dv "$g/a_dv.npy" --dtype bf16 --causal --window 100,0 \
        --dropout 0.1,7 >/dev/null &&
        "${e[@]}" "$build/tools/flashcl" attention --q "$work/vq.npy" --k "$work/vk.npy" --v "$work/vv.npy" \
            --dout "$work/vdo.npy" --cu-seqlens-q "$work/cq.npy" --cu-seqlens-k "$work/ck.npy" --out "$g/o.npy" \
            --dq "$g/b_dq.npy" --dk "$g/b_dk.npy" --dv "$g/b_dv.npy" --dtype bf16 --causal --window 60,5 >/dev/null
}
kept=()
for f in $forms; do
    make_form "$f"
    case $f in main | a[0-9]*) computes=0 ;; *) computes=1 ;; esac # the ablations are timing only
    if [ "$f" = main ] && [ ! -d "$work/g-main" ]; then gradients main; fi
    if [ "$computes" = 1 ]; then
        if FLASHCL_KERNEL_DIR=$work/$f FLASHCL_CACHE_DIR=$work/cache-$f "$build/tests/test_mma" >"$work/$f.test.log" 2>&1; then
            echo "dkdv_experiment: test_mma passed on $f"
        else
            tail -5 "$work/$f.test.log"; echo "dkdv_experiment: test_mma failed on $f: not timed"; continue
        fi
        case $f in dsstages | split2x2 | dsstages_split2x2)
            [ -d "$work/g-main" ] || { make_form main; gradients main; }
            same=1
            gradients "$f" || same=0
            for x in a_dq a_dk a_dv b_dq b_dk b_dv; do cmp -s "$work/g-main/$x.npy" "$work/g-$f/$x.npy" || same=0; done
            if [ "$same" = 1 ]; then echo "dkdv_experiment: $f's gradients equal main's bit for bit"; else
                echo "dkdv_experiment: $f's gradients differ from main's: not timed"; continue; fi ;;
        esac
    fi
    kept+=("$f")
done
while IFS= read -r shape; do
    [ -z "$shape" ] && continue
    echo "== $shape --backward"
    for turn in $(seq "$turns"); do
        for f in "${kept[@]}"; do
            # shellcheck disable=SC2086  # the shape is a list of options
            line=$(FLASHCL_KERNEL_DIR=$work/$f FLASHCL_CACHE_DIR=$work/cache-$f timeout 300 "$build/tools/flashcl" bench \
                $shape --path flash --no-plain --iters 10 --read-bw off --backward --kernels 2>&1 |
                grep -E '^kernels .* bwd ' || echo "(no kernels line)")
            printf '%-8s turn %d: %s\n' "$f" "$turn" "$line"
        done
    done
done <<<"$shapes"
