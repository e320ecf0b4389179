"""The CUDA driver, as the runtime calls it: cuda-bindings imported on first use (the package imports on
machines without CUDA at all), every call checked, a failure a LaunchError naming the call and the
driver's words. Below the launcher and the workspace, which both call the driver through it."""
from __future__ import annotations

from ..core.diagnostics import PipelinkRunError


class LaunchError(PipelinkRunError):
    """A driver call failed (PL196). `result` is the CUresult name, `what` the call and its subject."""

    code = "PL196"

    def __init__(self, what: str, result: str | None = None, detail: str = ""):
        self.what = what
        self.result = result
        self.detail = detail
        message = f"{what} failed"
        if result:
            message += f": {result}"
        if detail:
            message += f" ({detail})"
        super().__init__(message)

    def with_hint(self, hint: str) -> "LaunchError":
        """The same failure with a hint appended to its detail."""
        return LaunchError(self.what, self.result, "; ".join(x for x in (self.detail, hint) if x))


def driver():
    # Imported on first use: the module must import on machines without CUDA at all.
    from cuda.bindings import driver

    return driver


def error_text(err) -> tuple[str, str]:
    """(CUresult name, the driver's description); the description is best effort."""
    name = getattr(err, "name", None) or str(err)
    try:
        e, text = driver().cuGetErrorString(err)
        if e == driver().CUresult.CUDA_SUCCESS and text:
            return name, text.decode(errors="replace")
    except Exception:  # no libcuda: the name alone still says what happened
        pass
    return name, ""


def call(what: str, fn, *args):
    """Call a cuda-bindings driver function; raise LaunchError unless it returned CUDA_SUCCESS.

    cuda-bindings returns `(CUresult, *outputs)`; the outputs come back as None, one value, or a
    tuple. It raises (instead of returning an error) when libcuda is missing or an argument has
    the wrong Python type; those become LaunchError too.
    """
    drv = driver()
    try:
        out = fn(*args)
    except Exception as exc:
        raise LaunchError(what, type(exc).__name__, str(exc)) from exc
    err, rest = out[0], out[1:]
    if err != drv.CUresult.CUDA_SUCCESS:
        name, text = error_text(err)
        raise LaunchError(what, name, text)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def gpu_available() -> bool:
    """True when the driver initialises and sees at least one device. Never raises."""
    try:
        drv = driver()
        (err,) = drv.cuInit(0)
        if err != drv.CUresult.CUDA_SUCCESS:
            return False
        err, count = drv.cuDeviceGetCount()
        return err == drv.CUresult.CUDA_SUCCESS and count > 0
    except Exception:
        return False


__all__ = ["LaunchError", "call", "driver", "error_text", "gpu_available"]
