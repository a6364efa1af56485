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
# (Measured and gone from dev/, in git history: bwd_one_barrier.patch, whose plain dK/dV hunk is in
# the library and whose dQ hunks were slower; dkdv_int_positions.patch, slower.)
# The forms that compute (every one but a0 and the a* ablations) run test_mma first and are dropped
# from the timing if it fails. Run from the repository root with a Release build in BUILD (default
# build-gpu, targets flashcl_tool and test_mma). Environment: TURNS (default 3), FORMS (default
# main dsstages), SHAPES (bench options, one shape per line; default the README's b4
# h16 N4096 d128 bf16 backward, plain and causal, b16 N1024 d64, the causal window-4095 GQA row, b4
# h16 N4096 d256 and the Gemma-2 row: d256 causal softcap 50 window 4095, GQA).
set -euo pipefail
build=${BUILD:-build-gpu} turns=${TURNS:-3}
forms=${FORMS:-main dsstages}
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
    cp -r cl "$dir"
    case $1 in
    main) ;;
    a*) apply "$dir" dkdv_ablate.patch && sed -i "1i #define MB_ABLATE ${1#a}" "$dir/flash_bwd_mma.cl" ;;
    dpfirst) apply "$dir" dkdv_ablate.patch && sed -i '1i #define MB_ORDER_DP_FIRST 1' "$dir/flash_bwd_mma.cl" ;;
    dsstages) apply "$dir" ds_part_stages.patch ;;
    *) echo "dkdv_experiment: no form $1" >&2; exit 2 ;;
    esac
}
kept=()
for f in $forms; do
    make_form "$f"
    case $f in main | a[0-9]*) computes=0 ;; *) computes=1 ;; esac # the ablations are timing only
    if [ "$computes" = 1 ]; then
        if FLASHCL_KERNEL_DIR=$work/$f FLASHCL_CACHE_DIR=$work/cache-$f "$build/tests/test_mma" >"$work/$f.test.log" 2>&1; then
            echo "dkdv_experiment: test_mma passed on $f"
        else
            tail -5 "$work/$f.test.log"; echo "dkdv_experiment: test_mma failed on $f: not timed"; continue
        fi
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
