"""Every repository path the docs cite exists: docs/*.md and services/*/README.md, in markdown links and in
backticks where the text looks like a path; and they cite no branch but main (the repository has no other).

What looks like a path: text with a slash whose first folder is one of the repository's top-level ones
(`services/browser/bench.py`, `bench/results/`), or whose last part is a file name or ends with a slash
(`src/webenv/x.py`, `shared/design/notes.md`); a bare source file name (`settle.py`, `common.proto`). It is looked
for from the repository root, the doc's folder, `protos/` (import paths), a service's folder, package and tests,
and every folder the same doc cites (a table under `bench/results/learning/` names `kl/README.md`); a bare name
may be any file of the repository (the docs name files by their base name where the context says which folder).
Not checked: bare names of data files (`config.json`, `eval.md`: mostly what a command writes), the folders a
command writes (`data/` of a world-model build, `.webenv/`, `DATA_DIR/...`, `/tmp/...`), URLs, globs, placeholders,
image and task names without a file extension (`webenv/redis`, `shop-0001/tx-5`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([*ROOT.glob("docs/*.md"), *ROOT.glob("services/*/README.md")])
SOURCE = {"py", "js", "proto", "sh", "yml", "yaml", "toml"}  # bare names checked: source files, never outputs
OUTPUT_DIRS = {"data", "export"}  # folders commands write, named relative to their output folder
SKIP_DIRS = {".git", ".venv", "node_modules", ".webenv", "__pycache__"}
TOP = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
BRANCH = re.compile(r"\bbranch(?:es)?\s+`([^`]+)`")
PATHLIKE = re.compile(r"^[a-z_][\w-]*(/[\w.-]+)+/?$")
NOT_A_PATH = re.compile(r"[\s*<>{}$|=,;:!?'\"()\[\]@]|^[-.~/]|\.\.\.")


def _has_extension(name: str) -> bool:
    stem, dot, ext = name.rpartition(".")
    return bool(dot and stem and ext.isalnum() and not ext.isdigit())


def _looks_like_path(text: str) -> bool:
    """`services/x/y.py`, `bench/results/`, `settle.py`; not a command, module name, glob, URL or placeholder."""
    if NOT_A_PATH.search(text) or "//" in text:
        return False
    if "/" in text:
        first = text.split("/", 1)[0]
        if not PATHLIKE.match(text) or first in OUTPUT_DIRS:
            return False
        return first in TOP or text.endswith("/") or _has_extension(text.rsplit("/", 1)[1])
    stem, dot, ext = text.rpartition(".")
    return bool(dot and stem and ext in SOURCE and "." not in stem.strip("_"))


def _names() -> set[str]:
    """The base names of the repository's files (not of virtual environments, node_modules or run data)."""
    names: set[str] = set()
    stack = [ROOT]
    while stack:
        for p in stack.pop().iterdir():
            if p.is_dir():
                if p.name not in SKIP_DIRS:
                    stack.append(p)
            else:
                names.add(p.name)
    return names


def cited(doc: Path) -> list[tuple[int, str]]:
    """(line, path) of every repository path `doc` cites."""
    out = []
    for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for target in LINK.findall(CODE.sub("", line)):  # a link shown as code (`[id:name](href)`) is no link
            path = target.split("#", 1)[0]
            if path and "://" not in target and not target.startswith("mailto:"):
                out.append((n, path))
        for text in CODE.findall(line):
            if _looks_like_path(text):
                out.append((n, text))
    return out


def _bases(doc: Path, paths: list[str]) -> list[Path]:
    """Where a path cited in `doc` may be found."""
    bases = [ROOT, doc.parent, ROOT / "protos"]
    if doc.parent.parent == ROOT / "services":
        name = doc.parent.name
        bases += [doc.parent / "src", doc.parent / "src" / "webenv" / name, doc.parent / "tests"]
    bases += [ROOT / p for p in paths if "/" in p.rstrip("/") and (ROOT / p).is_dir()]
    return bases


def missing(doc: Path, names: set[str]) -> list[str]:
    """The cited paths of `doc` that do not exist, as `doc:line: path`."""
    found = cited(doc)
    bases = _bases(doc, [p for _, p in found])
    label = doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc.name

    def exists(path: str) -> bool:
        return ("/" not in path.rstrip("/") and path in names) or any((b / path).exists() for b in bases)

    return [f"{label}:{n}: {path}" for n, path in found if not exists(path)]


def test_every_path_the_docs_cite_exists() -> None:
    assert len(DOCS) > 10
    assert sum(len(cited(d)) for d in DOCS) > 300  # the scan finds the docs' citations at all
    names = _names()
    problems = [line for doc in DOCS for line in missing(doc, names)]
    assert not problems, "paths cited in the docs that the repository does not have:\n" + "\n".join(problems)


def test_the_docs_cite_no_branch_but_main() -> None:
    cited_branches = [f"{d.relative_to(ROOT)}: {b}" for d in DOCS for b in BRANCH.findall(d.read_text("utf-8"))
                      if b != "main"]
    assert not cited_branches, cited_branches


def test_the_scan_tells_paths_from_other_text(tmp_path: Path) -> None:
    for text in ("services/browser/README.md", "settle.py", "bench/results/", "src/webenv/x.py", "common.proto",
                 "shared/design/notes.md", "services/sdk"):
        assert _looks_like_path(text), text
    for text in ("webenv.browser.settle", "webenv up --free-ports", ".webenv/stack.json", "DATA_DIR/stack.json",
                 "services/*/tests", "http://127.0.0.1:8080/", "/tmp/x.py", "<name>.py", "config.json",
                 "WEBENV_AUTH_TOKEN", "webenv/redis", "shop-0001/tx-5", "data/sites.json", "v1.2"):
        assert not _looks_like_path(text), text
    page = tmp_path / "page.md"
    page.write_text("see `services/nowhere.py`, [the api](../api.md#x), `gone.py`, `README.md` and `webenv.client`\n"
                    "[site](https://example.test/a.md) `docs/api.md`, `[id:name](href)`\n", encoding="utf-8")
    assert cited(page) == [(1, "../api.md"), (1, "services/nowhere.py"), (1, "gone.py"), (2, "docs/api.md")]
    assert missing(page, {"README.md"}) == ["page.md:1: ../api.md", "page.md:1: services/nowhere.py",
                                            "page.md:1: gone.py"]
    assert BRANCH.findall("built on the branch `exp/x` (not on main), see branch `main`") == ["exp/x", "main"]
