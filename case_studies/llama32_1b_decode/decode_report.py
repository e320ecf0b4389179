"""Render the decode case study's results (results/*.json, written by run.py) as results/RESULTS.md.

    python case_studies/llama32_1b_decode/decode_report.py [results/decode.json]

Pure: the JSON in, Markdown out (tests/test_llama_decode_driver.py checks it on the CPU).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from decode_model import floor_us, hbm_peak, kv_bytes_per_step, weight_bytes_per_step  # noqa: E402

# Published, not re-run here: msaroufim/megakernels-vs-cuda-graphs, Llama-3.2-1B decode on an H200, B = 1.
PUBLISHED_SOURCE = "msaroufim/megakernels-vs-cuda-graphs"
HAND_WRITTEN_US = 759.83
GRAPHS_PDL_US = 794.74

HEADLINE = dict(B=1, ctx=1024)
# The summary line's megakernel: the fastest at the headline size that runs correct and sanitizer-clean (the
# loader-ring step since 2026-12-04; RESULTS.md's tables show the others), and the separate-kernel graphs it is
# compared with: the plain components' and its own components', the faster of those measured.
SUMMARY_VARIANT = "pipelink_lr"
SEPARATE_GRAPHS = ("parts_graph", "parts_lr_graph")
SWAP_CTX = 16384
# What a change to the summary's megakernel must show to ship, fixed before its A/B runs (not chosen after): at
# least SHIP_MIN_GAIN faster at the headline size, at most SHIP_MAX_LOSS slower at every size the run measured.
# Changes are its variants (`pipelink_lr_*`: a field or a component of its pipeline changed) in the same run.
SHIP_MIN_GAIN = 0.005
SHIP_MAX_LOSS = 0.003

LABELS = {
    "pipelink_split": "pipelink megakernel, split-KV attention (decode_step.json)",
    "pipelink_head": "pipelink megakernel, whole-context attention (decode_step_head.json)",
    "pipelink_ring": "pipelink megakernel, split-KV, W through shared-memory rings (decode_step_ring.json)",
    "pipelink_ring_od": "pipelink megakernel, split-KV, output and down projections' W through a ring (decode_step_ring_od.json)",
    "pipelink_last": "pipelink megakernel, split-KV merged by the last split (decode_step_last.json)",
    "pipelink_lr": "pipelink megakernel, split-KV, GEMVs' W through the loader warp's ring (decode_step_lr.json)",
    "pipelink_lrp": "pipelink megakernel, loader ring, the down projection waiting for gate/up's pieces of h in its entry (decode_step_lrp.json)",
    "pipelink_lr_last": "pipelink megakernel, loader ring, split-KV merged by the last split (decode_step_lr_last.json)",
    "pipelink_lrm": "pipelink megakernel, loader ring, split-KV merged by the output projection's tasks (decode_step_lrm.json)",
    "pipelink_lr_hn": "pipelink megakernel, loader ring, the final norm as the LM head's prologue (decode_step_lr_hn.json)",
    "pipelink_lr_per_task": "pipelink megakernel, loader ring, every task adds to its call's events (counts_per_cta false)",
    "pipelink_split_per_task": "pipelink megakernel, split-KV, every task adds to its call's events (decode_step.json, counts_per_cta false)",
    "pipelink_head_per_task": "pipelink megakernel, whole-context attention, every task adds to its call's events (counts_per_cta false)",
    "pipelink_last_per_task": "pipelink megakernel, last split merges, every task adds to its call's events (counts_per_cta false)",
    "parts_ring_graph": "the ring step's parts as separate kernels in a CUDA graph (dependent launch)",
    "parts_graph": "the same pipelink parts as separate kernels in a CUDA graph (dependent launch)",
    "parts_lr_graph": "the loader-ring step's parts as separate kernels in a CUDA graph (dependent launch; a loader warp a kernel)",
    "torch_graph": "transformers, StaticCache, one step in a CUDA graph",
    "torch_eager": "transformers, StaticCache, eager",
}
ORDER = ["pipelink_split", "pipelink_lr", "pipelink_head", "pipelink_ring", "pipelink_ring_od", "pipelink_last",
         "pipelink_split_per_task", "pipelink_head_per_task", "pipelink_last_per_task", "parts_graph", "parts_lr_graph", "parts_ring_graph", "torch_graph",
         "torch_eager"]


def weight_bytes(B: int) -> int:
    return weight_bytes_per_step(B)


def latency(results: dict, variant: str, B: int, ctx: int) -> float | None:
    """The median microseconds of `variant` at (B, ctx), or None where it was not measured."""
    for r in results.get("latency", []):
        if r["variant"] == variant and r["B"] == B and r["ctx"] == ctx:
            return r["median_us"]
    return None


def _row(r) -> str:
    return "| " + " | ".join(str(c) for c in r) + " |"


def _table(header, rows) -> list[str]:
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)]


def _us(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _variants(results: dict) -> list[str]:
    seen = {r["variant"] for r in results.get("latency", [])}
    return [v for v in ORDER if v in seen] + sorted(seen - set(ORDER))


def _configs(results: dict) -> list[tuple[int, int]]:
    return sorted({(r["B"], r["ctx"]) for r in results.get("latency", [])})


def tokens_match(results: dict, variant: str = SUMMARY_VARIANT) -> tuple[int, int] | None:
    c = results.get("correctness", {}).get("variants", {}).get(variant)
    if not c:
        return None
    return c["argmax_match"], results["correctness"]["steps"]


def swap_ratio(results: dict, B: int = 1, ctx: int = SWAP_CTX) -> float | None:
    """Whole-context over split-KV attention latency (above 1: split-KV is faster)."""
    split, head = latency(results, "pipelink_split", B, ctx), latency(results, "pipelink_head", B, ctx)
    return None if not split or head is None else head / split


@dataclass(frozen=True)
class Verdict:
    """One variant of the summary's megakernel against it in the same run: how much faster at each size both were
    measured at (a fraction: 0.01 is 1% faster, negative slower), and whether that passes the rule to ship."""
    variant: str
    faster: dict          # (B, ctx) -> fraction
    ships: bool


def verdicts(results: dict, base: str = SUMMARY_VARIANT) -> list[Verdict]:
    """Each `base`_* variant measured at every size `base` was, against `base` (the rule: SHIP_MIN_GAIN,
    SHIP_MAX_LOSS; a run without the headline size decides nothing: ships False)."""
    sizes = [c for c in _configs(results) if latency(results, base, *c) is not None]
    out = []
    for v in _variants(results):
        if not v.startswith(base + "_") or any(latency(results, v, *c) is None for c in sizes) or not sizes:
            continue
        faster = {c: 1.0 - latency(results, v, *c) / latency(results, base, *c) for c in sizes}
        head = faster.get((HEADLINE["B"], HEADLINE["ctx"]))
        tie = 1e-9  # a change exactly at a bound passes, whichever way the division rounds
        ships = head is not None and head >= SHIP_MIN_GAIN - tie and all(f >= -SHIP_MAX_LOSS - tie
                                                                          for f in faster.values())
        out.append(Verdict(v, faster, ships))
    return out


def _verdicts(results: dict) -> list[str]:
    vs = verdicts(results)
    if not vs:
        return []
    sizes = sorted(vs[0].faster)
    out = [f"## Against `{SUMMARY_VARIANT}`", "",
           f"Each of its variants in this run, % faster than it (negative: slower). The rule to ship, fixed before a "
           f"run: at least {100 * SHIP_MIN_GAIN:g}% faster at B = {HEADLINE['B']}, ctx {HEADLINE['ctx']}, and at most "
           f"{100 * SHIP_MAX_LOSS:g}% slower at every size measured.", ""]
    rows = [[f"`{x.variant}`"] + [f"{100 * x.faster[c]:+.2f}%" for c in sizes] + ["yes" if x.ships else "no"] for x in vs]
    return out + _table(["variant"] + [f"B = {B}, ctx {ctx}" for B, ctx in sizes] + ["ships"], rows) + [""]


def summary_line(results: dict) -> str:
    """The issue's line: `summary: bs1 ctx1024 NNN us/step; vs reference graph A.AAx; vs separate-kernel graph
    B.BBx; greedy tokens identical K/64` (ratios > 1: the megakernel is faster)."""
    B, ctx = HEADLINE["B"], HEADLINE["ctx"]
    mega = latency(results, SUMMARY_VARIANT, B, ctx)
    tm = tokens_match(results)

    def vs(*others):
        ts = [t for t in (latency(results, o, B, ctx) for o in others) if t is not None]
        return "n/a" if mega is None or not ts else f"{min(ts) / mega:.2f}x"
    return (f"summary: bs{B} ctx{ctx} {'n/a' if mega is None else f'{mega:.0f}'} us/step; "
            f"vs reference graph {vs('torch_graph')}; vs separate-kernel graph {vs(*SEPARATE_GRAPHS)}; "
            f"greedy tokens identical {'n/a' if tm is None else f'{tm[0]}/{tm[1]}'}")


def render(results: dict) -> str:
    out = ["# Llama-3.2-1B decode: results", "",
           f"Written by `decode_report.py` from the JSON `run.py` writes. Date {results.get('date', '?')}; "
           f"machine: {results.get('machine', '?')}; torch {results.get('torch', '?')}, transformers "
           f"{results.get('transformers', '?')}; weights: "
           f"{results.get('checkpoint') or 'random (seed %s)' % results.get('seed', '?')}.", "",
           f"Command: `{results.get('command', '?')}`", ""]
    out += [f"Merged in from a run of its own: `{m.get('command', '?')}` ({m.get('date', '?')}, {m.get('machine', '?')})."
            for m in results.get("merged_runs", [])]
    out += [""] if results.get("merged_runs") else []
    out += _correctness(results)
    out += _headline(results)
    out += _swap(results)
    out += _bandwidth(results)
    out += _all_latency(results)
    out += _verdicts(results)
    out += _value_sets(results)
    errors = results.get("errors") or {}
    if errors:
        out += ["## Errors", ""] + [f"- {k}: `{v.splitlines()[0] if v else ''}`" for k, v in sorted(errors.items())] + [""]
    out += [summary_line(results), ""]
    return "\n".join(out)


def _correctness(results: dict) -> list[str]:
    c = results.get("correctness")
    if not c:
        return ["## Correctness", "", "Not run.", ""]
    out = ["## Correctness", "",
           f"Batch {c['batch']}, a prompt of {len(c['prompt'])} tokens fed one per step, then {c['steps']} greedy "
           f"steps; every variant is fed the reference's token. Logits against transformers' (bf16) at every "
           f"step; tolerance {c['atol']} + {c['rtol']} x max |reference logit|.", ""]
    fp32 = c.get("reference_bf16_vs_fp32")
    rows = []
    for name, s in c["variants"].items():
        mism = "; ".join(f"step {m['step']}: reference {m['ref']}, got {m['got']}, reference top-2 margin "
                         f"{m['ref_top2_margin']:.3g}" for m in s["mismatches"][:5]) or "none"
        if s.get("failed"):
            mism = f"failed after {s['steps']} steps: {s['failed'].splitlines()[0]}"
        row = [name, s["steps"], f"{s['max_abs_err']:.4g}", f"{s['ref_absmax']:.4g}",
               "yes" if s.get("within_tolerance") else "no", f"{s['argmax_match']}/{c['steps']}"]
        if fp32:
            f = s.get("fp32")
            row += ["n/a", "n/a"] if f is None else [f"{f['max_abs_err']:.4g}", f"{f['argmax_match']}/{f['generated']}"]
        rows.append(row + [mism])
    fp32_cols = ["max abs error vs fp32", "tokens match fp32"] if fp32 else []
    out += _table(["variant", "steps compared", "max abs error", "max abs reference logit", "within tolerance",
                   "tokens match"] + fp32_cols + ["mismatches"], rows)
    if fp32:
        mism = "; ".join(f"step {m['step']}: fp32 {m['fp32']}, bf16 {m['bf16']}, fp32 top-2 margin "
                         f"{m['fp32_top2_margin']:.3g}" for m in fp32["mismatches"][:5]) or "none"
        out += ["", f"The same steps through transformers in fp32 (the same weights, upcast: exact), the columns "
                    f"\"vs fp32\": the bf16 reference itself matches its greedy tokens {fp32['argmax_match']}/"
                    f"{fp32['generated']} times, max abs error {fp32['max_abs_err']:.4g} (mismatches: {mism})."]
    return out + [""]


def _headline(results: dict) -> list[str]:
    B, ctx = HEADLINE["B"], HEADLINE["ctx"]
    wb = weight_bytes(B)
    card, peak, known = hbm_peak(results.get("machine", ""))
    whose = f"{card} HBM peak" if known else f"HBM peak of the H200 (this machine's, {results.get('machine', '?')}, not known here)"
    out = [f"## Latency per step at B={B}, ctx={ctx}", "",
           f"Median of CUDA-event timings, variants alternating round-robin. Weight bandwidth: {wb / 1e9:.3f} GB of "
           f"weights read per step over the time ({whose} {peak / 1e12:.2f} TB/s: weight-read floor "
           f"{floor_us(wb, peak):.1f} us). The two published figures are cited from {PUBLISHED_SOURCE} (H200), not "
           "re-run here" + ("" if card == "H200" else f"; this run's card is not theirs ({card})") + ".", ""]
    rows = []
    for v in _variants(results):
        t = latency(results, v, B, ctx)
        if t is None:
            continue
        rows.append([LABELS.get(v, v), _us(t), f"{t / HAND_WRITTEN_US:.3f}", f"{wb / t / 1e6:.2f}",
                     f"{100 * wb / t / 1e6 / (peak / 1e12):.1f}%"])
    for label, t in ((f"hand-written megakernel (published, {PUBLISHED_SOURCE})", HAND_WRITTEN_US),
                     (f"CUDA Graphs + PDL (published, {PUBLISHED_SOURCE})", GRAPHS_PDL_US),
                     (f"weight-read floor at the {card}'s HBM peak", floor_us(wb, peak))):
        rows.append([label, _us(t), f"{t / HAND_WRITTEN_US:.3f}", f"{wb / t / 1e6:.2f}",
                     f"{100 * wb / t / 1e6 / (peak / 1e12):.1f}%"])
    out += _table(["variant", "us per step", "x hand-written", "weight TB/s", "of HBM peak"], rows)
    return out + [""]


def _swap(results: dict) -> list[str]:
    configs = _configs(results)
    if not configs:
        return []
    out = ["## Attention swap", "",
           "The megakernel linked with each attention component: per-step latency (us) at each batch and context "
           "(the cache length attended). Ratio: whole-context over split-KV.", ""]
    rows = []
    for B, ctx in configs:
        s, h = latency(results, "pipelink_split", B, ctx), latency(results, "pipelink_head", B, ctx)
        rows.append([B, ctx, _us(s), _us(h), "n/a" if not s or h is None else f"{h / s:.2f}"])
    out += _table(["B", "ctx", "split-KV (attn_split -> attn_merge)", "whole context (attn_head)", "ratio"], rows)
    return out + [""]


def _bandwidth(results: dict) -> list[str]:
    configs = _configs(results)
    if not configs:
        return []
    out = ["## Achieved bandwidth", "",
           "Weights: bytes of weights read per step / time. Weights + KV: adding the K and V cache the step's "
           "attention reads (16 layers x B x 8 heads x ctx x 64 x 2 x 2 bytes). TB/s.", ""]
    variants = [v for v in _variants(results) if v.startswith("pipelink") or v in SEPARATE_GRAPHS]
    header = ["B", "ctx"] + [f"{v} weights" for v in variants] + [f"{v} weights + KV" for v in variants]
    rows = []
    for B, ctx in configs:
        wb, kb = weight_bytes(B), kv_bytes_per_step(B, ctx)
        ts = [latency(results, v, B, ctx) for v in variants]
        rows.append([B, ctx] + [("n/a" if t is None else f"{wb / t / 1e6:.2f}") for t in ts]
                    + [("n/a" if t is None else f"{(wb + kb) / t / 1e6:.2f}") for t in ts])
    out += _table(header, rows)
    return out + [""]


def _all_latency(results: dict) -> list[str]:
    configs, variants = _configs(results), _variants(results)
    if not configs:
        return ["## Latency", "", "Not run.", ""]
    out = ["## Latency, every variant (median us per step)", ""]
    rows = [[B, ctx] + [_us(latency(results, v, B, ctx)) for v in variants] for B, ctx in configs]
    out += _table(["B", "ctx"] + variants, rows)
    return out + [""]


def _value_sets(results: dict) -> list[str]:
    """Each `variant@name` (the variant built with other contract values, run.py --values) over its variant
    built from the files: below 1 it is faster."""
    sets = results.get("value_sets") or {}
    configs, variants = _configs(results), _variants(results)
    tried = [v for v in variants if "@" in v and v.split("@", 1)[0] in variants]
    if not sets or not tried:
        return []
    out = ["## Contract values tried", "",
           "Each variant also built with other values in its components' contracts (`run.py --values`), timed in "
           "the same round-robin: time with the values over time with the files' own.", ""]
    out += [f"- `{name}`: " + ", ".join(f"{c}.{k} = {v}" for c, k, v in values) for name, values in sorted(sets.items())]
    out.append("")
    rows = []
    for B, ctx in configs:
        row = [B, ctx]
        for v in tried:
            base, mine = latency(results, v.split("@", 1)[0], B, ctx), latency(results, v, B, ctx)
            row.append("n/a" if base is None or mine is None else f"{mine / base:.3f}")
        rows.append(row)
    out += _table(["B", "ctx"] + tried, rows)
    return out + [""]


def merged(results: dict, more: dict) -> dict:
    """`results` with the latency rows and errors of another run of the same model (a variant run in a process
    of its own: a CUDA graph of the reference that faults must not take the others down)."""
    out = dict(results)
    out["latency"] = list(results.get("latency", [])) + list(more.get("latency", []))
    out["errors"] = {**results.get("errors", {}), **more.get("errors", {})}
    out["merged_runs"] = list(results.get("merged_runs", [])) + [
        {k: more.get(k, "?") for k in ("command", "date", "machine")}]
    return out


def markdown_path(results_json: Path) -> Path:
    """Where the rendering of `results_json` goes: RESULTS.md beside the default command's decode.json, <name>.md
    beside any other run's <name>.json, so that a run under another name never overwrites the case study's page."""
    return results_json.parent / ("RESULTS.md" if results_json.name == "decode.json" else results_json.stem + ".md")


def write_whole(texts: dict[Path, str]) -> None:
    """Write the files together, as pipelink writes its outputs (pipelink.formats.outputs.write_outputs: each staged
    beside its target and renamed once all are written), so no reader sees half of one; OSError if one cannot be."""
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.formats.outputs import write_outputs
    sink = DiagnosticSink()
    if not write_outputs({str(p): t.encode() for p, t in texts.items()}, sink):
        raise OSError("\n".join(d.render() for d in sink.items))


def main(argv=None) -> int:
    """decode_report.py [RESULTS.json [MORE.json ...]]: the first rendered (markdown_path), the others' latency merged
    in."""
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else HERE / "results" / "decode.json"
    results = json.loads(path.read_text())
    for other in argv[1:]:
        results = merged(results, json.loads(Path(other).read_text()))
    write_whole({markdown_path(path): render(results)})
    print(summary_line(results))
    for v in verdicts(results):
        print(f"{v.variant}: {'ships' if v.ships else 'does not ship'} by the rule (B = {HEADLINE['B']}, ctx "
              f"{HEADLINE['ctx']}: {100 * v.faster.get((HEADLINE['B'], HEADLINE['ctx']), float('nan')):+.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
