// 11_warp_blocks: 08's kernel launched in blocks of one warp.
//
// Changed from 08: the block only (WARPS = 1, and 8 or 16 steps of W a lane in flight, tuned);
// the kernel is 08's, a warp a row of W.
// Why it should help: with 4-warp blocks an SM takes a new block only when all four of a
// block's warps are done, and each warp streams its row at its own pace, so an SM's warp
// slots sit empty while the slowest warp of a block finishes its row: ncu at 1 x 14336 x 4096
// shows 08 at 2.72 waves of 4-warp blocks with the last wave 72 % full. In blocks of one warp
// the slot of a warp that has ended its row is refilled at once, by the next row, so the rows
// in flight an SM stay level until the grid's last wave (32 blocks an SM is the limit: 32
// warps, at 48 registers). 08's runs over rows (09) and its ring (10) attacked the same tail
// by longer work a warp; this one makes each piece of work a warp's and no longer.
// Hypothesis: scouting with `kernelbook bench` at eb4ea62 (08's source, its block
// varied, one H200): 1 x 14336 x 4096 at 28.4 us against 08's 30.9 (about 95 % of the
// streaming read, where 08 reached 88 % in the run published at eb4ea62), 28672 at 54.1 us
// against 59.2, 128256 at 234 us against 241: faster than 08, 09 and 10 at every M = 1
// layer past 8 K rows.
// What ncu should show: sm__warps_active up at the same registers, the waves' tail shorter,
// dram__throughput above 08's 78.5 % at 14336.
//
// Sizes: any M, N, K (08's). Launch: grid (cdiv(N, WARPS)), block (32 * WARPS).
#include "08_no_allocate.cu"
