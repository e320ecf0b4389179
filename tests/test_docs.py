"""The docs stay true. Over README.md, docs/*.md, the case studies' README.md and PERFORMANCE.md, the examples'
and bench/'s README.md: every diagnostic code they name is registered, every relative link and every backticked
repository path they name exists, and every `pipelink ...` command line they show (README.md's Commands table
above all) uses only subcommands, options and choices the command line has. That docs/diagnostics.md is
`python -m pipelink.core.diagnostics`'s output is tests/test_loader.py's test_every_code_is_documented.
CPU only, and quick: it reads text, asks git for the file list and builds the parser."""
from __future__ import annotations

import argparse
import posixpath
import re
import subprocess
from pathlib import Path

import pytest

from pipelink.cli import _parser
from pipelink.core.diagnostics import CODES

REPO = Path(__file__).resolve().parent.parent


def doc_files() -> list[Path]:
    """The hand-written docs (generated reports such as results/RESULTS.md are the tests' that write them)."""
    found = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "case_studies" / "README.md",
             *sorted((REPO / "case_studies").glob("*/README.md")), *sorted((REPO / "case_studies").glob("*/PERFORMANCE.md")),
             *sorted((REPO / "examples").rglob("README.md")), REPO / "bench" / "README.md"]
    return [p for p in found if p.is_file()]


DOCS = doc_files()


def _id(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def repo_paths_of(repo: Path) -> set[str]:
    """The repository's files and folders, relative to it: in a git checkout, those on disk that git does not
    ignore (a build output must not stand in for a file the docs name), else all on disk."""
    files: list[str] = []
    if (repo / ".git").exists():
        try:
            out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                 capture_output=True, check=True, timeout=60).stdout
            files = [f for f in out.decode().split("\0") if f and (repo / f).exists()]
        except (OSError, subprocess.SubprocessError):
            files = []
    if not files:
        files = [p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()
                 and not {".git", "__pycache__", ".venv", "build"} & set(p.relative_to(repo).parts)]
    paths = set(files)
    for f in files:
        parts = f.split("/")
        paths.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return paths


REPO_PATHS = repo_paths_of(REPO)


_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.DOTALL | re.MULTILINE)


def prose(text: str) -> str:
    """The text without its fenced code blocks (their backticks and brackets are code, not markup)."""
    return _FENCE.sub("", text)


# --- 1. diagnostic codes ---------------------------------------------------------------------------

_CODE = re.compile(r"(?<![A-Za-z0-9])PL\d{3}(?![0-9])")


def mentioned_codes(text: str) -> set[str]:
    return set(_CODE.findall(text))


def unregistered_codes(text: str, registry=CODES) -> list[str]:
    return sorted(c for c in mentioned_codes(text) if c not in registry)


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_code_a_doc_names_is_registered(doc):
    assert unregistered_codes(doc.read_text()) == [], "name a code pipelink/core/diagnostics.py registers"


# --- 2. relative links -----------------------------------------------------------------------------

_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF = re.compile(r"^ {0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)


def link_targets(text: str) -> list[str]:
    """The file part of every relative link (inline and reference-style); web, mail and same-page links left out."""
    targets = []
    for raw in [*_LINK.findall(prose(text)), *_REF.findall(prose(text))]:
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", raw) or raw.startswith("#"):
            continue
        targets.append(raw.split("#", 1)[0].split("?", 1)[0])
    return targets


def missing_links(doc: Path, text: str, repo: Path | None = None) -> list[str]:
    """The link targets of `text` (a doc at `doc`) that are none of the repository's files or folders."""
    repo = REPO if repo is None else repo
    paths = REPO_PATHS if repo == REPO else repo_paths_of(repo)
    here = doc.parent.relative_to(repo).as_posix()
    return [t for t in link_targets(text) if posixpath.normpath(posixpath.join(here, t)) not in paths]


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_relative_link_resolves(doc):
    assert missing_links(doc, doc.read_text()) == []


# --- 3. backticked paths ---------------------------------------------------------------------------

EXTENSIONS = {"py", "md", "json", "cu", "cuh", "h", "hpp", "cc", "cpp", "sh", "toml", "yaml", "yml", "txt", "log",
              "cubin", "html", "svg", "o", "a", "bc", "ptx", "ltoir", "csv", "cfg", "ini"}

# Names the docs give files that are not in the repository on purpose: what a command writes or reads in the
# docs' examples, and files of the toolchain's wheels or of another repository. Each must excuse a name that
# is missing (test_every_excused_name_is_needed), so the list cannot hide a file that goes.
NOT_FILES = {
    # a user's files and a command's outputs in the docs' examples, and placeholders of a command's synopsis
    "K.cubin", "K.json", "M.html", "M.svg", "FILE.svg", "FILE.html", "F.cu", "NAME.o", "X.o", "C.json", "p.json",
    "x.cu", "../x.cu", "comp/x.cu", "*.o", "saxpy.o", "other.o", "ring_dot.o", "ring_dot.pipelink.h",
    "ring_dot.o.contract.json", "build/saxpy.o",
    # build folders (ignored by git): the demo's, and the one the Qwen3 case study builds its objects in
    "build/components/", "case_studies/qwen3_32b_mlp/build",
    # a link cache entry's files (docs/architecture.md), under the cache folder
    "kernel.cubin", "link.svg", "glue.cu", "monolithic.cu", "diagnostics.json", "manifest.json", "sha256.json",
    # the toolchain wheels' files (under site-packages/nvidia/), not the repository's
    "include/cccl/", "lib/", "lib/libnvshmem_device.a", "libnvshmem_device.a",
    "nvidia/cu13/bin/", "site-packages/nvidia/cu13/", "non_abi/device/coll/reduce.cuh",
    # a file of another repository: the published CUDA-graph baseline the Llama case study compares with
    "llama/kernels/projection.cu",
}

_TOKEN = re.compile(r"`([^`\n]+)`")
_PATHLIKE = re.compile(r"(?:\.{1,2}/)?[A-Za-z0-9_.*-]+(?:/[A-Za-z0-9_.*-]+)*/?")


# The repository's top-level folders: a word with a folder part that starts with one is a path, extension or not.
TOP = {p.split("/")[0] for p in REPO_PATHS if "/" in p and not p.startswith(".")}


def _looks_like_path(token: str) -> bool:
    if not _PATHLIKE.fullmatch(token) or token in (".", "..", "/", "//") or token.startswith("-"):
        return False
    if token.endswith("/") or ("/" in token and token.split("/")[0] in TOP | {".", ".."}):
        return True
    name = token.rsplit("/", 1)[-1]
    return "." in name.strip(".") and name.rsplit(".", 1)[-1] in EXTENSIONS


def _words(span: str) -> list[str]:
    """A code span's words: the span itself where it is one, else what a command line names (`--out=DIR` gives
    DIR; brackets, quotes and commas split words). `<pipelink/component.h>` gives the header as included."""
    include = re.fullmatch(r"<([\w.-]+(?:/[\w.-]+)+)>", span)
    if include:
        return [include.group(1)]
    if not re.search(r"\s", span):
        return [span]
    return [w.split("=", 1)[1] if w.startswith("-") and "=" in w else w
            for w in re.split(r"[\s\[\]()\"',;]+", span) if w]


def path_tokens(text: str) -> list[str]:
    """Backticked words that look like a file or a folder: path characters only, with a known extension or a
    trailing slash. Placeholders (`<name>.json`) and options are not paths."""
    return [w for span in _TOKEN.findall(prose(text)) for w in _words(span) if _looks_like_path(w)]


def _exists(paths: set[str], base: str, token: str) -> bool:
    """`token`, relative to the folder `base` ("" for the repository's top), is one of `paths` (a glob: matches
    one)."""
    target = posixpath.normpath(posixpath.join(base, token.rstrip("/")))
    if "*" in target:
        pattern = re.compile("[^/]*".join(map(re.escape, target.split("*"))))
        return any(pattern.fullmatch(p) for p in paths)
    return target in paths


def _somewhere(paths: set[str], token: str) -> bool:
    """Some file or folder of the repository ends with the token (a case study's `results/x.json`, named from
    docs/)."""
    token = token.rstrip("/")
    if "*" not in token:
        return any(p == token or p.endswith("/" + token) for p in paths)
    pattern = re.compile(r"(?:.*/)?" + "[^/]*".join(map(re.escape, token.split("*"))))
    return any(pattern.fullmatch(p) for p in paths)


# Where a doc's relative paths start, besides its own folder: the repository, the package (the docs name
# pipelink's modules as `linker/glue.py`, the package folder being understood) and its include folder (a header as
# an `#include` spells it: `pipelink/remote.h`).
BASES = ("", "pipelink", "pipelink/include")


def missing_paths(doc: Path, text: str, repo: Path = REPO, paths: set[str] | None = None,
                  not_files: set[str] = NOT_FILES) -> list[str]:
    """The path tokens of `text` (a doc at `doc` in `repo`, whose files and folders are `paths`) that name
    nothing. A path starting `./` or `../` is the doc's. One with a folder part is checked where its first folder
    is: beside the doc, at the top of the repository (`tests/`, `case_studies/`, ...) or in the package
    (`linker/`); where its first folder is none of these, some path of the repository must end with it
    (`results/x.json` of a case study, named from docs/). A bare name must be some file's or folder's."""
    paths = (REPO_PATHS if repo == REPO else repo_paths_of(repo)) if paths is None else paths
    here = doc.parent.relative_to(repo).as_posix()
    here = "" if here == "." else here
    missing = []
    for token in dict.fromkeys(path_tokens(text)):
        if token in not_files:
            continue
        parts = token.rstrip("/").split("/")
        if token.startswith(("./", "../")):
            ok = _exists(paths, here, token)
        elif len(parts) == 1:
            ok = _somewhere(paths, token)
        else:
            bases = [b for b in (here, *BASES) if _exists(paths, b, parts[0])]
            ok = any(_exists(paths, b, token) for b in bases) if bases else _somewhere(paths, token)
        if not ok:
            missing.append(token)
    return missing


@pytest.fixture(scope="module")
def repo_paths():
    return REPO_PATHS


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_backticked_path_exists(doc, repo_paths):
    assert missing_paths(doc, doc.read_text(), paths=repo_paths) == [], \
        "fix the path, or add a deliberate output's name to NOT_FILES"


def test_every_excused_name_is_needed(repo_paths):
    """NOT_FILES holds only names that the docs use and that name no file: none that could hide a real file going."""
    excused = {t for doc in DOCS for t in missing_paths(doc, doc.read_text(), paths=repo_paths, not_files=set())}
    assert sorted(NOT_FILES - excused) == []


# --- 4. README's Commands table against the parser -------------------------------------------------

# Options a row shows that are not pipelink's own: the nvcc flag `pipelink config --cflags` prints.
NOT_OPTIONS = {"config": {"--expt-relaxed-constexpr"}}


def commands_table(readme: str) -> list[tuple[str, str]]:
    """The (command, what it does) rows of README.md's "## Commands" table."""
    section = re.search(r"^## Commands\n(.*?)(?=^## )", readme, re.DOTALL | re.MULTILINE)
    assert section, "README.md has no ## Commands section"
    rows = []
    for line in section.group(1).splitlines():
        if not line.startswith("| `pipelink"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        rows.append((cells[0], cells[1] if len(cells) > 1 else ""))
    return rows


def _options_in(cell: str) -> list[tuple[str, list[str]]]:
    """(option, the words after it up to the next option) for each option in the cell's code spans."""
    found = []
    for span in _TOKEN.findall(cell):
        words = span.replace("[", " ").replace("]", " ").split()
        for i, word in enumerate(words):
            if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", word):
                opt, _, value = word.partition("=")
                after = [value] if value else [w for w in words[i + 1:i + 2] if not w.startswith("-")]
                found.append((opt, after))
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def cli_mismatches(rows: list[tuple[str, str]], parser: argparse.ArgumentParser,
                   not_options: dict[str, set[str]] = NOT_OPTIONS) -> list[str]:
    """What the table shows that the parser lacks: a subcommand, an option of it, or a choice of an option."""
    subs = _subparsers(parser)
    wrong = []
    for command, what in rows:
        m = re.match(r"`pipelink ([a-z][\w-]*)", command)
        name = m.group(1) if m else ""
        if m and name not in subs:
            wrong.append(f"pipelink {name}: no such subcommand")
            continue
        target = subs[name] if m else parser
        actions = _option_actions(target)
        for opt, after in _options_in(command) + _options_in(what):
            if opt in not_options.get(name, ()):
                continue
            label = f"pipelink {name} {opt}" if name else f"pipelink {opt}"
            if opt not in actions and re.fullmatch(r"-[A-Za-z]\w+", opt) and opt[:2] in actions:
                continue  # a short option with its value joined: -DNAME, -Iinclude
            if opt not in actions:
                wrong.append(f"{label}: no such option")
            elif actions[opt].choices is not None and after:
                for value in after[0].replace("\\|", "|").split("|"):
                    if value and not value.isupper() and value not in actions[opt].choices:  # S: a placeholder
                        wrong.append(f"{label} {value}: not a choice ({', '.join(map(str, actions[opt].choices))})")
    return wrong


def test_the_commands_table_matches_the_parser():
    rows = commands_table((REPO / "README.md").read_text())
    shown = {re.match(r"`pipelink ([a-z][\w-]*)", c).group(1) for c, _ in rows if re.match(r"`pipelink [a-z]", c)}
    assert shown == set(_subparsers(_parser())), "every subcommand has its row"
    assert cli_mismatches(rows, _parser()) == []


# The MoE case study names its measured variants after what runs (`pipelink separate`: its four components linked
# as four kernels; `pipelink split separate`, `pipelink hopper separate`): variants, not subcommands.
NOT_COMMANDS = {"separate", "split", "hopper"}


def command_lines(text: str) -> list[str]:
    """Every code span that is a pipelink command line, up to a pipe or a redirection."""
    return [re.split(r"\s(?:\||;|&&|>|2>)\s", span)[0] for span in _TOKEN.findall(prose(text))
            if re.match(r"pipelink -?-?[a-z]", span)]


def command_line_mismatches(text: str, parser: argparse.ArgumentParser, not_commands=NOT_COMMANDS) -> list[str]:
    """What the command lines of a doc use that the parser lacks (as cli_mismatches, for one-cell rows)."""
    rows = [(f"`{line}`", "") for line in command_lines(text)
            if not re.match(rf"pipelink ({'|'.join(map(re.escape, not_commands))})\b", line)]
    return cli_mismatches(rows, parser, not_options={})


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_command_line_a_doc_shows_parses(doc):
    assert command_line_mismatches(doc.read_text(), _parser()) == []


# --- the checks themselves catch what they are for ---------------------------------------------------

def test_an_unregistered_code_is_caught():
    text = "PL001 is registered; `PL999` is not, nor is (PL998). PL04x is a range and XPL0011 no code."
    assert unregistered_codes(text, {"PL001": None}) == ["PL998", "PL999"]
    assert unregistered_codes("```\nPL997\n```") == ["PL997"]  # in code blocks too


def test_a_missing_link_target_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("x")
    doc = tmp_path / "README.md"
    text = ("[a](docs/there.md) [b](docs/there.md#a-section) [c](docs/gone.md#x) [d](https://example.com/gone.md) "
            "[e](#local) ![f](img/gone.svg \"title\")\n\n[ref]: docs/also_gone.md\n\n```\n[g](in/code.md)\n```\n")
    assert missing_links(doc, text, repo=tmp_path) == ["docs/gone.md", "img/gone.svg", "docs/also_gone.md"]


def test_a_missing_path_is_caught(tmp_path):
    for f in ("pipelink/linker/glue.py", "pipelink/include/pipelink/glue.h", "tests/test_x.py", "case/results/x.json",
              "case/run.py"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    doc = tmp_path / "case" / "README.md"
    other = tmp_path / "docs" / "notes.md"
    text = ("`pipelink/linker/glue.py` `linker/glue.py` `tests/test_x.py` `results/x.json` `run.py` `./run.py` "
            "`tests/test_*.py` `results/` `<pipelink/glue.h>` `<name>.json` `--map M.svg` `K.cubin` "
            "`pipelink link -o K.cubin` `python case/run.py --out=results/x.json`\n"
            "`pipelink/linker/gone.py` `linker/gone.py` `tests/test_gone.py` `results/gone.json` `gone.py` "
            "`./gone.py` `../case/gone.cu` `tests/test_nothing_*.py` `tests/gone/` `lib/libfoo.a` `<pipelink/gone.h>` "
            "`python case/gone_run.py [--out=results/made.json]` `./scripts/gone` `tests/golden`\n"
            "```\n`in/a/code/block.py`\n```\n")
    gone = ["pipelink/linker/gone.py", "linker/gone.py", "tests/test_gone.py", "results/gone.json", "gone.py",
            "./gone.py", "../case/gone.cu", "tests/test_nothing_*.py", "tests/gone/", "lib/libfoo.a", "pipelink/gone.h",
            "case/gone_run.py", "results/made.json", "./scripts/gone", "tests/golden"]
    outputs = {"K.cubin", "M.svg"}
    assert missing_paths(doc, text, repo=tmp_path, not_files=outputs) == gone
    # from another folder, `results/x.json` is found where it is; `./run.py` is no longer beside the doc
    assert missing_paths(other, text, repo=tmp_path, not_files=outputs) == ["./run.py", *gone]


def test_a_command_the_parser_lacks_is_caught():
    readme = ("## Commands\n\n| command | what |\n| --- | --- |\n"
              "| `pipelink link FILE... [--pipeline P] [--no-such-flag]` | "
              "`--schedule persistent --dispatch static\\|odd`, `--schedule S`, `--format json\\|sarif`, `--ghost` |\n"
              "| `pipelink relink FILE` | gone |\n| `pipelink --version` | `--verbose` |\n\n## Next\n")
    assert cli_mismatches(commands_table(readme), _parser()) == [
        "pipelink link --no-such-flag: no such option", "pipelink link --dispatch odd: not a choice (static, dynamic)",
        "pipelink link --ghost: no such option", "pipelink relink: no such subcommand", "pipelink --verbose: no such option"]


def test_a_command_line_the_parser_lacks_is_caught():
    text = ("Run `pipelink check *.o --set --format sarif`, then `pipelink link a.o -o K.cubin --emit-glue g.cu` or "
            "`pipelink inspect K.cubin | head -n 3`; not `pipelink check --sett`, `pipelink linc a.o`, "
            "`pipelink build x.cu -DN=4 -Iinc --arch=sm_90 --fast` nor `pipelink check --format xml`; `pipelink separate` is a "
            "variant's name.")
    assert command_line_mismatches(text, _parser()) == [
        "pipelink check --sett: no such option", "pipelink linc: no such subcommand", "pipelink build --fast: no such option",
        "pipelink check --format xml: not a choice (text, json, sarif)"]
