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


def ensure_workspace(kernel, words: int, claims: int = 0) -> tuple[int, int, int]:
    """A zeroed device buffer of at least `words` 64-bit words for `kernel`, the next epoch, and
    where this launch's task claims start. A dynamic dispatch makes exactly `claims` claims (every
    task, plus one final claim per CTA), so the next launch's claims start that much later."""
    drv = _driver()
    have = getattr(kernel, "_ws_words", 0)
    if words > have:
        release_workspace(kernel)
        size = max(words, 2 * have) * 8
        ptr = _call(f"cuMemAlloc({size}) for the events of kernel '{kernel.name}'", drv.cuMemAlloc, size)
        _call("cuMemsetD8 (the new event workspace)", drv.cuMemsetD8, ptr, 0, size)
        kernel._ws_ptr, kernel._ws_words = ptr, size // 8
        kernel._task_base = 0
    epoch = getattr(kernel, "_epoch", 0) % 0xFFFFFFFF + 1  # never 0: zeroed memory is epoch 0
    kernel._epoch = epoch
    base = kernel._task_base
    kernel._task_base = base + claims
    return int(kernel._ws_ptr), epoch, base


def release_workspace(kernel) -> None:
    ptr = getattr(kernel, "_ws_ptr", None)
    if ptr is not None:
        drv = _driver()
        _call("cuMemFree (the event workspace)", drv.cuMemFree, ptr)
        kernel._ws_ptr, kernel._ws_words = None, 0


def read_timeout(kernel, stream: int) -> None:
    """After a debug launch: raise EventTimeout if a wait gave up during this launch."""
    drv = _driver()
    _call(f"cuStreamSynchronize after kernel '{kernel.name}'", drv.cuStreamSynchronize, drv.CUstream(stream))
    report = (ctypes.c_uint64 * (REPORT_WORDS + 1))()
    _call("cuMemcpyDtoH (the timeout report)", drv.cuMemcpyDtoH, ctypes.addressof(report), kernel._ws_ptr,
          (REPORT_WORDS + 1) * 8)
    epoch, component, event, element, expected, observed, task, _, claimed = list(report)
    if epoch != kernel._epoch:
        return
    kernel._task_base = claimed  # CTAs that gave up made no final claim: start the next launch here
    comps = [c["name"] for c in kernel.manifest.get("components", [])]
    events = [e["name"] for e in kernel.manifest.get("workspace", {}).get("events", [])]
    name = lambda seq, i: seq[i] if i < len(seq) else f"#{i}"  # noqa: E731
    raise EventTimeout(kernel.name, name(comps, component), name(events, event), element, expected, observed, task)


__all__ = ["EventTimeout", "ensure_workspace", "release_workspace", "read_timeout", "LaunchError"]
