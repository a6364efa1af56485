#!/usr/bin/env python3
"""Prints the operand-list macros of cl/ptx.cl's wgmma section (between its "Written by
dev/gen_wgmma_lists.py" comment and WG_BEGIN). Inline asm names operands by number, and the
preprocessor cannot count, so the lists for each accumulator count R (16, 24, 32, 64: N / 2 of an
m64nNk16 with float accumulators) are spelled out here:
  WG_ACC_R          the R accumulators %0 .. %R-1, as one brace list
  WG_OPS_R          S = Q K^T: the two descriptors after them into wa, wb
  WG_NEXT_R         S = Q K^T: the second column block (descriptor + block stride)
  WG_OPSV_R         O += P V: V's descriptor and its step into wb, ws
  WG_PV_STEPS_R_S   S k steps of O += P V, P's four registers each (after descriptor and step)
  WG_REGS_R(c, a)   the R accumulators a[i][j] bound with constraint c ("=f" or "+f")
  WG_PIN_S(p)       P's (or Q's) registers p[k][j] of S k steps as inputs
  WG_QKR_STEPS_R_B  S = Q K^T with Q in registers (after the accumulators: K's descriptor, its
                    column-block stride, then Q's four registers per k step), B column blocks of 64
"""


def regs(first, count):
    return "{" + ",".join("%%%d" % i for i in range(first, first + count)) + "}"


def main():
    out = []
    for r in (16, 24, 32, 64):
        out.append('#define WG_ACC_%d "%s"' % (r, regs(0, r)))
    for r in (16, 24, 32, 64):
        out.append('#define WG_OPS_%d "mov.b64 wa, %%%d;\\n" WG "mov.b64 wb, %%%d;\\n"' % (r, r, r + 1))
        out.append('#define WG_NEXT_%d "add.s64 wa, %%%d, %%%d;\\n" WG "add.s64 wb, %%%d, %%%d;\\n"'
                   % (r, r, r + 2, r + 1, r + 3))
    for r in (32, 64):
        out.append('#define WG_OPSV_%d "mov.b64 wb, %%%d;\\n" WG "mov.b64 ws, %%%d;\\n"' % (r, r, r + 1))
    for r in (32, 64):
        for s in (1, 2, 3, 4, 8):
            lines = ['WG_PV_LINE(WG_ACC_%d, "%s")' % (r, regs(r + 2 + 4 * k, 4)) for k in range(s)]
            out.append("#define WG_PV_STEPS_%d_%d %s" % (r, s, " ".join(lines)))
    for r in (16, 24, 32, 64):
        items = ", ".join("c(a[%d][%d])" % (i // 4, i % 4) for i in range(r))
        out.append("#define WG_REGS_%d(c, a) %s" % (r, items))
    for s in (1, 2, 3, 4, 8, 12, 16):
        items = ", ".join('"r"(p[%d][%d])' % (i // 4, i % 4) for i in range(4 * s))
        out.append("#define WG_PIN_%d(p) %s" % (s, items))
    for r in (16, 24, 32, 64):
        for b in (1, 2, 3, 4):
            parts = ['WG "mov.b64 wb, %%%d;\\n" WG "mov.b64 ws, %%%d;\\n"' % (r, r)]
            for blk in range(b):
                if blk:
                    parts.append('WG "add.s64 ws, ws, %%%d;\\n" WG "mov.b64 wb, ws;\\n"' % (r + 1))
                for k in range(4):
                    if k:
                        parts.append('WG "add.s64 wb, wb, 2;\\n"')
                    parts.append('WG_QKR_LINE(N, WG_ACC_%d, "%s")' % (r, regs(r + 2 + 4 * (4 * blk + k), 4)))
            out.append("#define WG_QKR_STEPS_%d_%d(N) %s" % (r, b, " ".join(parts)))
    print("\n".join(out))


if __name__ == "__main__":
    main()
