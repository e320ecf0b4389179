import re

import pytest

from pipelink.core.expr import ExprError, parse


@pytest.mark.parametrize("text,env,value", [
    (128, {}, 128),
    ("TILE_M * 64 * 4", {"TILE_M": 32}, 8192),
    ("ceil_div(M, TILE_M)", {"M": 100, "TILE_M": 32}, 4),
    ("ceil_div(M, TILE_M)", {"M": 96, "TILE_M": 32}, 3),
    ("max(A, B) - min(A, B) + A // B % 3", {"A": 7, "B": 2}, 5 + 3 % 3),
    ("-A + 10", {"A": 3}, 7),
])
def test_evaluate(text, env, value):
    e = parse(text)
    assert e.evaluate(env) == value


def test_names_and_constant():
    e = parse("ceil_div(M, TILE_M) * STAGES")
    assert e.names == {"M", "TILE_M", "STAGES"}
    assert not e.is_constant
    assert parse(3).is_constant


@pytest.mark.parametrize("bad", ["2 ** 3", "a.b", "f(1)", "min(1)", "1.5", "'x'", "a if b else c", "", "(",
                                 "__import__('os')", "[1]", "True", "x < 3"])
def test_rejects(bad):
    with pytest.raises(ExprError):
        parse(bad)


def test_rejects_bool_and_float():
    with pytest.raises(ExprError):
        parse(True)
    with pytest.raises(ExprError):
        parse(2.0)


def test_missing_name_and_division_by_zero():
    with pytest.raises(ExprError, match="no value for M"):
        parse("M + 1").evaluate({})
    with pytest.raises(ExprError):
        parse("A // B").evaluate({"A": 1, "B": 0})
    with pytest.raises(ExprError):
        parse("ceil_div(A, B)").evaluate({"A": 1, "B": 0})


def test_to_c_matches_python():
    e = parse("ceil_div(M, T) * 4 + max(M, T) % 5")
    c = e.to_c()
    env = {"M": 70, "T": 32}
    assert c == "((((M + T - 1) / T) * 4) + (((M) > (T) ? (M) : (T)) % 5))"
    assert e.evaluate(env) == 3 * 4 + 70 % 5


def test_long_or_deep_expressions_are_refused_not_a_stack_overflow():
    """Python's parser and the walks here recurse once a nesting level: a deep text is an ExprError (a
    located diagnostic), never a RecursionError or MemoryError."""
    from pipelink.core.expr import MAX_DEPTH
    for text in ("1+" * 100_000 + "1", "-" * 100_000 + "1", "(" * 5000 + "1" + ")" * 5000,
                 "-" * (MAX_DEPTH + 10) + "1"):
        with pytest.raises(ExprError, match=f"at most {MAX_DEPTH} levels|too many nested"):
            parse(text)
    long_flat = " + ".join(f"(NL) * (ceil_div(H, {i}))" for i in range(1, 60))  # a linker's sum over calls
    assert parse(long_flat).evaluate({"NL": 2, "H": 64}) == sum(2 * -(-64 // i) for i in range(1, 60))


def test_every_parse_of_text_goes_through_the_locked_parser():
    """CPython's parser is not safe in two threads at once (3.11, 3.12: "AST constructor recursion depth
    mismatch", seen loading contracts from a thread pool): pipelink parses and compiles text only through
    expr.python_ast / python_code, which hold one lock."""
    import re
    from pathlib import Path
    package = Path(__file__).resolve().parent.parent / "pipelink"
    calls = re.compile(r"\bast\.parse\(|(?<![\w.])compile\(")
    found = [f"{f.relative_to(package)}:{i}" for f in package.rglob("*.py") if f.name != "expr.py"
             for i, line in enumerate(f.read_text().splitlines(), 1) if calls.search(line.split("#")[0])
             and "re.compile" not in line and "torch.compile" not in line]
    assert found == []


def test_expressions_parse_from_many_threads():
    from concurrent.futures import ThreadPoolExecutor
    texts = [f"ceil_div(M + {i}, TILE_M) * (N - {i}) * 4" for i in range(400)]
    with ThreadPoolExecutor(8) as pool:
        parsed = list(pool.map(parse, texts))
    assert [p.text for p in parsed] == [parse(t).text for t in texts]


@pytest.mark.parametrize("bad, says", [
    ("ceil_div(N, 0)", "divides by zero"), ("N // 0", "divides by zero"), ("N % (4 - 4)", "(4 - 4 is 0)"),
    ("9999999999999999999999999 * N", "does not fit in 64 bits"), ("-9223372036854775809 + N", "64 bits"),
    ("\uff49 + 1", "not ASCII"), ("N\u00b2", "not ASCII")])
def test_a_divisor_of_literals_zero_a_literal_past_64_bits_or_a_look_alike_letter_is_refused(bad, says):
    """Such an expression had passed: the glue divided by zero on the device (the code compiled away), printed a
    literal no C++ integer holds, or took a fullwidth letter for the ASCII one (Python's parser folds them)."""
    with pytest.raises(ExprError, match=re.escape(says)):
        parse(bad)
    assert parse("-9223372036854775807 + N // (T - 1) + 9223372036854775807").names == {"N", "T"}


def test_zero_divisor_under_an_environment():
    from pipelink.core.expr import zero_divisor
    e = parse("N // (TILE - 1024) + ceil_div(M, T)")
    assert zero_divisor(e.tree, {"TILE": 1024}) == "TILE - 1024"
    assert zero_divisor(e.tree, {"TILE": 512, "T": 4}) is None
    assert zero_divisor(e.tree, {"T": 0}) == "T"
    assert zero_divisor(e.tree, {}) is None


def test_nested_clamps_whose_c_would_grow_past_the_cap_are_refused():
    """min, max and ceil_div repeat their arguments in C: 20 nested max() in 200 characters had made gigabytes of
    glue (and the link ran out of memory). An expression or map term whose C passes 64 KB is refused as it is read;
    the usual ones are far below."""
    import time
    from pipelink.core.expr import MAX_C_BYTES, ExprError, parse
    from pipelink.core.indexmap import MapError, parse_map
    start = time.monotonic()
    with pytest.raises(ExprError, match="bytes of C"):
        parse("max(" * 20 + "ceil_div(N, TILE)" + ", 1)" * 20)
    with pytest.raises(MapError, match="bytes of C"):
        parse_map("i->range(" + "max(" * 40 + "i - 1" + ", 0)" * 40 + ", i)")
    assert time.monotonic() - start < 5
    assert len(parse("max(" * 6 + "ceil_div(N, TILE)" + ", 1)" * 6).to_c()) < MAX_C_BYTES
    parse_map("i->range(max(i - 1, 0), min(i + 2, N))")


@pytest.mark.parametrize("value", [2**63, -2**63 - 1, 2**64 - 1])
def test_a_json_integer_past_64_bits_is_refused_as_a_string_literal_is(value):
    from pipelink.core.expr import ExprError, parse
    with pytest.raises(ExprError, match="does not fit in 64 bits"):
        parse(value)


@pytest.mark.parametrize("text", ["ceil_div(K, KCHUNK) # chunks", "0x40", "1_000", "TILE * 1e3", "0b101"])
def test_python_syntax_past_the_grammar_is_refused(text):
    """A comment (which swallowed the rest when the link wrapped the text in parentheses: exit 3), and numerals in
    other bases or with underscores, are not the grammar's; decimal integers and names with digits are."""
    with pytest.raises(ExprError):
        parse(text)
    assert parse("W2_SIZE * 2 + TILE_3").evaluate({"W2_SIZE": 4, "TILE_3": 1}) == 9
