"""The buffers a launch passes, against the sizes and alignments the contracts declare.

A pointer parameter whose contract gives its `shape` (an output, a workspace, a tensor an index map
reads) must be handed a buffer of at least that many elements, and one behind a global-memory port
with an `align` an address that is a multiple of it. Too small a buffer would otherwise be a fault,
or a silent overwrite of a neighbour, in the middle of the kernel; here it is an error before the
launch. Pure: the manifest's parameter entries, the arguments and the integer arguments in, the
first problem (a sentence) or None out. A raw integer address carries no size: only its
alignment is checked.
"""
from __future__ import annotations

import math

from ..core import expr as _expr


def extent_of(value) -> tuple[int | None, int | None]:
    """(address, elements) of an argument: a torch tensor, an object with __cuda_array_interface__,
    or a raw address (elements unknown). (None, None) for anything else: the launcher's own pointer
    checks refuse it."""
    if all(hasattr(value, a) for a in ("data_ptr", "numel")):
        return int(value.data_ptr()), int(value.numel())
    try:
        cai = getattr(value, "__cuda_array_interface__", None)
    except Exception:
        cai = None
    if isinstance(cai, dict):
        return int(cai["data"][0]), math.prod(cai.get("shape", ()))
    if isinstance(value, int) and not isinstance(value, bool):
        return value, None
    return None, None


def buffer_problem(kernel: str, params: list[dict], values: dict, env: dict[str, int]) -> str | None:
    """Why an argument cannot serve its pointer parameter's declared extents or alignment, or None."""
    for p in params:
        if not p.get("pointer") or p.get("implicit") or p["name"] not in values:
            continue
        shapes, align = p.get("shapes", []), p.get("align")
        if not shapes and not align:
            continue
        if not (isinstance(shapes, list) and all(isinstance(s, list) and all(isinstance(e, (str, int)) for e in s)
                                                  for s in shapes)) \
                or (align is not None and (not isinstance(align, int) or isinstance(align, bool) or align < 1)):
            return f"manifest of kernel '{kernel}': parameter '{p['name']}' has malformed 'shapes' or 'align'"
        address, elements = extent_of(values[p["name"]])
        if address is None:
            continue
        if align and address % align:
            return (f"argument '{p['name']}' of kernel '{kernel}' starts at {address:#x}, which is not "
                    f"{align}-byte aligned as its contract declares")
        for shape in shapes if elements is not None else ():  # each component's view must fit
            try:
                extents = [_expr.parse(e).evaluate(env) for e in shape]
            except _expr.ExprError as exc:
                return f"the shape [{', '.join(map(str, shape))}] of argument '{p['name']}' of kernel '{kernel}': {exc}"
            need = math.prod(max(e, 0) for e in extents)
            if elements < need:
                names = sorted({n for e in shape for n in _expr.parse(e).names})
                at = ", ".join(f"{n}={env[n]}" for n in names)
                return (f"argument '{p['name']}' of kernel '{kernel}' holds {elements} elements; its contract "
                        f"declares [{', '.join(map(str, shape))}] = {extents}, {need} elements" + (f" for {at}" if at else "")
                        + ": the kernel would reach past its end")
    return None
