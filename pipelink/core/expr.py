"""Integer size expressions in contracts: `"TILE_M * 64 * 4"`, `"ceil_div(M, TILE_M)"`.

Sizes in a contract may depend on geometry (link-time constants) and on runtime scalar
parameters (shapes known only at launch). An expression is parsed once, with Python's own parser
restricted to integer arithmetic, so it can be evaluated at link time or turned into C++ for the
generated glue.
"""
from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass, field

FUNCTIONS = {"min": 2, "max": 2, "ceil_div": 2}
# The deepest nesting (an operator or a call in another) an expression may have. Python's parser and the walks
# below recurse once a level. A contract's sizes are at most 256 characters (the schema); the linker's own
# sums over a pipeline's calls are longer (the decode step's task count: 250 characters) but shallow.
MAX_DEPTH = 500
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%"}

# CPython's parser (3.11, 3.12) keeps its recursion depth per interpreter, not per thread: two threads parsing at
# once (contracts loaded by a thread pool) can fail with "SystemError: AST constructor recursion depth mismatch".
# Every parse and compile of text in pipelink goes through these two, one at a time.
_PARSER = threading.Lock()


def python_ast(text: str, mode: str = "eval") -> ast.AST:
    """ast.parse, safe to call from several threads."""
    with _PARSER:
        return ast.parse(text, mode=mode)


def python_code(text: str, name: str):
    """compile(text, name, "eval"), safe to call from several threads."""
    with _PARSER:
        return compile(text, name, "eval")


class ExprError(ValueError):
    pass


@dataclass(frozen=True)
class Expr:
    """A parsed integer expression. `names` are its free variables."""

    text: str
    tree: ast.expr = field(repr=False)  # its text says it: a repr (a cache key) holds no object address
    names: frozenset[str]

    @property
    def is_constant(self) -> bool:
        return not self.names

    def evaluate(self, env: dict[str, int]) -> int:
        missing = self.names - env.keys()
        if missing:
            raise ExprError(f"no value for {', '.join(sorted(missing))}")
        return _eval(self.tree, env)

    def c_int_overflow(self, env: dict[str, int]) -> str | None:
        """The first part of the expression whose value, computed as to_c's C computes it in 32-bit int (ceil_div
        as (a + b - 1) / b), leaves int at these values: its text and value; None when every step fits (and
        where a value is missing or a divisor is zero: other checks' business)."""
        try:
            _c_int(self.tree, env)
        except _Overflow as exc:
            return str(exc)
        except (ExprError, KeyError, ZeroDivisionError):
            return None
        return None

    def to_c(self, rename=lambda n: n) -> str:
        """C++ for the glue; `/` on non-negative ints is floor division there too."""
        return _to_c(self.tree, rename)

    def __str__(self) -> str:
        return self.text


def parse(value: int | str) -> Expr:
    """Parse an int or an expression string; raises ExprError with a readable reason."""
    if isinstance(value, bool):
        raise ExprError("a boolean is not a size")
    if isinstance(value, int):
        if not -INT64 <= value < INT64:  # a JSON integer: the same bound as a literal written in a string
            raise ExprError(f"the literal {str(value)[:24]}... does not fit in 64 bits")
        return Expr(str(value), ast.Constant(value), frozenset())
    if not isinstance(value, str):
        raise ExprError(f"expected an integer or an expression string, got {type(value).__name__}")
    if not value.isascii():  # Python's parser folds look-alike letters (NFKC: a fullwidth 'ｉ' is 'i')
        raise ExprError(f"{value[:40]!r} holds a character that is not ASCII: names are C identifiers")
    # Python's own syntax past the grammar: a comment (`# chunks` swallowed the rest of a text the link wraps in
    # parentheses and parses again), numerals in other bases or with underscores (0x40, 1_000), which C reads
    # otherwise or not at all
    if "#" in value:
        raise ExprError(f"{value[:40]!r} holds '#': an expression has no comments (say it in the description)")
    for numeral in re.findall(r"(?<![A-Za-z0-9_])[0-9][A-Za-z0-9_]*", value):
        if not numeral.isdigit():
            raise ExprError(f"{value[:40]!r}: {numeral[:20]!r} is not a decimal integer (write integers in decimal "
                            "digits only)")
    try:
        tree = python_ast(value.strip()).body
    except SyntaxError as exc:
        raise ExprError(f"cannot parse {value!r}: {exc.msg}") from None
    except (RecursionError, MemoryError):  # the parser's own limits on nesting
        raise ExprError(f"{value[:40]!r}... nests too deeply for the parser; at most {MAX_DEPTH} levels are "
                        "allowed") from None
    depth, stack = 0, [(tree, 1)]
    while stack:  # without recursion: the walks below recurse, so they run on trees of bounded depth
        node, level = stack.pop()
        depth = max(depth, level)
        stack += [(child, level + 1) for child in ast.iter_child_nodes(node)]
    if depth > MAX_DEPTH:
        raise ExprError(f"{value[:40]!r}... nests {depth} deep; at most {MAX_DEPTH} levels are allowed")
    names: set[str] = set()
    _validate(tree, names, value)
    size = _c_size(tree)
    if size > MAX_C_BYTES:  # min, max and ceil_div repeat their arguments in C: nested, the glue grows 2^depth
        raise ExprError(f"{value[:40]!r}... would be {size} bytes of C (nested min, max or ceil_div repeat their "
                        f"arguments); at most {MAX_C_BYTES}")
    zero = zero_divisor(tree, {})
    if zero is not None:
        raise ExprError(f"{value!r} divides by zero" + (f" ({zero} is 0)" if zero != "0" else ""))
    return Expr(value, tree, frozenset(names))


INT64 = 1 << 63  # literals and the glue's arithmetic are 64-bit at most
MAX_C_BYTES = 1 << 16  # an expression's C text (to_c), before its names are renamed


def _c_size(node: ast.expr) -> int:
    """The length of _to_c's text of `node` (names as written), without writing it."""
    if isinstance(node, ast.Constant):
        return len(str(node.value))
    if isinstance(node, ast.Name):
        return len(node.id)
    if isinstance(node, ast.UnaryOp):
        return _c_size(node.operand) + 3
    if isinstance(node, ast.Call):
        a, b = (_c_size(x) for x in node.args)
        return a + 2 * b + 12 if node.func.id == "ceil_div" else 2 * (a + b) + 20
    return _c_size(node.left) + _c_size(node.right) + 5


def zero_divisor(node: ast.AST, env: dict[str, int]) -> str | None:
    """The first divisor (of //, % or ceil_div) in the tree that `env` alone decides and that is zero, as written;
    None when there is none. With env {} that is a divisor of literals only, zero at every launch."""
    for sub in ast.walk(node):
        divisor = sub.right if isinstance(sub, ast.BinOp) and isinstance(sub.op, (ast.FloorDiv, ast.Mod)) else \
            sub.args[1] if isinstance(sub, ast.Call) and getattr(sub.func, "id", None) == "ceil_div" and \
            len(sub.args) == 2 else None
        if divisor is None or any(isinstance(n, ast.Name) and n.id not in env for n in ast.walk(divisor)):
            continue
        try:
            if _eval(divisor, env) == 0:
                return ast.unparse(divisor)
        except (ExprError, KeyError, TypeError, AttributeError):
            continue
    return None


def _validate(node: ast.AST, names: set[str], text: str) -> None:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise ExprError(f"only integer literals are allowed in {text!r}")
        if not -INT64 <= node.value < INT64:
            raise ExprError(f"the literal {str(node.value)[:24]}... in {text[:40]!r} does not fit in 64 bits")
    elif isinstance(node, ast.Name):
        names.add(node.id)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise ExprError(f"operator not allowed in {text!r} (use + - * // %)")
        _validate(node.left, names, text)
        _validate(node.right, names, text)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _validate(node.operand, names, text)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
            raise ExprError(f"only {', '.join(FUNCTIONS)} may be called in {text!r}")
        if len(node.args) != FUNCTIONS[node.func.id]:
            raise ExprError(f"{node.func.id} takes {FUNCTIONS[node.func.id]} arguments in {text!r}")
        for arg in node.args:
            _validate(arg, names, text)
    else:
        raise ExprError(f"not an integer expression: {text!r}")


def _eval(node: ast.expr, env: dict[str, int]) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return int(env[node.id])
    if isinstance(node, ast.UnaryOp):
        return -_eval(node.operand, env)
    if isinstance(node, ast.Call):
        a, b = (_eval(x, env) for x in node.args)
        if node.func.id == "ceil_div":
            if b == 0:
                raise ExprError("ceil_div by zero")
            return -(-a // b)
        return min(a, b) if node.func.id == "min" else max(a, b)
    a, b = _eval(node.left, env), _eval(node.right, env)
    if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0:
        raise ExprError("division by zero")
    return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b,
            ast.FloorDiv: a // b if b else 0, ast.Mod: a % b if b else 0}[type(node.op)]


class _Overflow(Exception):
    pass


INT32 = (-(1 << 31), (1 << 31) - 1)


def _c_int(node: ast.expr, env: dict[str, int]) -> int:
    """_eval as the glue's C computes it in int, raising _Overflow at the first value outside int32."""
    def fit(value: int, shown) -> int:
        if not INT32[0] <= value <= INT32[1]:
            raise _Overflow(f"{shown()} = {value}")
        return value
    if isinstance(node, ast.Constant):
        return fit(node.value, lambda: str(node.value))
    if isinstance(node, ast.Name):
        return fit(int(env[node.id]), lambda: node.id)
    if isinstance(node, ast.UnaryOp):
        return fit(-_c_int(node.operand, env), lambda: ast.unparse(node))
    if isinstance(node, ast.Call):
        a, b = (_c_int(x, env) for x in node.args)
        if node.func.id == "ceil_div":
            fit(a + b - 1, lambda: f"{ast.unparse(node.args[0])} + {ast.unparse(node.args[1])} - 1 (ceil_div in C)")
            return fit(-(-a // b) if b else 0, lambda: ast.unparse(node))
        return min(a, b) if node.func.id == "min" else max(a, b)
    a, b = _c_int(node.left, env), _c_int(node.right, env)
    value = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b,
             ast.FloorDiv: a // b if b else 0, ast.Mod: a % b if b else 0}[type(node.op)]
    return fit(value, lambda: ast.unparse(node))


def _to_c(node: ast.expr, rename) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.Name):
        return rename(node.id)
    if isinstance(node, ast.UnaryOp):
        return f"(-{_to_c(node.operand, rename)})"
    if isinstance(node, ast.Call):
        a, b = (_to_c(x, rename) for x in node.args)
        if node.func.id == "ceil_div":
            return f"(({a} + {b} - 1) / {b})"
        op = "<" if node.func.id == "min" else ">"
        return f"(({a}) {op} ({b}) ? ({a}) : ({b}))"
    return f"({_to_c(node.left, rename)} {_BINOPS[type(node.op)]} {_to_c(node.right, rename)})"
