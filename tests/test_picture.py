"""The link map as a picture (pipelink/linker/picture.py), pure: the shipped pipelines' arenas, warps and
event graphs drawn from the same rows as the text map, escaped names, and --map FILE.html/.svg."""
import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hopper_factory import component, epilogue, mainloop
from pipelink.cli import main
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import PipelineSpec, load_pipeline
from pipelink.linker.emit import event_edges, group_rows, warp_rows
from pipelink.linker.passes import LinkOptions, run_passes
from pipelink.linker.picture import offset_axis, svg

REPO = Path(__file__).resolve().parent.parent
PIPELINES = ["rowsum", "ring_gemv", "splitk_gemv", "tile_chain", "moe_dispatch"]
NS = "{http://www.w3.org/2000/svg}"


def contracts(name):
    doc = json.loads((REPO / "pipelines" / f"{name}.json").read_text())
    return [str(REPO / "contracts" / f"{c}.json") for c in doc["components"]]


def resolved(name):
    spec = load_pipeline(str(REPO / "pipelines" / f"{name}.json"), DiagnosticSink())
    ctx = run_passes(contracts(name), LinkOptions(pipeline=spec), until="allocate")
    assert not ctx.sink.has_errors, [d.render() for d in ctx.sink.items]
    return ctx.resolved, ctx.allocation, ctx.target


def rects(root, **attrs):
    return [e for e in root.iter(f"{NS}rect") if all(e.get(f"data-{k}") == v for k, v in attrs.items())]


@pytest.mark.parametrize("name", PIPELINES)
def test_the_picture_of_a_shipped_pipeline(name):
    r, a, arch = resolved(name)
    root = ET.fromstring(svg(r, a, arch))  # well-formed XML
    # one rectangle per arena item, at its offset and as tall as its bytes on the offset axis
    items = [e for e in root.iter(f"{NS}rect") if e.get("data-key")]
    assert sorted((e.get("data-key"), int(e.get("data-offset")), int(e.get("data-bytes"))) for e in items) == \
        sorted((p.item.key, p.offset, p.item.size) for p in a.smem)
    top = float(items[0].get("y")) - offset_axis(a, 0)[int(items[0].get("data-offset"))]
    ys = offset_axis(a, top)
    for e, p in ((e, next(p for p in a.smem if p.item.key == e.get("data-key"))) for e in items):
        assert float(e.get("y")) == pytest.approx(ys[p.offset], abs=0.1)
        assert float(e.get("height")) == pytest.approx(ys[p.end] - ys[p.offset], abs=0.1)
    # the axis is monotone and, where items are large, to scale
    assert list(ys.values()) == sorted(ys.values())
    # every warp range, role by role
    for row in warp_rows(r, a):
        for role, lo, hi, _ in row.roles:
            assert rects(root, component=row.component, role=role, begin=str(lo), end=str(hi))
    # every event edge of a persistent kernel
    lines = [(e.get("data-tensor"), e.get("data-component"), e.get("data-edge-kind"), e.get("data-map"))
             for e in root.iter(f"{NS}line") if e.get("data-edge-kind")]
    assert sorted(lines) == sorted((e.tensor, e.component, e.kind, e.map) for e in event_edges(r))
    assert bool(lines) == (r.schedule == "persistent")


def test_bytes_reused_over_steps_share_offsets_in_other_columns():
    r, a, arch = resolved("rowsum")
    root = ET.fromstring(svg(r, a, arch))
    by_key = {e.get("data-key"): e for e in root.iter(f"{NS}rect") if e.get("data-key")}
    scratch, first = by_key["buffer block_rowsum.reduce_temp"], by_key["port tile_load.tile"]
    assert scratch.get("y") == first.get("y")  # offset 0 for both: their lifetimes never overlap
    assert float(scratch.get("x")) >= float(first.get("x")) + float(first.get("width"))


def test_role_groups_with_their_registers():
    ctx = run_passes(options=LinkOptions(arch="sm_90a", pipeline=PipelineSpec(name="k")),
                     components=[component(mainloop(None)), component(epilogue(None))], until="allocate")
    r, a = ctx.resolved, ctx.allocation
    root = ET.fromstring(svg(r, a, "sm_90a"))
    for g in group_rows(r, a):
        for i in range(g.instances):
            lo = g.begin + i * g.warps
            assert rects(root, group=g.name, begin=str(lo), end=str(lo + g.warps - 1), registers=str(g.registers))


def test_text_from_contracts_is_escaped():
    r, a, arch = resolved("splitk_gemv")
    evil = '<script>alert(1)</script>&"\' ]]>\x07'
    c0 = r.components[0]
    bad = dataclasses.replace(c0, contract=dataclasses.replace(c0.contract, description=evil))
    r = dataclasses.replace(r, components=[bad, *r.components[1:]])
    text = svg(r, a, arch)
    root = ET.fromstring(text)
    assert "<script" not in text and not list(root.iter(f"{NS}script"))
    assert any(evil.replace("\x07", "\ufffd") in (e.text or "") for e in root.iter(f"{NS}title"))


@pytest.mark.parametrize("suffix", ["html", "svg", "map"])
def test_check_map_writes_the_picture_by_suffix(tmp_path, capsys, suffix):
    out = tmp_path / f"moe.{suffix}"
    code = main(["check", *contracts("moe_dispatch"), "--pipeline", str(REPO / "pipelines" / "moe_dispatch.json"),
                 "--map", str(out)])
    assert code == 0, capsys.readouterr().err
    text = out.read_text()
    if suffix == "html":
        assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "# pipelink link map" in text
        assert "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
        ET.fromstring(text[text.index("<svg"):text.index("</svg>") + 6])
    elif suffix == "svg":
        assert ET.fromstring(text).tag == f"{NS}svg"
    else:
        assert text.startswith("# pipelink link map: kernel moe_dispatch")


def test_link_map_html_fresh_and_from_the_cache(shipped_objects, tmp_path, capsys):
    from pipelink.harness.shipped import shipped_pipelines
    pipe = next(p for p in shipped_pipelines() if p.name == "rowsum")
    objects = [str(shipped_objects[n]) for n in pipe.components]
    pages = []
    for run in ("fresh", "cached"):
        page = tmp_path / f"{run}.html"
        code = main(["link", "--pipeline", str(pipe.path), *objects, "-o", str(tmp_path / f"{run}.cubin"),
                     "--map", str(page)])
        assert code == 0, capsys.readouterr().err
        pages.append(page.read_text())
    assert "(cached)" in capsys.readouterr().out
    assert pages[0] == pages[1] and pages[0].startswith("<!DOCTYPE html>")
    root = ET.fromstring(pages[0][pages[0].index("<svg"):pages[0].index("</svg>") + 6])
    assert {e.get("data-key") for e in root.iter(f"{NS}rect") if e.get("data-key")} == {
        "buffer block_rowsum.reduce_temp", "port tile_load.tile", "port tile_transform.dst"}
