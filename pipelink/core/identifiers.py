"""Which names a contract or pipeline may give to what becomes C++: the rules the generated header and glue need.

A component's name becomes a namespace and the prefix of its link-time symbols (`pl_<name>__...`, the double
underscore the separator), its entry symbols `extern "C"` functions, its parameters the kernel's parameters and
the prototypes' names, its geometry names constants or functions in its namespace; roles, buffers, ports and
barriers are parts of names the header derives (`<ROLE>_WARPS`, `smem_<buffer>`). A name C++ reserves (a double
underscore, or `_` and a capital) could collide with the linker's own symbols or the toolkit's; a keyword or a
CUDA built-in does not compile. Checked on the contract (`pipelink check`), so a build or a link never meets them.

The component's namespace is declared inside pipelink's own namespace `pl` (`namespace pl { namespace <name> {`),
so it must not be a name pipelink's headers already give a member of `pl` (`pl::Tile`, `pl::warp_index`, the
namespace `pl::ring`): read from the headers themselves (`pl_members`). Every other name of a contract is declared
inside that namespace, in a prototype or at global scope, where `pl`'s members are only ever named qualified.
"""
from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path

CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
while xor xor_eq""".split())
CUDA_BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "pl"})
# Object-like macros the toolkit's and C library's headers define, which every component includes (math.h, limits,
# float.h, stdio, CUDA's math constants): a parameter so named is expanded away (`float INFINITY` becomes a
# parameter of function type, `float (__builtin_inff())`), compiles, and calls through a float. The compile-failure
# probe finds the others where they break the build (builder._names_the_toolkit_defines).
TOOLKIT_MACROS = frozenset("""
INFINITY HUGE_VAL HUGE_VALF HUGE_VALL NAN NULL EOF BUFSIZ FILENAME_MAX RAND_MAX EXIT_SUCCESS EXIT_FAILURE
CHAR_BIT CHAR_MAX CHAR_MIN SCHAR_MAX SCHAR_MIN UCHAR_MAX SHRT_MAX SHRT_MIN USHRT_MAX INT_MAX INT_MIN UINT_MAX
LONG_MAX LONG_MIN ULONG_MAX LLONG_MAX LLONG_MIN ULLONG_MAX FLT_MAX FLT_MIN FLT_EPSILON FLT_DIG FLT_MANT_DIG
DBL_MAX DBL_MIN DBL_EPSILON DBL_DIG DBL_MANT_DIG M_PI M_E M_SQRT2 M_LN2 M_LN10 M_LOG2E M_LOG10E M_PI_2 M_PI_4
M_1_PI M_2_PI M_2_SQRTPI M_SQRT1_2 FP_NAN FP_INFINITE FP_ZERO FP_NORMAL FP_SUBNORMAL MATH_ERRNO EDOM ERANGE errno
CUDART_INF CUDART_INF_F CUDART_NAN CUDART_NAN_F CUDART_PI CUDART_PI_F CUDART_MAX_NORMAL_F CUDART_MIN_DENORM_F
CUDA_VERSION CUDART_VERSION assert offsetof""".split())
_RESERVED = re.compile(r"__|^_[A-Z]")
# Macros `pipelink build` defines on nvcc's command line (authoring/builder.py nvcc_command): in no header to read.
BUILD_MACROS = frozenset({"PIPELINK_HEADER"})
# The generated header's alias of the component's namespace, at global scope (authoring/header.py self_alias).
COMPONENT_ALIAS = "pl_component"

# What a name is in the generated code: the whole name of a global function ("global"), of the component's namespace
# (a member of pipelink's namespace pl: "namespace"), of a local or a name inside that namespace ("whole"), or a part
# of names the header derives ("part", where a keyword is harmless: smem_int).
KINDS = ("global", "namespace", "whole", "part")


def problem(name: str, kind: str) -> str | None:
    """Why `name` cannot be used as a `kind` name in the generated code, or None."""
    if _RESERVED.search(name):
        return ("a name C++ reserves (a double underscore, or an underscore and a capital), which the linker's own "
                "symbols use (pl_<component>__...)")
    if kind == "part":
        return None
    if name in CPP_KEYWORDS:
        return "a C++ keyword"
    if name in CUDA_BUILTINS:
        return "a CUDA built-in or pipelink's namespace"
    if name in TOOLKIT_MACROS:
        return "a macro the CUDA headers define (the compiler would expand it, not name it)"
    if name in pipelink_macros():
        return "a macro pipelink's headers define (the compiler would expand it, not name it)"
    if name in BUILD_MACROS:
        return "the macro `pipelink build` defines to name the generated header (the compiler would expand it)"
    if kind == "namespace" and name in pl_members():
        what, header = pl_members()[name]
        return (f"the name of pipelink's {what} pl::{name} ({_HEADERS}/{header}): the component's namespace "
                "pl::<name> would " + ("reopen it, adding the component's names to pipelink's own"
                                       if what == "namespace" else "redeclare it"))
    if kind == "global" and name == "main":
        return "the name of a program's entry point"
    if kind == "global" and name == "_":
        return "no PTX identifier (a lone underscore)"
    return None


_HEADERS = "pipelink/include/pipelink"
# Tokens of pipelink's headers: comments, string and character literals and preprocessor lines (which the scan
# skips: an asm string holds braces), identifiers and numbers, and any other character alone.
_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*'
                    r'|[A-Za-z_]\w*|\d[\w.]*|\S', re.S | re.M)
_IDENT = re.compile(r"[A-Za-z_]\w*\Z")
_ATTRIBUTES = frozenset({"alignas", "__align__", "__attribute__", "__launch_bounds__", "__declspec"})


def _header_texts() -> dict[str, str]:
    folder = Path(str(resources.files("pipelink.include"))) / "pipelink"
    return {p.name: p.read_text() for p in sorted(folder.glob("*.h"))}


@functools.cache
def pipelink_macros() -> frozenset[str]:
    """The macros pipelink's headers define (PL_COMPONENT_ABI, PL_WAIT_BACKOFF_NS, ...)."""
    return frozenset(m.group(1) for text in _header_texts().values()
                     for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", text, re.M))


@functools.cache
def pl_members() -> dict[str, tuple[str, str]]:
    """Every name pipelink's headers declare directly in namespace `pl`, read from the headers: name -> (what it is:
    "namespace", "type", "function or variable" or "enumerator"; the header)."""
    out: dict[str, tuple[str, str]] = {}
    for file, text in _header_texts().items():
        for name, what in _pl_declarations(text):
            out.setdefault(name, (what, file))
    return out


def _pl_declarations(text: str):
    """(name, what) for each declaration at the top level of a `namespace pl { ... }` block of `text`."""
    tokens = [t for t in _TOKEN.findall(text) if not t.startswith(("//", "/*", "#", '"', "'"))]
    stack: list[str] = []  # "pl", "ns" (another namespace), "enum" (an enum's body in pl), "block"
    stmt: list[str] = []
    for tok in tokens:
        in_pl = stack == ["pl"]
        if tok == "{":
            if stmt[:1] == ["namespace"]:
                name = stmt[1] if len(stmt) > 1 else ""
                if in_pl and name:
                    yield name, "namespace"
                stack.append("pl" if not stack and name == "pl" else "ns")
            else:
                declared = _declared(stmt) if in_pl else None
                if declared is not None and declared[0]:
                    yield declared
                stack.append("enum" if in_pl and stmt[:1] == ["enum"] and "class" not in stmt[:2] else "block")
            stmt = []
        elif tok == "}":
            if stack and stack[-1] == "enum":
                yield from ((item[0], "enumerator") for item in _split(stmt, ",") if item)
            if stack:
                stack.pop()
            stmt = []
        elif tok == ";":
            if in_pl:
                declared = _declared(stmt)
                if declared is not None and declared[0]:
                    yield declared
            stmt = []
        else:
            stmt.append(tok)


def _split(tokens: list[str], sep: str) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for t in tokens:
        if t == sep:
            out.append([])
        else:
            out[-1].append(t)
    return out


def _skip_group(tokens: list[str], i: int, open_: str, close: str) -> int:
    """The index after the group that opens at tokens[i]."""
    depth = 0
    for j in range(i, len(tokens)):
        depth += (tokens[j] == open_) - (tokens[j] == close)
        if depth == 0:
            return j + 1
    return len(tokens)


def _declared(stmt: list[str]) -> tuple[str, str] | None:
    """(name, what) a declaration statement at namespace scope declares, or None (static_assert, using namespace)."""
    toks, i = stmt, 0
    while i < len(toks) and toks[i] == "template":
        i = _skip_group(toks, i + 1, "<", ">")
    toks = toks[i:]
    if not toks or toks[0] in ("static_assert", "extern") or toks[:2] == ["using", "namespace"]:
        return None
    if toks[0] == "using":
        return (toks[1], "type") if len(toks) > 2 and toks[2] == "=" else None
    if toks[0] == "typedef":
        return next(((t, "type") for t in reversed(toks) if _IDENT.match(t)), None)
    for j, t in enumerate(toks):
        if t in ("struct", "class", "union", "enum"):
            k = j + 1 + (toks[j + 1:j + 2] in (["class"], ["struct"]))
            while k < len(toks) and toks[k] in _ATTRIBUTES:
                k = _skip_group(toks, k + 1, "(", ")")
            return (toks[k], "type") if k < len(toks) and _IDENT.match(toks[k]) else ("", "type")
        if t == "(" and j and toks[j - 1] not in _ATTRIBUTES and _IDENT.match(toks[j - 1]):
            return toks[j - 1], "function or variable"
        if t in ("=", "["):
            break
    names = [t for t in toks[:j + 1] if _IDENT.match(t)] if toks else []
    return (names[-1], "function or variable") if names else None


def named_in_errors(log: str) -> dict[str, str]:
    """The identifiers a compiler's error lines quote (`error: ... "printf" ...`), each with its line: how a name
    the toolkit's headers already declare at global scope shows, which no list here could hold."""
    return {m.group(1): line.strip() for line in log.splitlines() if ": error: " in line
            for m in re.finditer(r'"([A-Za-z_]\w*)"', line)}


def names_the_toolkit_declares(contract, log: str, within: str | None = None) -> list[tuple[str, str, str, str]]:
    """(name, JSON pointer, what it is, the compiler's line) for each entry symbol or parameter of `contract` that a
    compiler's error quotes (only errors in the file `within`, when given): names the toolkit's headers declare at
    global scope (printf, sqrtf, ...), which no list here can hold."""
    named = {n: line for n, line in named_in_errors(log).items() if within is None or within in line}
    return [(name, pointer, what, named[name]) for name, pointer, what in contract_names(contract) if name in named]


def contract_names(contract) -> list[tuple[str, str, str]]:
    """(name, JSON pointer, what it is) for each entry symbol and parameter of `contract`: the names of a contract
    that reach the compiled code."""
    places = [(s, pointer, "entry symbol") for s, pointer in contract.symbol_pointers()]  # either form's own fields
    return places + [(p.name, p.pointer_path, "parameter") for p in contract.entry.params]


def macro_probe(prologue: str, names) -> str:
    """CUDA C++ that, compiled after `prologue` (a unit's #include lines), fails once for each of `names` that is a
    macro there, quoting it as `pipelink-macro NAME` (static_assert: every failure reported, where #error stops at
    the first). A macro's name never reaches a compiler's error as written: it is expanded first."""
    checks = [f'#ifdef {n}\nstatic_assert(false, "pipelink-macro {n}");\n#endif' for n in sorted(set(names))]
    return prologue.rstrip("\n") + "\n" + "\n".join(checks) + "\n"


def macros_in_probe_log(log: str) -> set[str]:
    return set(re.findall(r"pipelink-macro (\w+)", log))
