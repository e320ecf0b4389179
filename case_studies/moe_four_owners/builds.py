"""Building the four teams' components and linking them, both ways:

Each team builds with its own `<folder>/build.sh`.

- pipelink: each team builds its component against its contract (`pipelink build`); pipelink
  checks the contracts together, allocates, generates the glue and links (nvJitLink LTO).
- classic: each team compiles its source with the constants it hard-coded (`classic.h`), the
  integrator's hand-written glue (`integration/classic_glue.cu`) copies the values it was told,
  and plain nvJitLink links the objects. Nothing checks that the values still agree.

A variant changes one team's constant: in its contract (pipelink) and in its `-D` (classic), and
rebuilds that team's component only.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARCH = "sm_90"


@dataclass(frozen=True)
class Team:
    folder: str       # the team's folder: <folder>/<folder>.cu, <folder>.json, classic.h
    component: str    # the component's name in its contract

    @property
    def source(self) -> Path:
        return HERE / self.folder / f"{self.folder}.cu"

    @property
    def contract(self) -> Path:
        return HERE / self.folder / f"{self.folder}.json"


TEAMS = (Team("router", "moe_router"), Team("dispatch", "moe_dispatch"), Team("expert", "moe_expert"),
         Team("combine", "moe_combine"))
PIPELINE = HERE / "integration" / "moe.pipeline.json"
# The expert team's split expert (expert/expert_split.cu, expert_merge.cu) in place of moe_expert.
SPLIT_PIPELINE = HERE / "integration" / "moe_split.pipeline.json"
# Its Hopper expert (expert/expert_hopper.cu: the split expert's tasks on wgmma) with the same merge.
HOPPER_PIPELINE = HERE / "integration" / "moe_hopper.pipeline.json"
CLASSIC_GLUE = HERE / "integration" / "classic_glue.cu"


@dataclass(frozen=True)
class Change:
    """One team changes one of its own geometric constants."""
    team: str
    constant: str
    value: int


def contract_with(team: Team, change: Change | None) -> bytes:
    from pipelink.core.jsonread import parse
    doc = parse(team.contract.read_bytes())
    if change is not None and change.team == team.folder:
        provides = doc["geometry"]["provides"]
        assert change.constant in provides, f"{team.folder} does not provide {change.constant}"
        provides[change.constant] = change.value
    return (json.dumps(doc, indent=2) + "\n").encode()


def _team_build(team: Team, mode: str, out_dir: Path, env: dict) -> subprocess.CompletedProcess:
    """Run the team's own `build.sh` (with this Python, so the same pipelink and toolchain)."""
    import os
    env = dict(os.environ, PYTHON=sys.executable, **env)
    return subprocess.run(["bash", str(HERE / team.folder / "build.sh"), mode, str(out_dir)], capture_output=True,
                          text=True, env=env)


def build_pipelink(team: Team, out_dir: Path, change: Change | None = None) -> tuple[Path | None, list[str]]:
    """The team's build against its contract; a change edits the contract (a copy in out_dir)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {}
    if change is not None and change.team == team.folder:
        contract = out_dir / f"{team.folder}.json"
        contract.write_bytes(contract_with(team, change))
        env["CONTRACT"] = str(contract)
    proc = _team_build(team, "pipelink", out_dir, env)
    if proc.returncode != 0:
        return None, [(proc.stderr or proc.stdout).strip()]
    return out_dir / f"{team.component}.o", []


def build_classic(team: Team | None, out_dir: Path, change: Change | None = None) -> Path:
    """The team's classic build (its hard-coded constants; a change is one -D), or (team None) the
    integrator's glue."""
    from pipelink import toolchain
    out_dir.mkdir(parents=True, exist_ok=True)
    if team is not None:
        env = {}
        if change is not None and change.team == team.folder:
            env["DEFINES"] = f"-D{change.constant}_VALUE={change.value}"
        proc = _team_build(team, "classic", out_dir, env)
        if proc.returncode != 0:
            raise RuntimeError(f"{team.folder}/build.sh classic failed:\n{proc.stderr}{proc.stdout}")
        return out_dir / f"classic_{team.component}.o"
    out = out_dir / "classic_glue.o"
    cmd = [str(toolchain.nvcc_path()), "-dc", "-std=c++17", "-O3", "-gencode=arch=compute_90,code=lto_90",
           f"-I{HERE / 'integration'}", str(CLASSIC_GLUE), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=toolchain.nvcc_env())
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed on {CLASSIC_GLUE.name}:\n{proc.stderr}{proc.stdout}")
    return out


def link_pipelink(objects: list[Path], debug_events: bool = False, pipeline: Path = PIPELINE, profile_tasks: int = 0,
                  dispatch: str | None = None):
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.pipeline import load_pipeline
    from pipelink.linker.passes import LinkOptions, link
    sink = DiagnosticSink()
    spec = load_pipeline(str(pipeline), sink)
    assert spec is not None, [d.render() for d in sink.items]
    if debug_events or profile_tasks or dispatch:
        import dataclasses
        spec = dataclasses.replace(spec, debug_events=debug_events, profile_tasks=profile_tasks,
                                   dispatch=dispatch or spec.dispatch)
    return link([str(o) for o in objects], LinkOptions(pipeline=spec))


def _build_expert_variant(mode: str, component: str, out_dir: Path, base: "Builds") -> list[Path]:
    """A layer's objects with one of the expert team's other experts (its `build.sh MODE`) and its merge in
    moe_expert's place; the other teams' objects from `base`."""
    proc = _team_build(TEAMS[2], mode, out_dir, {})
    if proc.returncode != 0:
        raise RuntimeError(f"building {component} failed:\n{proc.stdout}{proc.stderr}")
    router, dispatch, _, combine = base.pipelink_objects
    return [router, dispatch, out_dir / f"{component}.o", out_dir / "moe_expert_merge.o", combine]


def build_split(out_dir: Path, base: "Builds") -> list[Path]:
    """The split layer's objects: moe_expert_split and moe_expert_merge (`build.sh split`)."""
    return _build_expert_variant("split", "moe_expert_split", out_dir, base)


def build_hopper(out_dir: Path, base: "Builds") -> list[Path]:
    """The Hopper layer's objects: moe_expert_hopper (sm_90a) and moe_expert_merge (`build.sh hopper`)."""
    return _build_expert_variant("hopper", "moe_expert_hopper", out_dir, base)


def link_hopper(objects: list[Path], profile_tasks: int = 0):
    """router -> dispatch -> moe_expert_hopper -> moe_expert_merge -> combine as one sm_90a kernel."""
    return link_pipelink(objects, pipeline=HOPPER_PIPELINE, profile_tasks=profile_tasks)


def link_split(objects: list[Path], profile_tasks: int = 0):
    """router -> dispatch -> moe_expert_split -> moe_expert_merge -> combine as one kernel."""
    return link_pipelink(objects, pipeline=SPLIT_PIPELINE, profile_tasks=profile_tasks)


def link_separate(objects: list[Path], layer_geometry: dict | None = None, profile_tasks: int = 0) -> list:
    """Each object linked as a kernel of its own (`standalone`: the launch order meets its waits), with
    programmatic dependent launch: the fair separate-kernel control of a fused layer. Linked alone, a
    component takes its range's default for what another component of the layer provides; with
    `layer_geometry` (the fused layer's manifest geometry) it takes the layer's value (the pipeline's
    `geometry`), so the control of the Hopper layer tiles its dispatch for the Hopper expert's 64 rows.
    `profile_tasks`: each persistent kernel with a task profile of that many records (a sequential one has none)."""
    import dataclasses

    from pipelink.core.pipeline import PipelineSpec
    from pipelink.linker.passes import LinkOptions, link, run_passes
    out = []
    for obj in objects:
        name, given = obj.stem, {}
        if layer_geometry:  # what the component consumes and does not provide, at the layer's values
            read = run_passes([str(obj)], until="read")
            geometry = read.components[0].contract.geometry if read.components else None
            given = {k: layer_geometry[k] for k in (geometry.consumes if geometry else ())
                     if k not in geometry.provides and k in layer_geometry}
        spec = PipelineSpec(name=f"{name}_alone", standalone=True, dependent_launch=True, geometry=given,
                            profile_tasks=profile_tasks)
        result = link([str(obj)], LinkOptions(pipeline=spec))
        if profile_tasks and any(d.code == "PL179" for d in result.diagnostics):  # a sequential kernel: no records
            result = link([str(obj)], LinkOptions(pipeline=dataclasses.replace(spec, profile_tasks=0)))
        if not result.ok:
            raise RuntimeError(f"linking {name} alone failed:\n" + "\n".join(d.render() for d in result.diagnostics))
        out.append(result)
    # The control is only fair (and correct) where the kernels agree on every value.
    seen = {}
    for r in out:
        for name, value in r.manifest.geometry.items():
            if seen.setdefault(name, (value, r.manifest.kernel))[0] != value:
                raise RuntimeError(f"linked alone, {r.manifest.kernel} has {name} = {value} but "
                                   f"{seen[name][1]} has {seen[name][0]}")
    return out


def link_classic(objects: list[Path]) -> bytes:
    """Plain nvJitLink over the host objects' LTO-IR: what a build without contracts does."""
    from pipelink import toolchain
    inputs = [toolchain.LinkInput("object", Path(o).read_bytes(), Path(o).name) for o in objects]
    out = toolchain.nvjitlink_link(inputs, [f"-arch={ARCH}", "-lto", "-O3"])
    return out.cubin


@dataclass
class Builds:
    """Objects of one variant: pipelink's (or its diagnostics) and the classic ones."""
    pipelink_objects: list[Path] = field(default_factory=list)
    pipelink_build_errors: list[str] = field(default_factory=list)
    classic_objects: list[Path] = field(default_factory=list)


def build_all(out_dir: Path, change: Change | None = None, base: "Builds | None" = None, classic: bool = True) -> Builds:
    """Build every team's component; with `base`, rebuild only the changed team's and reuse the rest."""
    b = Builds()
    for i, team in enumerate(TEAMS):
        rebuild = base is None or (change is not None and change.team == team.folder)
        if rebuild:
            obj, errors = build_pipelink(team, out_dir / "pipelink", change)
            b.pipelink_build_errors += errors
            if obj:
                b.pipelink_objects.append(obj)
            if classic:
                b.classic_objects.append(build_classic(team, out_dir / "classic", change))
        else:
            b.pipelink_objects.append(base.pipelink_objects[i])
            if classic:
                b.classic_objects.append(base.classic_objects[i])
    if classic:
        b.classic_objects.append(base.classic_objects[-1] if base else build_classic(None, out_dir / "classic"))
    return b
