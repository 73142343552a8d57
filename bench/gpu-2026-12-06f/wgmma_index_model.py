# 2026-12-06 (sixth sitting): row_wgmma_kernel's copy and read indices modelled on the CPU
# (python3 bench/gpu-2026-12-06f/wgmma_index_model.py prints "mismatches 0").
# index model of row_wgmma_kernel's shared-memory fill and reads for one chunk (32 k):
# fill as the kernel's copy_stage does, then read as wgmma does (B by the probe-validated
# descriptor layout, A by the kernel's fragment loads); check every step's (A slot, B slot)
# pairs hold the same k, and that step s's set is row_matmul_kernel's mma s set.
kR = kWR = 128
def core(R, s, rg, h): return ((s * (R // 8) + rg) * 2 + h) * 128
X = {}  # byte offset -> (row, k) for x; element granularity (2 bytes)
W = {}
for tid in range(256):
    unit, half = (tid // 2) % 4, tid % 2
    for i in range(4):
        row = (tid + 256 * i) // 8
        to = core(kR, half, row // 8, unit // 2) + (row % 8) * 16 + (unit % 2) * 8
        for e in range(4):  # 8 bytes = 4 elements: k = 8 unit + 4 half + e
            assert to + 2 * e not in X
            X[to + 2 * e] = (row, 8 * unit + 4 * half + e)
        wto = kR * 64 + core(kWR, half, row // 8, unit // 2) + (row % 8) * 16 + (unit % 2) * 8
        for e in range(4):
            assert wto + 2 * e not in W
            W[wto + 2 * e] = (row, 8 * unit + 4 * half + e)
assert len(X) == 128 * 32 and len(W) == 128 * 32
bad = 0
for s in range(2):
    bdesc = kR * 64 + core(kWR, s, 0, 0)
    for warp in range(8):
        group, in_group = warp // 4, warp % 4
        for lane in range(32):
            g, t = lane // 4, lane % 4
            a_row = 64 * group + 16 * in_group + g
            lo = core(kR, s, a_row // 8, 0) + (a_row % 8) * 16 + 4 * t
            hi = core(kR, s, a_row // 8 + 1, 0) + (a_row % 8) * 16 + 4 * t
            # a[0]: row g slots 2t,2t+1; a[1]: row g+8; a[2]: row g slots 2t+8,+9; a[3]: row g+8
            frags = {(a_row, 2 * t + j): X[lo + 2 * j] for j in range(2)}
            frags.update({(a_row + 8, 2 * t + j): X[hi + 2 * j] for j in range(2)})
            frags.update({(a_row, 2 * t + 8 + j): X[lo + 128 + 2 * j] for j in range(2)})
            frags.update({(a_row + 8, 2 * t + 8 + j): X[hi + 128 + 2 * j] for j in range(2)})
            for (r, slot), (xr, k) in frags.items():
                assert xr == r, (r, xr)
                for n in range(128):  # B slot `slot` of weight row n per the descriptor
                    b = bdesc + ((n // 8) * 2 + slot // 8) * 128 + (n % 8) * 16 + (slot % 8) * 2
                    wn, wk = W[b]
                    if wn != n or wk != k:
                        bad += 1
    # the step's k set for any row: row_matmul mma s takes k in 8t + 4s + [0, 4)
    ks = sorted({X[core(kR, s, 0, h) + j * 2][1] for h in range(2) for j in range(8)})
    assert ks == sorted(8 * t + 4 * s + e for t in range(4) for e in range(4)), ks
print("mismatches", bad)
