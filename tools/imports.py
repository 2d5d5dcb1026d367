"""The import structure of webenv, read from the code (Python's ast; nothing is imported or run).

    python tools/imports.py              # packages, their audiences and the imports between them, then loops of files
    python tools/imports.py --files PKG  # the imports between the files of one package (e.g. webenv.browser)

Every distribution is a room with one audience: a service's `webenv.<name>` (services/<name>), the client's
`webenv.cli` (services/cli: the `webenv` command and the workflows it drives across the services), the sdk
(services/sdk: the contract, the service runtime and the client library, one package a top-level module or package
of it: `webenv.errors`, `webenv.runtime`, `webenv.client`, ...) and the libraries of libs/ (`webenv.llm` the LLM
layer, `webenv.agent` the agent models, `webenv.compat` the ecosystem adapters over the client, `webenv.testing` and
`webenv.fuzz` the test support). Tests, benchmarks and the generated `webenv.v1` stubs are left out (the stubs are
counted as `webenv.v1`, the sdk's, where imported). Imports inside functions and under TYPE_CHECKING count: a loop
that only a type annotation closes is still a loop a reader has to follow. `tests/test_structure.py` holds the rules
this drawing shows: services (and the client) meet only through the sdk, the libraries and the generated stubs; the
sdk imports no library, a library no service; and every import of another distribution's package is one its
pyproject.toml depends on.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "services"
LIBS = ROOT / "libs"
SDK = "sdk"
CLIENT = "cli"  # the folder of the platform's client, webenv.cli: it talks to the services over the contract


@dataclass
class Module:
    name: str  # webenv.browser.farm
    path: Path
    service: str  # the folder under services/ or libs/ (browser, sdk, agent, ...)
    lines: int
    imports: set[str] = field(default_factory=set)  # module names of this tree it imports

    @property
    def room(self) -> str:
        """The distribution's folder: services/browser, services/sdk, libs/agent."""
        return self.path.relative_to(ROOT).parts[0] + "/" + self.service


def _sources() -> list[Path]:
    """Every distribution's src/webenv: services/*/src/webenv and libs/*/src/webenv."""
    return sorted([*SERVICES.glob("*/src/webenv"), *LIBS.glob("*/src/webenv")])


def service_packages() -> dict[str, str]:
    """`webenv.<name>` of every folder under services/ but the sdk (the services and the client) -> the folder."""
    out = {}
    for src in sorted(SERVICES.glob("*/src/webenv")):
        service = src.parents[1].name
        if service == SDK:
            continue
        for pkg in src.iterdir():
            if pkg.is_dir() and any(pkg.glob("*.py")):
                out[f"webenv.{pkg.name}"] = service
    return out


def library_packages() -> dict[str, str]:
    """Every top-level package or module of a library under libs/ (`webenv.agent`, `webenv.fuzz`) -> its folder."""
    out = {}
    for src in sorted(LIBS.glob("*/src/webenv")):
        for item in src.iterdir():
            if (item.is_dir() and any(item.glob("*.py"))) or item.suffix == ".py":
                out[f"webenv.{item.stem}"] = src.parents[1].name
    return out


def distributions() -> dict[str, tuple[str, set[str]]]:
    """Folder (services/browser, libs/agent) -> (its distribution's name, the webenv-* distributions it depends on,
    extras included: an import of a package another distribution holds must be one of these)."""
    out = {}
    for pyproject in sorted([*SERVICES.glob("*/pyproject.toml"), *LIBS.glob("*/pyproject.toml")]):
        project = tomllib.loads(pyproject.read_text())["project"]
        reqs = [*project.get("dependencies", []),
                *(r for extra in project.get("optional-dependencies", {}).values() for r in extra)]
        deps = {m.group(0) for r in reqs if (m := re.match(r"webenv-[a-z]+", r))} - {project["name"]}
        out[pyproject.parent.relative_to(ROOT).as_posix()] = (project["name"], deps)
    return out


def modules() -> dict[str, Module]:
    """Every source module under services/*/src and libs/*/src (the generated stubs left out), with the imports it
    makes."""
    found: dict[str, Module] = {}
    for path in sorted(p for src in _sources() for p in src.glob("**/*.py")):
        service = next(p for p in path.parents if p.parent in (SERVICES, LIBS)).name
        parts = list(path.relative_to(next(p for p in path.parents if p.name == "src")).with_suffix("").parts)
        if parts[:2] == ["webenv", "v1"]:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        found[name] = Module(name, path, service, len(path.read_text().splitlines()))
    for mod in found.values():
        is_pkg = mod.path.name == "__init__.py"
        for node in ast.walk(ast.parse(mod.path.read_text(), str(mod.path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod.name.split(".")
                    anchor = anchor if is_pkg else anchor[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import mod` imports the module; `from mod import name` the module that defines name
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
            for t in targets:
                hit = _resolve(t, found)
                if hit and hit != mod.name:
                    mod.imports.add(hit)
    return found


def _resolve(name: str, found: dict[str, Module]) -> str | None:
    if not name.startswith("webenv"):
        return None
    if name == "webenv.v1" or name.startswith("webenv.v1."):
        return "webenv.v1"
    parts = name.split(".")
    while parts:
        if ".".join(parts) in found:
            return ".".join(parts)
        parts.pop()
    return None


def package_of(name: str) -> str:
    """webenv.browser.farm -> webenv.browser; webenv.runtime.server -> webenv.runtime; webenv.errors -> itself."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else name


def package_graph(mods: dict[str, Module] | None = None) -> dict[tuple[str, str], set[str]]:
    """(importing package, imported package) -> the importing modules, between different packages."""
    mods = modules() if mods is None else mods
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for mod in mods.values():
        a = package_of(mod.name)
        for imp in mod.imports:
            b = package_of(imp)
            if a != b:
                edges[(a, b)].add(mod.name)
    return edges


def rooms(mods: dict[str, Module]) -> dict[str, str]:
    """Package -> the folder of the distribution that holds it (services/browser, services/sdk, libs/agent)."""
    out = {package_of(m.name): m.room for m in mods.values()}
    out["webenv.v1"] = f"services/{SDK}"  # generated into the sdk
    return out


def undeclared_imports(mods: dict[str, Module]) -> set[tuple[str, str]]:
    """(importing package, imported package) of another distribution that the importer's pyproject.toml does not
    depend on (directly: a dependency's own dependencies do not count)."""
    where, dists = rooms(mods), distributions()
    return {(a, b) for (a, b) in package_graph(mods)
            if where[a] != where[b] and dists[where[b]][0] not in dists[where[a]][1]}


def file_loops(mods: dict[str, Module]) -> list[list[str]]:
    """Strongly connected groups of more than one module (files that import each other in a loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(mods[v].imports):
            if w not in mods:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", metavar="PKG", help="the imports between the files of one package")
    args = ap.parse_args(argv)
    mods = modules()
    services = service_packages()
    if args.files:
        inside = {n: m for n, m in mods.items() if n == args.files or n.startswith(args.files + ".")}
        if not inside:
            print(f"no package {args.files!r}; known: {', '.join(sorted({package_of(n) for n in mods}))}",
                  file=sys.stderr)
            return 2
        for name, mod in sorted(inside.items()):
            own = sorted(i.removeprefix(args.files + ".") for i in mod.imports if i in inside)
            print(f"{name.removeprefix(args.files + '.') or '__init__':28} {mod.lines:5}  -> {', '.join(own) or '-'}")
        return 0
    sizes: dict[str, int] = defaultdict(int)
    for mod in mods.values():
        sizes[package_of(mod.name)] += mod.lines
    edges = package_graph(mods)
    where = rooms(mods)
    libraries = library_packages()
    print("PACKAGES (lines; the folder of their distribution: a service, services/cli the client, services/sdk the "
          "contract, runtime and client library, libs/<name> a shared library) and what each imports from the others "
          "(number of files importing):")
    for pkg in sorted(sizes, key=lambda p: (p not in services, services.get(p) == CLIENT, p in libraries,
                                            where[p], p)):
        uses = sorted((b, len(files)) for (a, b), files in edges.items() if a == pkg)
        print(f"  {pkg:22} {sizes[pkg]:6}  {where[pkg]:19} -> {', '.join(f'{b} ({n})' for b, n in uses) or '-'}")
    print("DISTRIBUTIONS (folder: name, lines) and the webenv distributions each depends on (pyproject.toml):")
    for folder, (name, deps) in sorted(distributions().items(), key=lambda kv: (kv[0].startswith("services"), kv[0])):
        lines = sum(m.lines for m in mods.values() if m.room == folder)
        print(f"  {folder:19} {name:18} {lines:6}  -> {', '.join(sorted(deps)) or '-'}")
    client = {p for p, w in services.items() if w == CLIENT}

    def listed(pairs) -> str:
        return ", ".join(f"{a} -> {b}" for a, b in sorted(pairs)) or "none"

    sdk = {p for p in where if where[p] == f"services/{SDK}"}
    print("SERVICE -> SERVICE imports:", listed((a, b) for (a, b) in edges if a in services and b in services
                                                 and not {a, b} & client))
    print("CLIENT -> SERVICE imports:", listed((a, b) for (a, b) in edges if a in client and b in services))
    print("SERVICE -> CLIENT imports:", listed((a, b) for (a, b) in edges if a in services and b in client))
    print("SDK -> LIBRARY, SERVICE or CLIENT imports:", listed((a, b) for (a, b) in edges if a in sdk and b not in sdk))
    print("LIBRARY -> SERVICE or CLIENT imports:", listed((a, b) for (a, b) in edges if a in libraries and b in services))
    print("IMPORTS THE IMPORTER'S pyproject.toml DOES NOT DEPEND ON:", listed(undeclared_imports(mods)))
    loops = file_loops(mods)
    print(f"LOOPS OF FILES ({len(loops)}):")
    for group in loops:
        print("  " + " <-> ".join(group))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
