"""The JSON Schemas of pipelink's input formats (`pipelink/schema/`) and validation against them:
every violation at once, each with the JSON pointer of what breaks the rule."""
from __future__ import annotations

import functools
import json
import re
from importlib import resources

from . import jsonread

CONTRACT_SCHEMA = "contract-v1.schema.json"
PIPELINE_SCHEMA = "pipeline-v1.schema.json"


@functools.cache
def schema(name: str) -> dict:
    return jsonread.parse(resources.files("pipelink.schema").joinpath(name).read_bytes())


def _is_strict_integer(checker, instance) -> bool:
    # JSON Schema counts 4.0 as an integer; pipelink must not (it would reach C++ as "4.0").
    return isinstance(instance, int) and not isinstance(instance, bool)


@functools.cache
def _python_pattern(pattern: str) -> re.Pattern:
    """A schema pattern as Python must read it. Schema patterns are ECMA-262, where `$` matches only at
    the end; Python's `$` also matches before a final newline (so 'name\\n' passed), so `$` outside a
    character class becomes `\\Z`."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        token = pattern[i:i + 2] if pattern[i] == "\\" else pattern[i]  # an escape is one token
        i += len(token)
        if token == "[":
            in_class = True
        elif token == "]":
            in_class = False
        elif token == "$" and not in_class:
            token = r"\Z"
        out.append(token)
    return re.compile("".join(out))


@functools.cache
def _validator(name: str):
    import jsonschema  # only where a document is validated: `pipelink --help` need not load it

    def pattern(validator, pattern, instance, schema):
        # jsonschema's own `pattern` applies the schema's regex with Python semantics (re.search)
        if validator.is_type(instance, "string") and not _python_pattern(pattern).search(instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("integer", _is_strict_integer)
    return jsonschema.validators.extend(base, validators={"pattern": pattern}, type_checker=checker)(schema(name))


MAX_VIOLATIONS = 100  # a document of a million bad items had taken minutes and printed a gigabyte


def violations(name: str, doc) -> list[tuple[str, str]]:
    """(JSON pointer, message) for the rules `doc` breaks, in document order: the first MAX_VIOLATIONS the
    validator meets, then one more entry (at the document) saying that the rest were not looked for."""
    import itertools
    found = list(itertools.islice(_validator(name).iter_errors(doc), MAX_VIOLATIONS + 1))
    errors = sorted(found[:MAX_VIOLATIONS], key=lambda e: list(map(str, e.absolute_path)))
    root = set(_validator(name).schema.get("properties", {}))
    out = [(pointer(e.absolute_path), _message(e, root)) for e in errors]
    if len(found) > MAX_VIOLATIONS:
        out.append(("", f"more problems follow; the first {MAX_VIOLATIONS} are shown (fix them and check again)"))
    return out


def pointer(path) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _unexpected(err, root: set[str]) -> str | None:
    """A field the object does not take: the nearest name it takes, or that it is a top-level field (a
    contract's `loader` put inside `entry`); None where neither helps."""
    import difflib
    allowed = [k for k in err.schema.get("properties", {}) if isinstance(k, str)]
    extra = [k for k in err.instance if k not in allowed] if isinstance(err.instance, dict) else []
    if not extra or err.schema.get("patternProperties"):
        return None
    said = []
    for key in extra[:5]:
        text = f"'{_short(key)[1:-1]}'" if isinstance(key, str) else _short(key)
        near = difflib.get_close_matches(key, allowed, n=1, cutoff=0.75) if isinstance(key, str) else []
        if err.absolute_path and key in root:
            said.append(f"{text} is a top-level field, not one of this object's")
        elif near:
            said.append(f"{text} is not a field here (did you mean '{near[0]}'?)")
        else:
            said.append(f"{text} is not a field here (fields: {', '.join(sorted(allowed)[:24])})")
    return "; ".join(said)


def _message(err, root: set[str] = frozenset()) -> str:
    if err.validator == "additionalProperties" and err.schema.get("additionalProperties") is False:
        said = _unexpected(err, root)
        if said:
            return said
    if err.validator == "oneOf" and not err.absolute_path and isinstance(err.instance, dict) and {
            tuple(s.get("required", ())) for s in err.schema.get("oneOf", ())} == {("entry",), ("entries",)}:
        return _entry_forms(err.instance)
    if err.validator == "oneOf" and err.schema.get("oneOf") and any(
            "expr" in json.dumps(s) or s.get("type") == "integer" for s in err.schema["oneOf"]):
        ints = [b for b in err.schema["oneOf"] if isinstance(b, dict) and b.get("type") == "integer"]
        low, high = (ints[0].get("minimum", 0), ints[0].get("maximum")) if ints else (0, None)
        bounds = f">= {low}" + (f" and <= {high}" if high is not None else "")
        return f"{_short(err.instance)} is not a size (an integer {bounds} or an expression string)"
    msg = err.message
    if len(msg) > 200:
        msg = msg[:200] + "..."
    return msg


def _entry_forms(contract: dict) -> str:
    """Why a contract is in neither entry form (jsonschema would print the whole contract)."""
    if "entry" in contract and "entries" in contract:
        return "a contract has either 'entry' or 'entries', not both"
    if "entry" in contract and "params" in contract:
        return ("top-level 'params' go with 'entries'; a contract with one 'entry' lists its parameters in "
                "entry.params")
    return "a contract needs 'entry' (one entry point) or 'entries' (several, with top-level 'params')"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."
