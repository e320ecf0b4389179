"""Names the generated glue cannot take from a contract.

The glue is one C++ function: the kernel's parameters (named by the contracts, or by a calls pipeline's
bindings), the components' entry functions, and its own locals (the task index, the tile, the event
counters). A parameter named as a local is shadowed by it, and a component then receives the glue's value
instead of the caller's (a parameter `t` got the task index): silently wrong results. A C++ keyword or a
CUDA built-in does not compile. So the link refuses both, naming the parameter or the component; the
locals are read from the generated glue itself, so a new local needs no list kept by hand.
"""
from __future__ import annotations

import re

from ..core.identifiers import CPP_KEYWORDS, CUDA_BUILTINS  # noqa: F401 - the link's callers read them here

# A declaration: a type's last word (or a template's `>`), its `*`, `&` and `const`, then the declared name and
# what may follow one (an initializer, the end of the statement, an array's extent, the next declarator).
# `return x;` and `f(tile, &a, K)` declare nothing.
_NOT_TYPES = r"(?:return|else|case|goto|delete|new|throw|co_return|co_yield|sizeof)\b"
_DECLARED = re.compile(rf"(?<![\w.])(?:(?!{_NOT_TYPES})[A-Za-z_]\w*|>)\s*(?:const\s+)?[*&]*\s*(?:const\s+)?"
                       rf"(?<![\w.])([A-Za-z_]\w*)\s*(?:=(?!=)|;|\[|,)")


def kernel_body(glue: str, kernel: str) -> str:
    """The text of the generated kernel's function (from its signature to the end), or '' if not found."""
    start = glue.find(f" {kernel}(")
    return glue[start:] if start >= 0 else ""


# The next declarator of a declaration (`int t = 0, it = 0`): the glue passes no assignment as an argument.
_MORE = re.compile(r",\s*([A-Za-z_]\w*)\s*=(?!=)")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def declared_locals(body: str) -> set[str]:
    """Every name the glue declares in the kernel's body (its comments left out)."""
    code = _COMMENT.sub(" ", body)
    return {m.group(1) for pattern in (_DECLARED, _MORE) for m in pattern.finditer(code)}


def clashes(glue: str, kernel: str, params: list[str], symbols: list[str],
            specialized: frozenset = frozenset()) -> list[tuple[str, str, str]]:
    """(kind, name, why) for each kernel parameter or component entry symbol the glue cannot use as named. A
    specialized parameter is a local of the glue by design (its constant, under the parameter's name)."""
    body = kernel_body(glue, kernel)
    signature_end = body.find("{")
    local = declared_locals(body[signature_end:]) if signature_end >= 0 else set()
    out = []
    for kind, names in (("kernel parameter", params), ("entry symbol", symbols)):
        for name in names:
            if name in CPP_KEYWORDS:
                out.append((kind, name, "a C++ keyword"))
            elif name in CUDA_BUILTINS:
                out.append((kind, name, "a CUDA built-in or pipelink's namespace"))
            elif kind == "kernel parameter" and name in symbols:
                out.append((kind, name, "an entry symbol of the link: inside the kernel the parameter would hide the "
                                        "function"))
            elif (name in local and name not in specialized) or name.startswith("pl_"):
                out.append((kind, name, "a name the generated glue declares for itself (its locals, and every "
                                        "name beginning pl_)"))
    return out
