"""Index maps from a component's task (tile) coordinates to event-tensor coordinates.

    ij->ij                          one-to-one
    ij->i                           reduction: every j of row i hits one event (count derived)
    i->i,:                          broadcast: task i hits every event along the second dim
    i->topk[i,:]                    data-dependent: the events are read from device tensor topk
    i->range(indptr[i], indptr[i+1]) data-dependent: a variable number of events
    i->range(i - 1, i + 2)          window: affine bounds, as exact as any affine term
    ij->i//2, j                     affine terms over task indices
    i->range(max(i - 1, 0), min(i + 2, ceil_div(N, T)))
                                    clamped: min/max (and sizes over geometry and runtime
                                    scalars) keep a window inside the tensor at its edges

The left side names the task dimensions (one letter each); the right side is either letters (a
shorthand for one term per letter) or comma-separated terms.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from .expr import INT64, MAX_C_BYTES, MAX_DEPTH, _c_size, python_ast, zero_divisor


class MapError(ValueError):
    pass


@dataclass(frozen=True)
class Term:
    kind: str            # "index" (affine in task indices) | "all" (:) | "gather" | "range"
    text: str
    tensors: tuple[str, ...] = ()  # device tensors a data-dependent term reads
    names: frozenset[str] = frozenset()  # geometry and runtime scalars an affine term uses (`min(i + 1, N - 1)`)

    @property
    def reads_device(self) -> bool:
        """A gather, or a range with a bound read from a tensor; `range(i - 1, i + 2)` is affine."""
        return bool(self.tensors)


@dataclass(frozen=True)
class IndexMap:
    text: str
    task_dims: tuple[str, ...]
    terms: tuple[Term, ...]

    @property
    def rank(self) -> int:
        """Rank of the event tensor the map indexes."""
        return len(self.terms)

    @property
    def tensors(self) -> tuple[str, ...]:
        return tuple(t for term in self.terms for t in term.tensors)

    @property
    def names(self) -> frozenset[str]:
        """Names other than task dimensions: geometry and runtime scalars, fixed for a launch."""
        return frozenset().union(*(t.names for t in self.terms))

    @property
    def kind(self) -> str:
        kinds = {t.kind for t in self.terms}
        if any(t.reads_device for t in self.terms):
            return "data_dependent"
        if "range" in kinds:
            return "window"
        if "all" in kinds:
            return "broadcast"
        used = set().union(*(_letters(t.text) for t in self.terms if t.kind == "index"))
        if set(self.task_dims) <= used and len(self.terms) == len(self.task_dims):
            return "one_to_one"
        return "reduction"


_LHS = re.compile(r"[a-z]{1,3}")


def parse_map(text: str) -> IndexMap:
    if not text.isprintable() or "#" in text:  # the text is quoted in the glue's comments; Python reads '#' as one
        raise MapError(f"{text!r} holds a line break, a control character or '#': a map is one line")
    if "->" not in text:
        raise MapError(f"{text!r} has no '->' between task and event coordinates")
    lhs, rhs = (s.strip() for s in text.split("->", 1))
    if not _LHS.fullmatch(lhs) or len(set(lhs)) != len(lhs):
        raise MapError(f"the task side {lhs!r} must be 1-3 distinct lowercase letters, e.g. 'ij'")
    dims = tuple(lhs)
    if re.fullmatch(r"[a-z]+", rhs):  # shorthand: ij->ji
        for ch in rhs:
            if ch not in dims:
                raise MapError(f"{ch!r} on the event side is not a task dimension of {lhs!r}")
        return IndexMap(text, dims, tuple(Term("index", ch) for ch in rhs))
    if not rhs:
        raise MapError(f"{text!r} has an empty event side")
    if rhs.endswith(","):  # Python's reading would take it for one term; a typo as often as not
        raise MapError(f"{text!r} ends its event side with a comma: name a term after it, or drop it")
    if not text.isascii():  # Python's parser folds look-alike letters (NFKC: a fullwidth 'ｉ' is 'i')
        raise MapError(f"{text[:40]!r} holds a character that is not ASCII")
    try:
        sub = python_ast(f"_[{rhs}]").body
        items = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
        terms = tuple(_term(item, dims, text) for item in items)
    except SyntaxError:
        raise MapError(f"cannot parse the event side {rhs!r}") from None
    except (RecursionError, MemoryError):  # the parser's and the walks' own limits on nesting
        raise MapError(f"{text[:40]!r}... nests too deeply; at most {MAX_DEPTH} levels are allowed") from None
    zero = zero_divisor(sub, {})
    if zero is not None:
        raise MapError(f"{text!r} divides by zero" + (f" ({zero} is 0)" if zero != "0" else ""))
    return IndexMap(text, dims, terms)


def _term(node: ast.AST, dims: tuple[str, ...], text: str) -> Term:
    src = ast.unparse(node) if not isinstance(node, ast.Slice) else ":"
    if isinstance(node, ast.Slice):
        if node.lower or node.upper or node.step:
            raise MapError(f"only a bare ':' is allowed as a slice in {text!r}")
        return Term("all", ":")
    if isinstance(node, ast.Subscript):  # topk[i, :]
        if not isinstance(node.value, ast.Name):
            raise MapError(f"a gathered tensor must be a parameter name in {text!r}")
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for item in inner:
            if isinstance(item, ast.Slice):
                if item.lower or item.upper or item.step:
                    raise MapError(f"only a bare ':' is allowed as a slice in {text!r}")
            else:
                _affine_term(item, dims, text)
        return Term("gather", src, (node.value.id,))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
        if len(node.args) != 2 or node.keywords:
            raise MapError(f"range takes (begin, end) in {text!r}")
        tensors, names = [], set()
        for arg in node.args:
            if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name):
                _affine_term(arg.slice, dims, text)
                tensors.append(arg.value.id)
            else:
                _affine_term(arg, dims, text, names)
        return Term("range", src, tuple(dict.fromkeys(tensors)), frozenset(names))
    names = set()
    _affine_term(node, dims, text, names)
    return Term("index", src, names=frozenset(names))


_CLAMPS = {"min": 2, "max": 2, "ceil_div": 2}


def _affine_term(node: ast.AST, dims: tuple[str, ...], text: str, names: set | None = None) -> None:
    """_affine over one whole term's expression, which the glue writes as C: min, max and ceil_div repeat their
    arguments there, so nested ones grow the glue 2^depth (a 200-character map had made gigabytes)."""
    _affine(node, dims, text, names)
    size = _c_size(node)
    if size > MAX_C_BYTES:
        raise MapError(f"{ast.unparse(node)[:40]!r}... in a map would be {size} bytes of C (nested min, max or "
                       f"ceil_div repeat their arguments); at most {MAX_C_BYTES}")


def _affine(node: ast.AST, dims: tuple[str, ...], text: str, names: set | None = None) -> None:
    """Task indices combined with integer literals by + - * // %. Where `names` is given (index
    terms and affine range bounds, not gathered indices) also min/max clamps and names of geometry
    and runtime scalars, collected into `names` for the loader to check: `min(i + 1, T - 1)`."""
    if isinstance(node, ast.Name):
        if node.id not in dims:
            if names is None or (len(node.id) == 1 and node.id.islower()):  # a one-letter name: a task dimension
                raise MapError(f"{node.id!r} is not a task dimension in {text!r}")
            names.add(node.id)
    elif isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        if not -INT64 <= node.value < INT64:
            raise MapError(f"the literal {str(node.value)[:24]}... in {text[:40]!r} does not fit in 64 bits")
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
        _affine(node.left, dims, text, names)
        _affine(node.right, dims, text, names)
    elif (names is not None and isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id in _CLAMPS and len(node.args) == _CLAMPS[node.func.id] and not node.keywords):
        for arg in node.args:
            _affine(arg, dims, text, names)
    else:
        raise MapError(f"unsupported index term {ast.unparse(node)!r} in {text!r}")


def tensor_reads(term: Term) -> list[tuple[str, tuple[str, ...]]]:
    """Each device read of a term: (tensor, its subscripts' texts, ':' for a whole axis). `topk[i, :]` is one read,
    `range(ptr[i], ptr[i + 1])` two."""
    if not term.tensors:
        return []
    node = python_ast(term.text).body
    subs = node.args if isinstance(node, ast.Call) else [node]
    out = []
    for sub in subs:
        if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name):
            items = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            out.append((sub.value.id, tuple(":" if isinstance(i, ast.Slice) else ast.unparse(i) for i in items)))
    return out


def _letters(text: str) -> set[str]:
    """The names an affine term's text uses."""
    return {n.id for n in ast.walk(python_ast(text)) if isinstance(n, ast.Name)}
