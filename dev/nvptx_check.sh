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
"${PTXAS:-/usr/local/cuda/bin/ptxas}" -arch=$arch -v "$ptx" -o /dev/null 2>&1 | grep -E "rror|Used|spill|Compiling|arning"
rm -f "$ptx"
