"""Which names a contract or pipeline may give to what becomes C++: the rules the generated header and glue need.

A component's name becomes a namespace and the prefix of its link-time symbols (`pl_<name>__...`, the double
underscore the separator), its entry symbols `extern "C"` functions, its parameters the kernel's parameters and
the prototypes' names, its geometry names constants or functions in its namespace; roles, buffers, ports and
barriers are parts of names the header derives (`<ROLE>_WARPS`, `smem_<buffer>`). A name C++ reserves (a double
underscore, or `_` and a capital) could collide with the linker's own symbols or the toolkit's; a keyword or a
CUDA built-in does not compile. Checked on the contract (`pipelink check`), so a build or a link never meets them.
"""
from __future__ import annotations

import re

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

# What a name is in the generated code: the whole name of a global function ("global"), of a namespace or a local
# ("whole"), or a part of names the header derives ("part", where a keyword is harmless: smem_int).
KINDS = ("global", "whole", "part")


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
    if kind == "global" and name == "main":
        return "the name of a program's entry point"
    if kind == "global" and name == "_":
        return "no PTX identifier (a lone underscore)"
    return None


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
