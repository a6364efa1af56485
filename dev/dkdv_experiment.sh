#!/usr/bin/env bash
# Where the plain dK/dV kernel's time goes (docs/nvidia.md, "Where the dK/dV kernel's time goes"):
# dev/dkdv_ablate.patch adds build switches to a copy of cl/ (never to the library's kernels), and
# this script times each form with `flashcl bench --kernels` in one process tree, forms alternating
# over TURNS rounds so that the machine's drift touches them all alike. The forms:
#   main      cl/ as it is
#   a0        the patched kernel with every switch off (must time as main: the patch is neutral)
#   a1 a2 a4 a8 a15   MB_ABLATE bits: 1 the tile loop's barriers, 2 the exp2, 4 the dS store,
#             8 the dV products, 15 all four (wrong results: timing only)
#   dpfirst   MB_ORDER_DP_FIRST=1: dP^T issued beside S^T before the softmax (a real reordering:
#             test_mma runs on it first, and the form is dropped from the timing if it fails)
# Run from the repository root with a Release build in BUILD (default build-gpu, targets flashcl_tool
# and test_mma). Environment: TURNS (default 3), FORMS (default all), SHAPES (bench options, one
# shape per line; default the README's b4 h16 N4096 d128 bf16 backward, plain and causal).
set -euo pipefail
build=${BUILD:-build-gpu} turns=${TURNS:-3}
forms=${FORMS:-main a0 a1 a2 a4 a8 a15 dpfirst}
shapes=${SHAPES:-"--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --head-dim 128
--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --head-dim 128 --causal"}
work=$(mktemp -d /tmp/dkdv_experiment.XXXX)
[ -x "$build/tools/flashcl" ] || { echo "dkdv_experiment: no $build/tools/flashcl" >&2; exit 2; }

make_form() { # form name -> kernel directory
    local dir=$work/$1
    cp -r cl "$dir"
    [ "$1" = main ] && return
    (cd "$dir" && patch -s -p2 <"$OLDPWD/dev/dkdv_ablate.patch")
    case $1 in
    a*) sed -i "1i #define MB_ABLATE ${1#a}" "$dir/flash_bwd_mma.cl" ;;
    dpfirst) sed -i '1i #define MB_ORDER_DP_FIRST 1' "$dir/flash_bwd_mma.cl" ;;
    esac
}
kept=()
for f in $forms; do
    make_form "$f"
    if [ "$f" = dpfirst ]; then
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
rm -rf "$work"
