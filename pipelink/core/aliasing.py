"""Which pointer parameters of one entry may share a tensor: the contract's `may_alias`, and a call's binding.

A component's pointers are `__restrict__`: its code may assume that no two of them reach the same memory, so
the compiler may reorder, merge or cache their loads and stores (a const one through the read-only data path).
A call that binds one tensor to a parameter the entry writes and to another one it reads breaks that, and
the entry may read what it reads stale or half written; two written parameters bound to one tensor leave the
order of their stores undefined. An entry written to update a tensor in place (y = f(y), a residual added into
the buffer it comes from) says so in its contract: the written parameter's `"may_alias": ["r"]` names the const
pointer parameters a call may bind to its tensor, and the generated header declares neither `__restrict__`.

The rule sees a call's binding, not memory: two parameters are one tensor when the call binds them to one kernel
parameter (stacked or not: a call passes both the same layer's copy). Two read-only parameters may share a
tensor (nothing writes it); tensor maps are outside the rule (the contract does not say whether the TMA reads or
writes them). Pure: typed parameters in, problems out; the loader (PL201) and the calls (PL200) say them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .model import Param


def declaration_problems(params: Sequence[Param]) -> list[tuple[str, str, str | None]]:
    """(JSON pointer, message, hint) for every `may_alias` that does not name a const pointer parameter of the
    same entry with the declaring parameter's dtype, or that a parameter other than a written pointer declares."""
    by_name = {p.name: p for p in params}
    const_pointers = [p.name for p in params if p.pointer and p.const and p.tensor_map is None]
    listed = ", ".join(const_pointers) or "none"
    out = []
    for p in params:
        if not p.may_alias:
            continue
        at = f"{p.pointer_path}/may_alias"
        if not p.writes:
            what = ("a tensor map" if p.tensor_map is not None else "not a pointer" if not p.pointer
                    else "a const pointer, which the entry only reads")
            writers = [q.name for q in params if q.writes]
            out.append((at, f"parameter '{p.name}' is {what}: only a written pointer parameter declares the "
                        "read-only ones it may share a tensor with",
                        "declare may_alias on the parameter the entry writes, naming the const ones it reads "
                        f"(written pointer parameters: {', '.join(writers) or 'none'})"))
            continue
        for j, name in enumerate(p.may_alias):
            q = by_name.get(name)
            where = f"{at}/{j}"
            if q is None:
                out.append((where, f"'{p.name}' may alias '{name}', which is no parameter of the entry",
                            f"its const pointer parameters: {listed}"))
            elif q is p:
                out.append((where, f"'{p.name}' names itself in may_alias", f"its const pointer parameters: {listed}"))
            elif q.tensor_map is not None or not q.pointer:
                out.append((where, f"'{p.name}' may alias '{name}', which is "
                            f"{'a tensor map' if q.tensor_map is not None else 'not a pointer'}",
                            f"its const pointer parameters: {listed}"))
            elif not q.const:
                out.append((where, f"'{p.name}' may alias '{name}', which the entry writes too: two written "
                            "parameters never share a tensor (the order of their stores is undefined)",
                            "may_alias names const pointer parameters; a call binds written ones to different "
                            "tensors"))
            elif q.dtype != p.dtype:
                out.append((where, f"'{p.name}' ({p.dtype}) may alias '{name}' ({q.dtype}): one tensor has one "
                            "element type", f"declare both {p.dtype}, or leave '{name}' out of may_alias"))
    return out


def aliased_by(params: Sequence[Param]) -> dict[str, tuple[str, ...]]:
    """Each const pointer parameter some written one's `may_alias` names -> those written parameters."""
    out: dict[str, list[str]] = {}
    for p in params:
        for name in p.may_alias:
            out.setdefault(name, []).append(p.name)
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True)
class SharedTensor:
    """Two pointer parameters of one call bound to one tensor, where the entry writes one of them and its
    contract does not allow it."""

    tensor: str          # the kernel parameter the call binds both to
    written: str         # a parameter the entry writes through
    other: str           # the parameter bound beside it
    other_writes: bool   # True: the entry writes it too (no declaration allows that); False: it is const


def undeclared_sharing(params: Sequence[Param], bind: Mapping[str, str]) -> list[SharedTensor]:
    """Every pair of pointer parameters that `bind` (component parameter -> kernel parameter; a parameter it
    leaves out keeps its name) puts on one tensor, one of them written, and that no `may_alias` allows: a written
    one beside a const one it does not name, or two written ones. In the parameters' order."""
    tensors: dict[str, list[Param]] = {}
    for p in params:
        if p.pointer and p.tensor_map is None:
            tensors.setdefault(bind.get(p.name, p.name), []).append(p)
    out = []
    for tensor, group in tensors.items():
        written = [p for p in group if p.writes]
        for i, w in enumerate(written):
            out += [SharedTensor(tensor, w.name, o.name, True) for o in written[i + 1:]]
            out += [SharedTensor(tensor, w.name, o.name, False) for o in group
                    if not o.writes and o.name not in w.may_alias]
    return out
