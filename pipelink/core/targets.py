"""Per-target limits the checks and the allocator work against.

Numbers from the CUDA C++ Programming Guide's compute-capability table; sm_90 values were also
checked on an H200 (see docs/toolchain.md).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    arch: str                  # "sm_90a"
    smem_per_block: int        # max dynamic smem per block after opt-in, bytes
    smem_per_sm: int
    named_barriers: int        # ids 0..n-1; 0 is __syncthreads
    max_threads_per_block: int
    regs_per_sm: int
    max_regs_per_thread: int
    max_warps_per_sm: int
    setmaxnreg: bool           # warpgroup register reconfiguration (arch-specific "a" targets)
    unified_l1: int = 0        # an SM's L1 data cache and shared memory together, bytes
    smem_capacities: tuple[int, ...] = ()  # the shared memory sizes an SM can be configured with (KB)

    @property
    def base(self) -> str:
        """sm_90a -> sm_90: LTO-IR for the family target."""
        return self.arch.rstrip("af")

    @property
    def capability(self) -> int:
        """sm_90a -> 90: thread-block clusters and tensor maps (the TMA) need 90 or more."""
        return int(self.base[3:])

    @property
    def free_barrier_ids(self) -> range:
        return range(1, self.named_barriers)


KB = 1024
# The shared memory capacities (KB) of the programming guide's unified data cache sections.
_CAP_80 = (0, 8, 16, 32, 64, 100, 132, 164)
_CAP_86 = (0, 8, 16, 32, 64, 100)
_CAP_90 = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
TARGETS: dict[str, Target] = {t.arch: t for t in (
    Target("sm_80", 163 * KB, 164 * KB, 16, 1024, 65536, 255, 64, False, 192 * KB, _CAP_80),
    Target("sm_86", 99 * KB, 100 * KB, 16, 1024, 65536, 255, 48, False, 128 * KB, _CAP_86),
    Target("sm_87", 163 * KB, 164 * KB, 16, 1024, 65536, 255, 48, False, 192 * KB, _CAP_80),
    Target("sm_89", 99 * KB, 100 * KB, 16, 1024, 65536, 255, 48, False, 128 * KB, _CAP_86),
    Target("sm_90", 227 * KB, 228 * KB, 16, 1024, 65536, 255, 64, False, 256 * KB, _CAP_90),
    Target("sm_90a", 227 * KB, 228 * KB, 16, 1024, 65536, 255, 64, True, 256 * KB, _CAP_90),
    Target("sm_100", 227 * KB, 228 * KB, 16, 1024, 65536, 255, 64, False, 256 * KB, _CAP_90),
    Target("sm_100a", 227 * KB, 228 * KB, 16, 1024, 65536, 255, 64, True, 256 * KB, _CAP_90),
    Target("sm_120", 99 * KB, 100 * KB, 16, 1024, 65536, 255, 48, False, 128 * KB, _CAP_86),
    Target("sm_120a", 99 * KB, 100 * KB, 16, 1024, 65536, 255, 48, False, 128 * KB, _CAP_86),
)}

DEFAULT_TARGET = "sm_90"


def target(arch: str) -> Target | None:
    return TARGETS.get(arch)


def ltoir_archs_for(link_arch: str) -> tuple[str, ...]:
    """LTO-IR archs pipelink accepts for a link for `link_arch`: the arch itself and its family base.

    nvJitLink would also JIT older LTO-IR (sm_80 into sm_90), but code guarded by __CUDA_ARCH__
    was then compiled for the older arch; pipelink refuses that rather than link it silently.
    An sm_90a component (arch-specific features such as setmaxnreg) needs an sm_90a link.
    """
    base = link_arch.rstrip("af")
    return (link_arch,) if base == link_arch else (link_arch, base)


# Per block the driver keeps 1 KB of an SM's shared memory for itself (sm_80 and later); registers are
# allocated per warp in units of 256.
SMEM_RESERVED_PER_BLOCK = 1024
REG_ALLOC_UNIT = 256
MAX_BLOCKS_PER_SM = 32
# An SM's register file is four schedulers' quarters, and its warps are placed four at a time, one on each: the
# warps its registers hold are a multiple of 4. A block of 9 warps at 176 registers a thread (5632 a warp) needs
# 3 warps' registers on one quarter (16896 of 16384): the driver refuses the block (at most 256 threads), though
# 9 x 5632 fits in 65536. At 168 (5376 a warp) 12 warps fit, the 9 with them.
WARP_ALLOC_GRANULARITY = 4


def residency(t: Target, threads: int, smem_bytes: int, registers: int) -> tuple[int, dict[str, int]]:
    """How many blocks of `threads` threads, `smem_bytes` of shared memory and `registers` per thread one SM
    holds at once, and what each resource alone allows ({'shared memory': n, 'registers': n, 'warps': n,
    'blocks': n}); the first is the least of them."""
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    reg_warps = t.regs_per_sm // per_warp // WARP_ALLOC_GRANULARITY * WARP_ALLOC_GRANULARITY
    limits = {"shared memory": t.smem_per_sm // (smem_bytes + SMEM_RESERVED_PER_BLOCK),
              "registers": reg_warps // warps,
              "warps": t.max_warps_per_sm // warps,
              "blocks": MAX_BLOCKS_PER_SM}
    return min(limits.values()), limits


def l1_left(t: Target, blocks: int, smem_bytes: int) -> tuple[int, int] | None:
    """(shared memory capacity, L1 data cache left), bytes, of an SM running `blocks` blocks of `smem_bytes`
    shared memory each: the smallest capacity step that holds them (the driver's pick when the kernel states no
    carveout preference), and the rest of the unified cache. None where the target's table has no steps.

    Why it matters: a load into registers keeps its bytes in flight in L1, so shared memory a kernel asks for
    is L1 its streams lose. Measured (docs/architecture.md): the Llama decode step, 2 blocks of 39 KB (L1 156 KB),
    ran 0.5% slower with 71 KB a block (L1 92 KB) and 23% slower with 105 KB (L1 28 KB)."""
    if not t.smem_capacities or blocks < 1:
        return None
    need = blocks * (smem_bytes + SMEM_RESERVED_PER_BLOCK)
    cap = next((c * KB for c in t.smem_capacities if c * KB >= need), t.smem_capacities[-1] * KB)
    return cap, t.unified_l1 - cap
