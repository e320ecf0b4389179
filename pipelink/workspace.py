"""The event workspace of a persistent kernel: device memory the launcher owns, and the epoch.

The counters are never reset: each launch counts under a new epoch (1, 2, ...), and a counter
still tagged with an older epoch reads as zero. The first words hold the debug build's timeout
report and the dynamic dispatch's task counter.
"""
from __future__ import annotations

import ctypes

from .launch import LaunchError, _call, _driver

REPORT_WORDS = 8


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
    """Device memory for event counters, with the epoch and task-counter base that go with it.
    Kernels may share one (`Kernel.share_workspace`) as long as they never run concurrently: the
    epochs and claims then simply continue from one kernel's launch to the other's."""

    def __init__(self):
        self.ptr = None
        self.words = 0
        self.epoch = 0
        self.task_base = 0
        self.owners = 0


def workspace_of(kernel) -> Workspace:
    ws = getattr(kernel, "_workspace", None)
    if ws is None:
        ws = kernel._workspace = Workspace()
        ws.owners = 1
    return ws


def share_workspace(kernel, other) -> None:
    """Make `kernel` use `other`'s workspace (the same memory, the same epochs)."""
    release_workspace(kernel)
    ws = workspace_of(other)
    ws.owners += 1
    kernel._workspace = ws


def ensure_workspace(kernel, words: int, claims: int = 0) -> tuple[int, int, int]:
    """A zeroed device buffer of at least `words` 64-bit words for `kernel`, the next epoch, and
    where this launch's task claims start. A dynamic dispatch makes exactly `claims` claims (every
    task, plus one final claim per CTA), so the next launch's claims start that much later."""
    drv = _driver()
    ws = workspace_of(kernel)
    if words > ws.words:
        if ws.ptr is not None:
            _call("cuMemFree (the event workspace)", drv.cuMemFree, ws.ptr)
        size = max(words, 2 * ws.words) * 8
        ws.ptr = _call(f"cuMemAlloc({size}) for the events of kernel '{kernel.name}'", drv.cuMemAlloc, size)
        _call("cuMemsetD8 (the new event workspace)", drv.cuMemsetD8, ws.ptr, 0, size)
        ws.words, ws.task_base = size // 8, 0
    ws.epoch = ws.epoch % 0xFFFFFFFF + 1  # never 0: zeroed memory is epoch 0
    base = ws.task_base
    ws.task_base = base + claims
    return int(ws.ptr), ws.epoch, base


def release_workspace(kernel) -> None:
    ws = getattr(kernel, "_workspace", None)
    if ws is None:
        return
    kernel._workspace = None
    ws.owners -= 1
    if ws.owners <= 0 and ws.ptr is not None:
        _call("cuMemFree (the event workspace)", _driver().cuMemFree, ws.ptr)
        ws.ptr, ws.words = None, 0


def read_timeout(kernel, stream: int) -> None:
    """After a debug launch: raise EventTimeout if a wait gave up during this launch."""
    drv = _driver()
    _call(f"cuStreamSynchronize after kernel '{kernel.name}'", drv.cuStreamSynchronize, drv.CUstream(stream))
    report = (ctypes.c_uint64 * (REPORT_WORDS + 1))()
    ws = workspace_of(kernel)
    _call("cuMemcpyDtoH (the timeout report)", drv.cuMemcpyDtoH, ctypes.addressof(report), ws.ptr,
          (REPORT_WORDS + 1) * 8)
    epoch, component, event, element, expected, observed, task, _, claimed = list(report)
    if epoch != ws.epoch:
        return
    ws.task_base = claimed  # CTAs that gave up made no final claim: start the next launch here
    comps = [c["name"] for c in kernel.manifest.get("components", [])]
    events = [e["name"] for e in kernel.manifest.get("workspace", {}).get("events", [])]
    name = lambda seq, i: seq[i] if i < len(seq) else f"#{i}"  # noqa: E731
    raise EventTimeout(kernel.name, name(comps, component), name(events, event), element, expected, observed, task)


__all__ = ["EventTimeout", "Workspace", "ensure_workspace", "release_workspace", "share_workspace", "read_timeout",
           "LaunchError"]
