"""The import structure of webenv, read from the code (Python's ast; nothing is imported or run).

    python tools/imports.py              # packages and the imports between them, then loops of files
    python tools/imports.py --files PKG  # the imports between the files of one package (e.g. webenv.browser)

A package is a service's `webenv.<name>`, the client's `webenv.cli` (services/cli: the `webenv` command and the
workflows it drives across the services), or one top-level module or package of the sdk (`webenv.errors`,
`webenv.runtime`, ...); tests, benchmarks and the generated `webenv.v1` stubs are left out (the stubs are
counted as `webenv.v1` where imported). Imports inside functions and under TYPE_CHECKING count: a loop that
only a type annotation closes is still a loop a reader has to follow. `tests/test_structure.py` holds the
rule this drawing shows: services (and the client) meet only through the sdk and the generated stubs.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "services"
SDK = "sdk"
CLIENT = "cli"  # the folder of the platform's client, webenv.cli: it talks to the services over the contract


@dataclass
class Module:
    name: str  # webenv.browser.farm
    path: Path
    service: str  # the folder under services/
    lines: int
    imports: set[str] = field(default_factory=set)  # module names of this tree it imports


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


def modules() -> dict[str, Module]:
    """Every source module under services/*/src (the generated stubs left out), with the imports it makes."""
    found: dict[str, Module] = {}
    for path in sorted(SERVICES.glob("*/src/webenv/**/*.py")):
        service = path.relative_to(SERVICES).parts[0]
        parts = list(path.relative_to(SERVICES / service / "src").with_suffix("").parts)
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
    print("PACKAGES (lines; service, cli (the client) or sdk) and what each imports from the others "
          "(number of files importing):")
    for pkg in sorted(sizes, key=lambda p: (p not in services, services.get(p) == CLIENT, p)):
        where = services.get(pkg, SDK)
        uses = sorted((b, len(files)) for (a, b), files in edges.items() if a == pkg)
        print(f"  {pkg:22} {sizes[pkg]:6}  {where:10} -> {', '.join(f'{b} ({n})' for b, n in uses) or '-'}")
    client = {p for p, where in services.items() if where == CLIENT}

    def listed(pairs) -> str:
        return ", ".join(f"{a} -> {b}" for a, b in sorted(pairs)) or "none"

    print("SERVICE -> SERVICE imports:", listed((a, b) for (a, b) in edges if a in services and b in services
                                                 and not {a, b} & client))
    print("CLIENT -> SERVICE imports:", listed((a, b) for (a, b) in edges if a in client and b in services))
    print("SERVICE -> CLIENT imports:", listed((a, b) for (a, b) in edges if a in services and b in client))
    print("SDK -> SERVICE or CLIENT imports:", listed((a, b) for (a, b) in edges if a not in services and b in services))
    loops = file_loops(mods)
    print(f"LOOPS OF FILES ({len(loops)}):")
    for group in loops:
        print("  " + " <-> ".join(group))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
