"""The glue sets up its mbarriers with fence.mbarrier_init and waits on them with mbarrier.try_wait, both sm_90 and
later (ptxas refuses them for sm_80, sm_86, sm_89). A link that would need them for such a target is refused before
anything is compiled (PL205), at what asks for them: a warp-specialized wire (a ring of mbarriers), a component's
declared mbarriers, a role's instances (their turns), a load entry (the loader ring). A wire of the sequential
schedule needs none, and links for sm_80. Unless told a target, the link takes the first one that has what the
pipeline asks for too (its rings, dependent launch), where the components share one."""
import dataclasses
import json

import pytest

from contract_factory import shipped_component
from hopper_factory import component, mainloop
from pipelink.cli import main
from pipelink.core.checks import check_set
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker.passes import LinkOptions, run_passes

PIPELINES = {p.name: p for p in shipped_pipelines()}
REPO = PIPELINES["ring_gemv"].path.parent.parent


def also_sm80(c):
    c["targets"]["archs"] = ["sm_80", "sm_90"]


def errors(sink):
    return [(d.code, d.location.file, d.location.pointer) for d in sink.items if d.severity == "error"]


def check(components, arch=None):
    sink = DiagnosticSink()
    return check_set([c.contract for c in components], sink, arch), sink


def small(name, **changes):
    return component({"pipelink_contract": 1, "name": name, "version": "1.0.0", "entry": {"symbol": f"{name}_entry"},
                      "targets": {"archs": ["sm_80", "sm_90"]}, "threads": {"warps": 4}, **changes})


# --- what a contract declares: check (and so link and build) ----------------------------------------

def test_declared_mbarriers_need_sm90():
    c = small("mb", barriers={"mbarriers": [{"name": "full", "arrivals": 1, "count": 2}]})
    target, sink = check([c])
    assert (target, sink.items) == ("sm_90", [])  # unless told, the first target that has them
    _, sink = check([c], "sm_80")
    assert errors(sink) == [("PL205", "mb.json", "/barriers/mbarriers/0")]
    assert sink.items[0].message == ("the glue sets up mbarrier 'full' of 'mb' with fence.mbarrier_init, which sm_80 "
                                     "does not have (sm_90 and later have fence.mbarrier_init, mbarrier.try_wait and "
                                     "cp.async.bulk)")
    assert "--arch sm_90" in sink.items[0].effective_hint
    assert not check([c], "sm_90")[1].items


def test_the_instances_of_a_role_need_sm90():
    def pingpong(c):
        c["targets"]["archs"] = ["sm_86", "sm_90"]
        c["params"] = c["params"][1:]  # no tensor map (PL204)
        c["entries"] = [{"name": "mma", "symbol": "ml_mma", "role": "consumer", "params": ["acc", "K"]}]
        c["smem"] = {}
        c["threads"] = {"warps": 12, "roles": [{"name": "producer", "warps": 4},
                                               {"name": "consumer", "warps": 4, "instances": 2}]}
    ml = component(mainloop(pingpong))
    assert check([ml])[0] == "sm_90"
    _, sink = check([ml], "sm_86")
    assert errors(sink) == [("PL205", "ml.json", "/threads/roles/1/instances")]
    assert "the 2 instances of role 'consumer' of 'ml' take turns through mbarriers" in sink.items[0].message


def test_a_load_entry_needs_sm90():
    c = small("ld", entry={"symbol": "ld_entry", "load": "ld_load"}, loader={"slot_bytes": 1024, "slots": 1},
              targets={"archs": ["sm_89", "sm_90"]})
    _, sink = check([c], "sm_89")
    assert errors(sink) == [("PL205", "ld.json", "/entry/load")]
    assert "the load entry of 'ld' fills the loader ring" in sink.items[0].message


# --- what the pipeline makes of the wires: the link ------------------------------------------------

def link_ctx(arch, schedule=None, edit=also_sm80):
    comps = [shipped_component(n, edit) for n in PIPELINES["ring_gemv"].components]
    spec = load_pipeline(PIPELINES["ring_gemv"].path, DiagnosticSink())
    if schedule:
        spec = dataclasses.replace(spec, schedule=schedule)
    return run_passes(options=LinkOptions(arch=arch, pipeline=spec, cache=False), components=comps, until="generate")


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_a_warp_specialized_ring_is_refused_below_sm90_before_the_glue(arch):
    ctx = link_ctx(arch, edit=lambda c: c["targets"].update(archs=[arch, "sm_90"]))
    assert errors(ctx.sink) == [("PL205", "ring_load.json", "/ports/1")] and ctx.glue is None
    d = ctx.sink.items[0]
    assert d.message.startswith("wire ring_load.tiles -> ring_dot.tiles is a ring of mbarriers in the "
                                "warp-specialized schedule")
    assert f"which {arch} does not have" in d.message
    assert [(x.file, x.pointer) for x in d.related] == [("ring_dot.json", "/ports/0")]
    assert "link for sm_90 or later" in d.effective_hint


def test_the_ring_links_for_sm90_and_a_sequential_wire_for_sm80():
    ctx = link_ctx("sm_90")
    assert not ctx.sink.errors and "fence.mbarrier_init" not in ctx.glue and "mbarrier_init(" in ctx.glue
    ctx = link_ctx("sm_80", "sequential")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert "mbarrier_init" not in ctx.glue


# --- through the toolchain: it had failed in ptxas (PL074) ----------------------------------------

@pytest.fixture(scope="module")
def objects80(tmp_path_factory):
    """ring_load and ring_dot built for sm_80 from their sources, their contracts listing sm_80 too."""
    def edit(raw):
        raw["targets"]["archs"] = ["sm_80", "sm_90"]
    return _rings(tmp_path_factory.mktemp("ring80"), edit, ["--arch", "sm_80"])


def _rings(d, edit, build_args):
    """ring_load and ring_dot built into d from their sources, their contracts edited by `edit`."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIPELINK_CACHE", "0")
        for name in ("ring_load", "ring_dot"):
            raw = json.loads((REPO / "contracts" / f"{name}.json").read_text())
            edit(raw)
            (d / f"{name}.json").write_text(json.dumps(raw))
            assert main(["build", str(REPO / "components" / name / f"{name}.cu"), "--contract", str(d / f"{name}.json"),
                         *build_args, "-o", str(d / f"{name}.o")]) == 0
    return d


def test_link_of_the_ring_for_sm80_is_refused_without_a_toolchain_error(capsys, objects80, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINK_CACHE", "0")
    capsys.readouterr()
    argv = ["link", str(objects80 / "ring_load.o"), str(objects80 / "ring_dot.o"), "--pipeline",
            str(PIPELINES["ring_gemv"].path), "--arch", "sm_80"]
    assert main(argv + ["-o", str(tmp_path / "k.cubin")]) == 1
    err = capsys.readouterr().err
    assert "error[PL205]: wire ring_load.tiles -> ring_dot.tiles" in err
    assert f"--> {objects80 / 'ring_load.o'}[.pipelink.contract], at /ports/1, component 'ring_load'" in err
    assert "PL074" not in err and "ptxas" not in err
    assert not (tmp_path / "k.cubin").exists()
    # the sequential schedule's wire has no mbarriers: it links for sm_80
    assert main(argv + ["--schedule", "sequential", "-o", str(tmp_path / "seq.cubin")]) == 0, capsys.readouterr().err
    assert (tmp_path / "seq.cubin").exists()


# --- unless told a target, the link takes one that has what the pipeline asks for too ------------

def test_the_default_target_is_one_with_the_pipelines_rings():
    """Contracts listing sm_80 and sm_90: the warp-specialized ring needs sm_90, so the link takes sm_90 (it had
    taken sm_80, and refused the wire: PL205); told sm_80, it still refuses the wire there."""
    ctx = link_ctx(None)
    assert (ctx.target, errors(ctx.sink)) == ("sm_90", []) and "mbarrier_init(" in ctx.glue
    assert errors(link_ctx("sm_80").sink) == [("PL205", "ring_load.json", "/ports/1")]


def test_a_sequential_wire_keeps_the_first_target():
    ctx = link_ctx(None, "sequential")
    assert (ctx.target, errors(ctx.sink)) == ("sm_80", [])


def test_dependent_launch_takes_sm90_unless_told():
    comps = [shipped_component(n, also_sm80) for n in PIPELINES["ring_gemv"].components]
    spec = dataclasses.replace(load_pipeline(PIPELINES["ring_gemv"].path, DiagnosticSink()), schedule="sequential",
                               dependent_launch=True, given={"/dependent_launch": "--dependent-launch"})

    def link(arch):
        return run_passes(options=LinkOptions(arch=arch, pipeline=spec, cache=False), components=comps,
                          until="generate")
    ctx = link(None)
    assert (ctx.target, errors(ctx.sink)) == ("sm_90", []) and "griddepcontrol.wait" in ctx.glue
    assert [d.code for d in link("sm_80").sink.errors] == ["PL165"]


def test_where_no_common_target_has_it_the_first_is_taken_and_the_wire_refused():
    ctx = link_ctx(None, edit=lambda c: c["targets"].update(archs=["sm_80", "sm_86"]))
    assert ctx.target == "sm_80" and errors(ctx.sink) == [("PL205", "ring_load.json", "/ports/1")]


def test_what_the_components_declare_still_comes_first():
    """The pipeline's needs narrow the contracts' choice, never widen it: setmaxnreg keeps sm_90a."""
    from pipelink.core.checks import Need, default_target
    ml = component(mainloop(lambda c: c["targets"].update(archs=["sm_90", "sm_90a"])))
    rings = Need("a ring of mbarriers", lambda t: t.capability >= 90)
    assert default_target([ml.contract], [rings]) == "sm_90a"
    plain = small("plain")
    assert default_target([plain.contract]) == "sm_80"
    assert default_target([plain.contract], [rings]) == "sm_90"
    assert default_target([plain.contract], [Need("nothing has it", lambda t: False)]) == "sm_80"
    assert default_target([plain.contract, small("other", targets={"archs": ["sm_100"]}).contract]) is None


def test_check_with_a_schedule_takes_the_pipelines_target(tmp_path, capsys):
    files = []
    for name in PIPELINES["ring_gemv"].components:
        raw = json.loads((REPO / "contracts" / f"{name}.json").read_text())
        also_sm80(raw)
        (tmp_path / f"{name}.json").write_text(json.dumps(raw))
        files.append(str(tmp_path / f"{name}.json"))
    capsys.readouterr()
    for extra, target in ((["--pipeline", str(PIPELINES["ring_gemv"].path)], "sm_90"),
                          (["--schedule", "warp_specialized"], "sm_90"), (["--schedule", "sequential"], "sm_80")):
        assert main(["check", *files, *extra, "--format", "json"]) == 0, capsys.readouterr()
        assert json.loads(capsys.readouterr().out)["target"] == target, extra


@pytest.fixture(scope="module")
def objects_both(tmp_path_factory):
    """ring_load and ring_dot built for every target their contracts list: sm_80 and sm_90."""
    return _rings(tmp_path_factory.mktemp("ring80_90"), also_sm80, [])


def test_link_without_arch_takes_sm90_for_the_ring(capsys, objects_both, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINK_CACHE", "0")
    argv = ["link", str(objects_both / "ring_load.o"), str(objects_both / "ring_dot.o"), "--pipeline",
            str(PIPELINES["ring_gemv"].path), "--format", "json"]

    def target(*extra, name):
        capsys.readouterr()
        assert main([*argv, *extra, "-o", str(tmp_path / f"{name}.cubin")]) == 0, capsys.readouterr().err
        assert (tmp_path / f"{name}.cubin").exists()
        return json.loads(capsys.readouterr().out)["manifest"]["target"]
    assert target(name="ring") == "sm_90"
    assert target("--schedule", "sequential", name="seq") == "sm_80"
    # told a target, the link takes it: refused at the wire, as before
    assert main([*argv, "--arch", "sm_80", "-o", str(tmp_path / "no.cubin")]) == 1
    assert "PL205" in capsys.readouterr().out and not (tmp_path / "no.cubin").exists()
