"""The event workspace of a persistent kernel: device memory the launcher owns.

Layout (manifest.WORKSPACE): a header, then two regions of event counters. The kernel keeps its own
place in it: each launch reads from the header which region it counts in, zeroes the other one (the
launch before it used it) for the launch after it, and its last CTA out zeroes the task counter and
moves the header on. The launcher passes the same two values every time (the workspace and the
regions' capacity), so a launch needs no memset in the stream, no per-launch host state, and a CUDA
graph that captured it replays it correctly.

The launcher allocates the workspace (zeroed) when a launch first needs it, or needs more counters
than it holds (a distributed kernel's on NVSHMEM's symmetric heap, runtime/nvshmem.py); the memory it replaces is kept until the kernel is unloaded, since prepared launches
and captured graphs still point at it (each workspace is consistent on its own).
"""
from __future__ import annotations

import ctypes

from ..core.diagnostics import PipelinkRunError
from . import driver as _cu
from .driver import LaunchError
from .manifest import IMPLICIT_KINDS, WORKSPACE


class EventTimeout(PipelinkRunError, RuntimeError):
    """A debug build's wait spun past its bound (PL197): what waited for what, and what it saw."""

    code = "PL197"

    def __init__(self, kernel: str, component: str, event: str, element: int, expected: int, observed: int,
                 task: int):
        super().__init__(f"kernel '{kernel}': task {task} of component '{component}' waited for event "
                         f"'{event}'[{element}] to reach {expected} notifications but saw {observed}; "
                         "the producers notify too few times (or not at all) for this input")
        self.kernel, self.component, self.event = kernel, component, event
        self.element, self.expected, self.observed, self.task = element, expected, observed, task


class Workspace:
    """Device memory for event counters. Kernels may share one (`Kernel.share_workspace`) as long as they
    never run concurrently: the header then simply carries on from one kernel's launch to the other's."""

    def __init__(self):
        self.ptr = None
        self.region_words = 0  # capacity of each of the two regions
        self.header_words = 0
        self.owners = 0
        self.retired: list = []  # replaced allocations: prepared launches and graphs may still use them
        self.sizes: dict[int, int] = {}  # allocation -> bytes

    def size(self) -> int:
        return (self.header_words + 2 * self.region_words) * 8


def workspace_of(kernel) -> Workspace:
    ws = getattr(kernel, "_workspace", None)
    if ws is None:
        ws = kernel._workspace = Workspace()
        ws.owners = 1
    return ws


def share_workspace(kernel, other) -> None:
    """Make `kernel` use `other`'s workspace (the same memory, the same sequence of launches)."""
    release_workspace(kernel)
    ws = workspace_of(other)
    ws.owners += 1
    kernel._workspace = ws


def ensure_workspace(kernel, header_words: int, event_words: int) -> dict[str, int]:
    """The implicit arguments of a launch needing `event_words` counters: the workspace and the capacity of
    its regions. Allocates a zeroed workspace where there is none or it is too small (not while a stream
    of this thread is being captured: prepare once before capturing)."""
    drv = _cu.driver()
    ws = workspace_of(kernel)
    if ws.ptr is None or event_words > ws.region_words or header_words != ws.header_words:
        region = max(event_words, 2 * ws.region_words, 1)
        size = (header_words + 2 * region) * 8
        distributed = kernel.manifest.distributed
        if distributed:  # other ranks notify its counters: on the symmetric heap (collective)
            from . import nvshmem
            ptr = nvshmem.malloc(size, f"the events of kernel '{kernel.name}'")
        else:
            ptr = _cu.call(f"cuMemAlloc({size}) for the events of kernel '{kernel.name}' (allocate it before a "
                           "CUDA graph captures the launch: prepare or launch once first)", drv.cuMemAlloc, size)
        try:
            _cu.call("cuMemsetD8 (the new event workspace)", drv.cuMemsetD8, ptr, 0, size)
            if distributed:  # zeroed on every rank before any rank's first launch notifies it
                _cu.call("cuCtxSynchronize (the new event workspace)", drv.cuCtxSynchronize)
                nvshmem.barrier()
        except LaunchError:
            _free(kernel, ptr)
            raise
        if ws.ptr is not None:
            ws.retired.append(ws.ptr)
        ws.ptr, ws.region_words, ws.header_words = ptr, region, header_words
        ws.sizes[int(ptr)] = size
    args = {"workspace": int(ws.ptr), "region_words": ws.region_words}
    assert set(args) == set(IMPLICIT_KINDS)
    return args


def reset(kernel, ptr: int) -> None:
    """Zero the workspace at `ptr` (after a debug launch that stopped early left counts behind)."""
    ws = workspace_of(kernel)
    _cu.call("cuMemsetD8 (the event workspace, after a launch that did not finish)", _cu.driver().cuMemsetD8, ptr,
             0, ws.sizes.get(int(ptr), ws.size()))


def release_workspace(kernel) -> None:
    ws = getattr(kernel, "_workspace", None)
    if ws is None:
        return
    kernel._workspace = None
    ws.owners -= 1
    if ws.owners <= 0:
        for ptr in [*ws.retired, *([ws.ptr] if ws.ptr is not None else [])]:
            _free(kernel, ptr)
        ws.ptr, ws.region_words, ws.retired = None, 0, []


def _free(kernel, ptr) -> None:
    if kernel.manifest.distributed:
        from . import nvshmem
        nvshmem.free(int(ptr))
    else:
        _cu.call("cuMemFree (the event workspace)", _cu.driver().cuMemFree, ptr)


def read_timeout(kernel, stream: int, ptr: int) -> None:
    """After a debug launch on the workspace at `ptr`: raise EventTimeout if a wait gave up. A report is
    only ever written by a wait that gave up, and the workspace is zeroed after it is read."""
    drv = _cu.driver()
    _cu.call(f"cuStreamSynchronize after kernel '{kernel.name}'", drv.cuStreamSynchronize, drv.CUstream(stream))
    words = (ctypes.c_uint64 * len(WORKSPACE.report))()
    _cu.call("cuMemcpyDtoH (the timeout report)", drv.cuMemcpyDtoH, ctypes.addressof(words), ptr,
             len(WORKSPACE.report) * 8)
    report = dict(zip(WORKSPACE.report, words))
    if report["epoch"] == 0:
        return
    reset(kernel, ptr)  # CTAs that gave up left counts, claims and the header behind: start afresh
    m = kernel.manifest
    comps = [c.name for c in m.components]
    events = [e.name for e in m.workspace.events] if m.workspace is not None else []
    name = lambda seq, i: seq[i] if i < len(seq) else f"#{i}"  # noqa: E731
    raise EventTimeout(kernel.name, name(comps, report["component"]), name(events, report["event"]), report["element"],
                       report["expected"], report["observed"], report["task"])


__all__ = ["EventTimeout", "Workspace", "ensure_workspace", "release_workspace", "reset", "share_workspace",
           "read_timeout", "LaunchError"]
