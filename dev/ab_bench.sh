#!/usr/bin/env bash
# Two builds side by side in one process tree: `flashcl bench` on each shape
# for a reference tree (BASE) and this one, alternating BASE, NEW, BASE, NEW
# (TURNS rounds), then one line per shape and pass with both times and
# NEW's speed-up. What a kernel change needs before it is kept (README:
# measure in isolation, keep what pays). Noise shows as the spread between
# a tree's own turns, printed beside each time.
#
#   git archive REV | (mkdir -p ab-base && tar -x -C ab-base)   # the tree to compare with
#   bash dev/ab_bench.sh ab-base shapes.txt [extra bench options]
#
# shapes.txt: one set of `flashcl bench` options per line (# comments and
# blank lines skipped), e.g. `--dtype bf16 --batch 4 --heads 16 --seqlen 4096
# --head-dim 128 --backward`. Every line runs with `--path flash --json
# --read-bw off` and the extra options; add `--no-plain` to a line with variant
# options, or bench times plain attention beside it too. Environment: TURNS (default
# 2), ITERS (default 10), JOBS (build parallelism, default nproc), NEW_BUILD /
# BASE_BUILD (build folders, default build-ab-new / build-ab-base; reused when
# they exist, rebuilt by CMake when sources changed), CMAKE_ARGS (extra CMake
# configure options, e.g. the NVIDIA driver's OpenCL paths), TIMEOUT (seconds
# per bench call, default 120). Per-shape environment: a line may start with
# VAR=value words (e.g. `FLASHCL_WGMMA=0 --dtype bf16 ...`), applied to both trees.
# TESTS=REGEX: first build this tree's tests too and run `ctest -R REGEX` on
# them (e.g. TESTS='^(test_mma|test_variants_bf16)$'); if any fails, print
# the failures and stop before the bench, since a kernel that is fast but
# wrong is not a result (the bench itself checks no output).
set -euo pipefail
base_src=${1:?usage: dev/ab_bench.sh BASE_SOURCE_DIR SHAPES_FILE [bench options]}
shapes=${2:?usage: dev/ab_bench.sh BASE_SOURCE_DIR SHAPES_FILE [bench options]}
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
turns=${TURNS:-2} iters=${ITERS:-10} jobs=${JOBS:-$(nproc)} limit=${TIMEOUT:-120}
new_build=${NEW_BUILD:-build-ab-new} base_build=${BASE_BUILD:-build-ab-base}
[ -f "$base_src/CMakeLists.txt" ] || { echo "ab_bench: $base_src is not a FlashCL source tree" >&2; exit 2; }
[ -f "$shapes" ] || { echo "ab_bench: no shapes file $shapes" >&2; exit 2; }

tests=${TESTS:-}
build() { # source dir, build dir, ON to build the tests too (every target) or OFF (the tool alone)
    local targets=(--target flashcl_tool)
    [ "$3" = ON ] && targets=()
    # shellcheck disable=SC2086  # CMAKE_ARGS is a list of options
    cmake -S "$1" -B "$2" ${CMAKE_ARGS:-} -DCMAKE_BUILD_TYPE=Release -DFLASHCL_BUILD_TESTS="$3" -DFLASHCL_MPI=OFF \
        >"$2.log" 2>&1 && cmake --build "$2" -j"$jobs" "${targets[@]}" >>"$2.log" 2>&1 ||
        { tail -30 "$2.log" >&2; echo "ab_bench: the build in $2 failed (log: $2.log)" >&2; exit 1; }
}
mkdir -p "$new_build" "$base_build"
build "$base_src" "$base_build" OFF
build "$here" "$new_build" "$([ -n "$tests" ] && echo ON || echo OFF)"
if [ -n "$tests" ]; then
    listed=$(ctest --test-dir "$new_build" -N -R "$tests" | sed -n 's/^Total Tests: //p')
    [ "${listed:-0}" -gt 0 ] || { echo "ab_bench: TESTS='$tests' matches no test" >&2; exit 2; }
    if ctest --test-dir "$new_build" -j"$jobs" -R "$tests" >"$new_build.tests.log" 2>&1; then
        echo "ab_bench: $listed test(s) of this tree passed ($tests)"
    else
        grep -E "Test +#|tests passed" "$new_build.tests.log" >&2
        echo "ab_bench: this tree's tests failed (log: $new_build.tests.log; output: $new_build/Testing/Temporary/LastTest.log); no bench" >&2
        exit 1
    fi
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT
n=0
while IFS= read -r line || [ -n "$line" ]; do
    line=${line%%#*}
    [ -n "${line// /}" ] || continue
    n=$((n + 1))
    envs=() opts=()
    for w in $line; do
        if [ ${#opts[@]} -eq 0 ] && [[ $w == *=* && $w != -* ]]; then envs+=("$w"); else opts+=("$w"); fi
    done
    for ((t = 1; t <= turns; ++t)); do
        for tree in base new; do
            b=$base_build
            [ "$tree" = new ] && b=$new_build
            out=$(env "${envs[@]+"${envs[@]}"}" timeout "$limit" "$b/tools/flashcl" bench --path flash \
                --json --read-bw off --iters "$iters" "${opts[@]}" "$@" 2>&1) || true
            printf '%s\n' "$out" | python3 -c '
import json, sys
shape, tree = sys.argv[1], sys.argv[2]
seen = False
for line in sys.stdin:
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if isinstance(j, dict) and "ms" in j and str(j.get("path", "")).startswith("flash"):
        seen = True
        print(json.dumps({"shape": int(shape), "tree": tree, "pass": "%s %s" % (j["path"], j.get("pass")), "ms": j["ms"],
                          "tflops": j.get("tflops"), "kernel": j.get("kernel")}))
if not seen:
    print(json.dumps({"shape": int(shape), "tree": tree, "error": True}))
' "$n" "$tree" >>"$results"
        done
    done
    printf '%s\t%s\n' "$n" "$line" >>"$results.names"
done <"$shapes"

python3 - "$results" "$results.names" <<'PY'
import json, sys
from collections import defaultdict
runs, errors = defaultdict(list), set()
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("error"):
        errors.add((j["shape"], j["tree"]))
        continue
    runs[(j["shape"], j["pass"], j["tree"])].append(j)
names = dict(l.rstrip("\n").split("\t", 1) for l in open(sys.argv[2]))
print("best of the turns, ms (with the largest), and base best / new best")
for shape in sorted({k[0] for k in runs} | {e[0] for e in errors}):
    print("%s: %s" % (shape, names.get(str(shape), "")))
    for tree in ("base", "new"):
        if (shape, tree) in errors:
            print("    %s: a bench call failed (run it alone to see why)" % tree)
    for p in sorted({k[1] for k in runs if k[0] == shape}):
        b, n = runs.get((shape, p, "base"), []), runs.get((shape, p, "new"), [])
        if not b or not n:
            continue
        bm, nm = [r["ms"] for r in b], [r["ms"] for r in n]
        print("    %-20s base %9.4f (..%.4f)  new %9.4f (..%.4f)  %6.3fx  %s" % (
            p, min(bm), max(bm), min(nm), max(nm), min(bm) / min(nm), n[-1].get("kernel")))
PY
rm -f "$results.names"
