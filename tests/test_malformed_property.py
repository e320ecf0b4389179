"""Property: mutated contracts and pipeline files give located diagnostics with stable codes, never
exit 3, a traceback, or output from a failed command.

Each case is seeded ("<pipeline>-<i>"): a failure names its seed, and `reproduce(seed, tmp_path)`
writes the same files and runs the same command. CASES cases per shipped pipeline, through
`cli.main` in-process (`pipelink check`, and `header -o` / `inspect` for some), no links.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from mutate import Mutator
from pipelink import cli
from pipelink.core.diagnostics import CODES
from pipelink.harness.shipped import REPO, shipped_pipelines

CASES = 260  # x 5 pipelines; about 15 ms a case
PIPELINES = {p.name: p for p in shipped_pipelines()}


def _contract(name: str) -> dict:
    return json.loads((REPO / "contracts" / f"{name}.json").read_text())


def _ports(name: str) -> list[str]:
    return [f"{name}.{p['name']}" for p in _contract(name).get("ports", [])]


def make_case(seed: str, d: Path) -> list[str]:
    """Write one mutated case into `d`; returns the command's arguments."""
    pipe = PIPELINES[seed.rsplit("-", 1)[0]]
    m = Mutator(seed)
    docs = {name: _contract(name) for name in pipe.components}
    docs["pipeline"] = json.loads(pipe.path.read_text())
    # Strings a mutation may use: wires over real and missing ports, names, schedules.
    ports = [p for c in pipe.components for p in _ports(c)] + ["nobody.port", f"{pipe.components[0]}.nope"]
    wires = [f"{a} -> {b}" for a in ports[:4] for b in ports[-4:]] + ["a.b", "a.b=c.d=e.f"]
    extra = [*wires, *pipe.components, "persistent", "sequential", "warp_specialized", "dynamic", "pipelink_fused"]
    if m.rng.random() < 0.3:
        _plausible_pipeline(m, docs["pipeline"], pipe.components, wires)
    targets = m.rng.sample(list(docs), k=m.rng.choice([1, 1, 1, 2]))
    data = {}
    for name, doc in docs.items():
        if name in targets:
            for _ in range(m.rng.choice([1, 1, 2, 3])):
                m.edit(doc, extra)
        data[name] = m.serialize(doc)
        if name in targets and m.rng.random() < 0.25:
            data[name] = m.bytes_edit(data[name])
    paths = {}
    for name, blob in data.items():
        paths[name] = d / f"{name}.json"
        paths[name].write_bytes(blob)
    contracts = [str(paths[c]) for c in pipe.components]
    command = m.rng.random()
    if command < 0.08:
        return ["header", contracts[0], "-o", str(d / "out.h")]
    if command < 0.14:
        return ["inspect", *contracts, "--format", "json"]
    return ["check", *contracts, "--pipeline", str(paths["pipeline"]), "--map", str(d / "out.map"), "--format", "json"]


def _plausible_pipeline(m: Mutator, doc: dict, components: tuple[str, ...], wires: list[str]) -> None:
    """Edits that pass the schema, for the checks after it: wires over real and missing ports, other
    schedules, values to specialize, components left out or reordered."""
    r = m.rng
    edit = r.choice(["wires", "schedule", "specialize", "components", "debug_events"])
    m.log.append(f"pipeline {edit}")
    if edit == "wires":
        doc["wires"] = r.sample(wires, k=r.randint(0, 3))
    elif edit == "schedule":
        doc["schedule"] = r.choice(["sequential", "warp_specialized", "persistent"])
        doc["dispatch"] = r.choice(["static", "dynamic"])
    elif edit == "specialize":
        doc["specialize"] = {r.choice(["M", "N", "K", "T", "E", "nope"]): r.choice([0, 1, 64, 2**40, -1])}
    elif edit == "components":
        names = list(components) + ["nobody"]
        doc["components"] = r.sample(names, k=r.randint(0, len(names)))
    else:
        doc["debug_events"] = True


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def problems(seed: str, d: Path) -> tuple[int, list[str]]:
    """The exit code of case `seed`, and what is wrong with how pipelink handled it (empty: nothing)."""
    argv = make_case(seed, d)
    inputs = set(os.listdir(d))
    code, out, err = run(argv)
    found = []
    if code not in (0, 1, 2):
        found.append(f"exit {code}")
    if "Traceback" in out + err or "internal error" in err:
        found.append(f"crash: {err[-500:]}")
    written = set(os.listdir(d)) - inputs
    if code != 0 and written:
        found.append(f"wrote {sorted(written)} on a failed command")
    if argv[0] != "header":  # --format json: every diagnostic, as data
        try:
            diags = json.loads(out)["diagnostics"]
        except (ValueError, KeyError) as exc:
            return code, found + [f"output is not the JSON result: {exc}: {out[:300]!r} {err[:300]!r}"]
        errors = [x for x in diags if x["severity"] == "error"]
        if code != 0 and not errors:
            found.append("failed without an error diagnostic")
        for x in errors:
            loc = x["location"]
            if x["code"] not in CODES:
                found.append(f"unregistered code {x['code']}")
            if "file" not in loc or not ("pointer" in loc or "line" in loc):
                found.append(f"unlocated {x['code']}: {x['message'][:200]}")
    return code, found


def reproduce(seed: str, d: Path) -> tuple[int, list[str]]:
    """One case again, e.g. `reproduce("rowsum-17", Path("/tmp/case"))`; the files stay in `d`."""
    d.mkdir(parents=True, exist_ok=True)
    return problems(seed, d)


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_mutated_inputs_are_diagnosed(pipeline, tmp_path):
    failures, exits = [], set()
    for i in range(CASES):
        seed = f"{pipeline}-{i}"
        d = tmp_path / str(i)
        d.mkdir()
        code, found = problems(seed, d)
        exits.add(code)
        if found:
            failures.append(f"{seed}: {'; '.join(found)}")
    assert not failures, f"{len(failures)} of {CASES} cases:\n" + "\n".join(failures[:20])
    assert exits == {0, 1, 2}, "the mutations should give good inputs, contract problems and unreadable input"
