"""Stream-K decisions of the launcher: how many of a launch's last tiles split their reduction
blocks over the CTAs, and on how many CTAs. Pure: counts in, counts out.

A kernel whose mainloop declares a `tile_sequence.reduction` walks whole tiles first (grid-stride)
and then shares the reduction blocks of its last `sk_tiles` tiles evenly among all CTAs (the glue:
`pl::glue::stream_k_walk`). Whole waves stay whole; the wave that would run on part of the device
becomes, with one whole wave before it, a region every CTA takes an equal share of, so the device
finishes together (CUTLASS's data-parallel + two-tile stream-K hybrid).
"""
from __future__ import annotations

# A piece shorter than this many blocks costs more in partial traffic than it saves in balance.
MIN_PIECE_BLOCKS = 4


def stream_k_plan(tiles: int, blocks: int, resident: int, grid: int | None = None) -> tuple[int, int]:
    """(grid, stream-K tiles) for `tiles` tiles of `blocks` reduction blocks each, with at most
    `resident` CTAs on the device at once; `grid` fixes the CTA count (the caller's choice).

    The split tiles' pieces wait for each other across CTAs, so a split needs every CTA resident:
    a grid beyond `resident` walks whole tiles only."""
    if tiles <= 0:
        return max(1, grid or 1), 0
    if grid is None:
        # Enough CTAs for every tile, more only while the pieces stay long enough to pay off.
        grid = min(resident, max(tiles, tiles * blocks // MIN_PIECE_BLOCKS))
    if grid > resident or blocks < 2:
        return grid, 0
    waves, rest = divmod(tiles, grid)
    if rest == 0:
        return grid, 0
    # The last wave would leave grid - rest CTAs idle: split it, and one whole wave before it, over all.
    return grid, rest + (grid if waves >= 1 else 0)


def pieces(tiles: int, blocks: int, grid: int, split: int) -> list[list[tuple[int, int, int, int]]]:
    """Each CTA's units in walk order, (tile, k_begin, k_end, k_first): the walk the glue's
    `stream_k_unit` takes, written out for tests and the link map."""
    dp_tiles = tiles - split
    sk_blocks = split * blocks
    out = []
    for cta in range(grid):
        units = [(t, 0, blocks, u * blocks) for u, t in enumerate(range(cta, dp_tiles, grid))]
        dp_units = len(units)
        begin, end = sk_blocks * cta // grid, sk_blocks * (cta + 1) // grid
        g = begin
        while g < end:
            k_begin = g % blocks
            k_end = min(blocks, k_begin + (end - g))
            units.append((dp_tiles + g // blocks, k_begin, k_end, dp_units * blocks + g - begin))
            g += k_end - k_begin
        out.append(units)
    return out
