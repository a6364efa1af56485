#!/bin/bash
# A local check of an NVIDIA build with no GPU: OpenCL C -> PTX with clang 15
# and libclc (apt-get install clang-15 libclc-15), then the CUDA toolkit's
# ptxas for sm_90 with -v: registers, spills, shared memory, and any error in
# the inline PTX. clang's register counts run about 20% above NVIDIA's own
# compiler's (the decode kernel: 196 here, 165 there); compare builds with each
# other, not with the driver. With -DMMA_WG=1 the wgmma form is patched as the
# library patches it and compiled for sm_90a. The source must be the joined program the
# library builds (common.cl variants.cl ptx.cl <kernel>.cl, as
# src/kernel_sources.c joins them).
#   dev/nvptx_check.sh joined.cl "-D HEAD_DIM=128 -D ..."
#   SASS=flash_bwd_mma_dkdv CUOBJDUMP=.../cuobjdump dev/nvptx_check.sh joined.cl "..."  (opcode counts)
src=$1
opts=$2
ptx=$(mktemp --suffix=.ptx)
clang-15 -x cl -cl-std=CL1.2 -target nvptx64--nvidiacl -O3 -Xclang -finclude-default-header \
    -Xclang -mlink-builtin-bitcode -Xclang /usr/lib/clc/nvptx64--nvidiacl.bc -Wno-everything -Dasm=__asm__ \
    $opts -S -o "$ptx" "$src" || exit 1
sed -i 's/^\.target sm_[0-9]*/.target sm_90/; s/^\.version [0-9.]*/.version 8.0/' "$ptx"
arch=sm_90
case "$opts" in *MMA_WG=1*) # the wgmma form: what src/backends/nvidia/wgmma_patch.c does to the driver's PTX
    sed -i -e 's/^\([ \t]*\)\/\/WG /\1/' -e 's/^\.target sm_90/.target sm_90a/' "$ptx"; arch=sm_90a ;;
esac
cubin=$(mktemp --suffix=.cubin)
"${PTXAS:-/usr/local/cuda/bin/ptxas}" -arch=$arch -v "$ptx" -o "$cubin" 2>&1 | grep -E "rror|Used|spill|Compiling|arning"
# SASS=kernel: that kernel's opcode counts, whole and inside each backward branch's loop (loops by
# start address), with CUOBJDUMP naming cuobjdump (PyPI's nvidia-cuda-cuobjdump wheel has one).
if [ -n "${SASS:-}" ]; then
    "${CUOBJDUMP:-cuobjdump}" -sass -fun "$SASS" "$cubin" > "$cubin.sass" || { rm -f "$ptx" "$cubin" "$cubin.sass"; exit 1; }
    awk '
        function hex(h,   v, i) { v = 0; for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1; return v }
        match($0, /\/\*[0-9a-f]+\*\/ +(@!?U?P[0-9T] +)?[A-Z0-9_]+/) {
            n = split(substr($0, RSTART, RLENGTH), w, " "); op = w[n]; addr = hex(substr(w[1], 3, length(w[1]) - 4))
            ops[addr] = op; all[op]++
            if (op == "BRA" && match($0, /BRA 0x[0-9a-f]+/)) { t = hex(substr($0, RSTART + 6, RLENGTH - 6)); if (t < addr) loops[addr] = t }
        }
        END {
            printf "whole kernel:"; for (o in all) printf " %s %d", o, all[o]; print ""
            for (e in loops) { delete c; total = 0
                for (a in ops) if (a + 0 >= loops[e] && a + 0 <= e + 0) { c[ops[a]]++; total++ }
                printf "loop 0x%06x-0x%06x, %d instructions:", loops[e], e, total; for (o in c) printf " %s %d", o, c[o]; print "" }
        }' "$cubin.sass" | sort -s -k1,1r -k2,2
    rm -f "$cubin.sass"
fi
rm -f "$ptx" "$cubin"
