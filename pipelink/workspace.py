"""The event workspace of a persistent kernel: device memory the launcher owns.

Layout: a header (the debug build's timeout report, the dynamic dispatch's task counter), then
two regions of event counters. Launches alternate between the regions, and each launch first
zeroes the region the launch before it used (every CTA a slice, before its first task): the next
launch finds its counters at zero with no memset in the stream, so a notification is one
atomicAdd and a wait one load. The task counter is never reset: each launch is told where its
claims start.
"""
from __future__ import annotations

import ctypes

from . import driver as _cu
from .driver import LaunchError
from .manifest import WORKSPACE

class EventTimeout(RuntimeError):
    """A debug build's wait spun past its bound: what waited for what, and what it saw."""

    def __init__(self, kernel: str, component: str, event: str, element: int, expected: int, observed: int,
                 task: int):
        super().__init__(f"kernel '{kernel}': task {task} of component '{component}' waited for event "
                         f"'{event}'[{element}] to reach {expected} notifications but saw {observed}; "
                         "the producers notify too few times (or not at all) for this input")
        self.kernel, self.component, self.event = kernel, component, event
        self.element, self.expected, self.observed, self.task = element, expected, observed, task


class Workspace:
    """Device memory for event counters, and where the next launch stands in it.
    Kernels may share one (`Kernel.share_workspace`) as long as they never run concurrently: the
    regions, epochs and claims then simply continue from one kernel's launch to the other's."""

    def __init__(self):
        self.ptr = None
        self.region_words = 0  # capacity of each of the two regions
        self.header_words = 0
        self.region = 1        # the region the last launch used
        self.used = 0          # its words: what the next launch clears
        self.epoch = 0         # names a launch in the debug report
        self.task_base = 0
        self.owners = 0
        self.unknown = False   # a launch failed to start or stopped early: zero everything first


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


def ensure_workspace(kernel, header_words: int, event_words: int, claims: int = 0) -> dict[str, int]:
    """The implicit arguments of the next launch: the workspace (header), this launch's zeroed
    event region, the region and word count it clears for the launch after it, the epoch and
    where its task claims start. A dynamic dispatch makes exactly `claims` claims (every task,
    plus one final claim per CTA), so the next launch's claims start that much later."""
    drv = _cu.driver()
    ws = workspace_of(kernel)
    if event_words > ws.region_words or header_words != ws.header_words:
        region = max(event_words, 2 * ws.region_words, 1)
        if ws.ptr is not None:
            old, ws.ptr, ws.region_words = ws.ptr, None, 0  # forgotten first: a failed allocation leaves none
            _cu.call("cuMemFree (the event workspace)", drv.cuMemFree, old)
        size = (header_words + 2 * region) * 8
        ws.ptr = _cu.call(f"cuMemAlloc({size}) for the events of kernel '{kernel.name}'", drv.cuMemAlloc, size)
        _cu.call("cuMemsetD8 (the new event workspace)", drv.cuMemsetD8, ws.ptr, 0, size)
        ws.region_words, ws.header_words = region, header_words
        ws.region, ws.used, ws.task_base, ws.unknown = 1, 0, 0, False
    elif ws.unknown:  # counts of an unfinished launch may be left anywhere
        _cu.call("cuMemsetD8 (the event workspace, after a launch that did not finish)", drv.cuMemsetD8, ws.ptr, 0,
              (ws.header_words + 2 * ws.region_words) * 8)
        ws.region, ws.used, ws.task_base, ws.unknown = 1, 0, 0, False
    ws.epoch = ws.epoch % 0xFFFFFFFF + 1  # never 0: a zeroed report names no launch
    region = 1 - ws.region
    start = int(ws.ptr) + ws.header_words * 8  # a CUdeviceptr: do arithmetic on its integer value
    args = {"workspace": int(ws.ptr), "events": int(start + region * ws.region_words * 8),
            "clear": int(start + ws.region * ws.region_words * 8), "clear_words": ws.used,
            "epoch": ws.epoch, "task_base": ws.task_base}
    ws.region, ws.used = region, event_words
    ws.task_base += claims
    return args


def mark_unknown(kernel) -> None:
    """The launch just prepared did not start, or stopped early: zero the workspace before the next."""
    workspace_of(kernel).unknown = True


def release_workspace(kernel) -> None:
    ws = getattr(kernel, "_workspace", None)
    if ws is None:
        return
    kernel._workspace = None
    ws.owners -= 1
    if ws.owners <= 0 and ws.ptr is not None:
        _cu.call("cuMemFree (the event workspace)", _cu.driver().cuMemFree, ws.ptr)
        ws.ptr, ws.region_words = None, 0


def read_timeout(kernel, stream: int) -> None:
    """After a debug launch: raise EventTimeout if a wait gave up during this launch."""
    drv = _cu.driver()
    _cu.call(f"cuStreamSynchronize after kernel '{kernel.name}'", drv.cuStreamSynchronize, drv.CUstream(stream))
    words = (ctypes.c_uint64 * len(WORKSPACE.report))()
    ws = workspace_of(kernel)
    _cu.call("cuMemcpyDtoH (the timeout report)", drv.cuMemcpyDtoH, ctypes.addressof(words), ws.ptr,
             len(WORKSPACE.report) * 8)
    report = dict(zip(WORKSPACE.report, words))
    if report["epoch"] != ws.epoch:
        return
    ws.unknown = True  # CTAs that gave up left counts and claims behind: start the next launch afresh
    m = kernel.manifest
    comps = [c.name for c in m.components]
    events = [e.name for e in m.workspace.events] if m.workspace is not None else []
    name = lambda seq, i: seq[i] if i < len(seq) else f"#{i}"  # noqa: E731
    raise EventTimeout(kernel.name, name(comps, report["component"]), name(events, report["event"]), report["element"],
                       report["expected"], report["observed"], report["task"])


__all__ = ["EventTimeout", "Workspace", "ensure_workspace", "mark_unknown", "release_workspace", "share_workspace", "read_timeout",
           "LaunchError"]
