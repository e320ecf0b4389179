"""Split-reduction decisions of the launcher: on how many CTAs a launch runs, how many of its last
tiles split their reduction blocks over the CTAs (stream-K), or in how many equal pieces every tile
is split (split-K). Pure: counts in, counts out.

A kernel whose mainloop declares a `tile_sequence.reduction` walks whole tiles first (grid-stride)
and then shares the reduction blocks of its last `sk_tiles` tiles evenly among all CTAs (the glue:
`pl::glue::stream_k_walk`). Whole waves stay whole; the wave that would run on part of the device
becomes, with one whole wave before it, a region every CTA takes an equal share of, so the device
finishes together (CUTLASS's data-parallel + two-tile stream-K hybrid).

When to split (measured on the H200, Qwen3-32B MLP GEMMs, case_studies/qwen3_32b_mlp): the pieces
of split tiles run at different reduction offsets at the same time, so tiles that share an operand
panel (the tiles of one column share the weights' panel) stop sharing it in L2. With one row of
tiles (decode: every tile reads the same few activation rows and a weight panel of its own) that
costs nothing and the split wins: 0.1365 vs 0.1446 ms (M=16, N=51200, K=5120), 0.0905 vs 0.1285 ms
(M=128, N=5120, K=25600, 128x128 tiles). With several rows it loses, most with a long reduction:
0.727 vs 0.484 ms (M=1024, N=5120, K=25600). So stream-K splits a single row of tiles only. Several
rows get split-K instead where it shortens the rounds by a tenth: every tile in the same few
pieces, walked piece-major, so a wave's CTAs work on the same blocks of neighbouring tiles and keep
sharing the panels (M=1024 down projection, 128x128 tiles: halves 0.4088 ms vs 0.4706 whole);
otherwise whole tiles on the balanced grid (the fewest CTAs that keep the rounds).
"""
from __future__ import annotations

# A piece shorter than this many blocks costs more in partial traffic than it saves in balance.
MIN_PIECE_BLOCKS = 4
# Split-K (several rows of tiles): at most this many pieces per tile, each at least this many blocks.
MAX_SPLIT = 4
MIN_SPLIT_BLOCKS = 16


def balanced_grid(tiles: int, resident: int) -> int:
    """Blocks for `tiles` tiles walked grid-stride by at most `resident` blocks at once: the rounds
    (tiles per block) stay ceil(tiles / resident), and the blocks are as few as that allows (400
    tiles on 132 SMs: 100 blocks of 4 tiles, not 4 blocks walking a fourth tile alone)."""
    if tiles <= 0:
        return 1
    rounds = -(-tiles // resident)
    return -(-tiles // rounds)


def split_k_pieces(tiles: int, blocks: int, ctas: int) -> int:
    """Pieces per tile (1 to 4) for split-K over `ctas` CTAs: the count whose rounds of pieces end
    soonest, kept only where that saves a tenth of the whole tiles' rounds (the partial sums cost
    traffic) and every piece keeps MIN_SPLIT_BLOCKS blocks. 320 tiles on 132 SMs: 3 rounds whole,
    5 rounds of halves (2.5 tiles' time): 2."""
    whole = -(-tiles // ctas)
    best, best_rounds = 1, float(whole)
    for split in range(2, MAX_SPLIT + 1):
        piece = -(-blocks // split)
        if blocks < split * MIN_SPLIT_BLOCKS or (split - 1) * piece >= blocks:
            break
        rounds = -(-tiles * split // ctas) / split
        if rounds <= 0.9 * whole and rounds < best_rounds:
            best, best_rounds = split, rounds
    return best


def stream_k_plan(tiles: int, blocks: int, resident: int, grid: int | None = None,
                  rows: int = 1, cluster: int = 1) -> tuple[int, int, int]:
    """(grid, stream-K tiles, split-K pieces) for `tiles` tiles of `blocks` reduction blocks each,
    in `rows` rows (the product of the tile grid's extents but the last), with at most `resident`
    CTAs on the device at once; `grid` fixes the CTA count (the caller's choice).

    Split pieces wait for each other across CTAs, so a split needs every CTA resident: a grid
    beyond `resident` walks whole tiles only.

    A kernel in clusters of `cluster` CTAs is never split stream-K: each CTA's share of the split tiles' blocks
    starts where the CTA before it stopped, so the CTAs of one cluster would walk different units (tiles and
    block ranges), and a mainloop that meets its cluster at every block (a multicast load) would wait forever.
    Split-K keeps them in step where the tile count is whole clusters (linker/clusters.py, PL202): the units
    of a cluster's CTAs are consecutive, so of one piece index, and their ring positions agree; whole tiles
    are a grid-stride walk."""
    if tiles <= 0:
        return max(1, grid or 1), 0, 1
    if rows > 1 or cluster > 1:  # tiles sharing panels, or a cluster's CTAs in step: never stream-K
        ctas = grid or resident
        split = split_k_pieces(tiles, blocks, ctas) if ctas <= resident else 1
        if split > 1:
            return ctas, 0, split
        return grid or balanced_grid(tiles, resident), 0, 1
    if grid is None:
        # Enough CTAs for every tile, more only while the pieces stay long enough to pay off.
        grid = min(resident, max(tiles, tiles * blocks // MIN_PIECE_BLOCKS))
    if grid > resident or blocks < 2:
        return grid, 0, 1
    waves, rest = divmod(tiles, grid)
    split = rest + (grid if waves >= 1 else 0) if rest else 0
    if split * blocks * (grid + 1) >= 1 << 32:  # the glue's walk counts blocks in 32 bits
        return grid, 0, 1
    # The last wave would leave grid - rest CTAs idle: split it, and one whole wave before it, over all.
    return grid, split, 1


def partial_slots(grid: int, tiles: int, sk_tiles: int, split: int) -> int:
    """Partial slots a launch needs: one per CTA for stream-K, split - 1 per tile for split-K."""
    if split > 1:
        return tiles * (split - 1)
    return grid if sk_tiles else 0
