"""The house's structural rules: services meet only through the sdk, the shared libraries and the generated stubs;
each distribution has one audience and depends on what it uses.

A service package (`webenv.browser`, `webenv.collector`, ...) imports no other service's package, the client
(`webenv.cli`, services/cli: the `webenv` command and its workflows) imports none and none imports it: what two
services share lives in the sdk or a library of libs/, and what they say to each other goes over the contract
(`protos/webenv/v1`). The sdk (services/sdk: the contract, the service runtime and the client library) imports no
library and no service; a library (libs/llm, libs/agent, libs/compat, libs/testing) imports no service. Every import
of another distribution's package is one the importer's pyproject.toml depends on. The imports are read from the
code by `tools/imports.py` (ast only: nothing is imported), which also prints the whole graph: `python
tools/imports.py`.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

_TOOL = Path(__file__).resolve().parents[1] / "tools" / "imports.py"
_spec = importlib.util.spec_from_file_location("webenv_tools_imports", _TOOL)
assert _spec and _spec.loader
imports = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = imports  # dataclasses look their module up while the class is built
_spec.loader.exec_module(imports)

#: Crossings allowed between service packages and the client: none (task files, which the `webenv` command and the
#: sites service both read, live in the sdk: webenv.taskfiles).
KNOWN: set[tuple[str, str]] = set()


def test_no_service_imports_another_services_package() -> None:
    mods = imports.modules()
    services = imports.service_packages()
    assert {"webenv.browser", "webenv.collector", "webenv.policy", "webenv.sites", "webenv.cli"} <= set(services)
    crossing = set()
    for mod in mods.values():
        home = imports.package_of(mod.name)
        for imp in mod.imports:
            there = imports.package_of(imp)
            if there in services and there != home:
                crossing.add((mod.name, imp))
    assert crossing == KNOWN, f"imports across packages (the sdk included) that only the sdk may serve: {crossing - KNOWN}"


def test_the_reader_sees_relative_and_lazy_imports() -> None:
    mods = imports.modules()
    assert "webenv.policy.metrics" in mods["webenv.policy.servicer"].imports  # `from . import metrics`
    assert "webenv.taskfiles" in mods["webenv.cli.commands.common"].imports  # inside a function
    assert "webenv.streams" in mods["webenv.envcontract"].imports


def test_no_files_import_each_other_in_a_loop() -> None:
    """A loop of imports between files (even lazy ones) is a room grown into another: none is left."""
    assert imports.file_loops(imports.modules()) == []


def test_the_collectors_work_queue_does_not_import_its_engine() -> None:
    """The Redis work queue is handed the engine's job (``Engine.run_queued``) instead of importing the engine: the
    two used to import each other, and the queue re-implemented running, storing and counting an episode."""
    mods = imports.modules()
    assert "webenv.collector.engine" in mods["webenv.collector.app"].imports  # the reader sees the engine's users
    assert "webenv.collector.engine" not in mods["webenv.collector.queue"].imports
    assert "webenv.collector.queue" not in mods["webenv.collector.engine"].imports


def test_the_client_is_its_own_distribution() -> None:
    """The `webenv` command, the workflows it drives (learning loop, world-model build, replay) and the launcher of
    the whole stack are the client's (services/cli), not the collector's nor the sdk's; the collector keeps its
    service."""
    mods = imports.modules()
    assert imports.service_packages()["webenv.cli"] == imports.CLIENT
    for name in ("main", "stack", "learning", "signals", "wmbuild", "replay"):
        assert f"webenv.cli.{name}" in mods and f"webenv.collector.{name}" not in mods, name
    assert "webenv.runtime.stack" not in mods and "webenv.collector.cli" not in mods
    assert {"webenv.collector.servicer", "webenv.collector.app"} <= set(mods)  # CollectorService stays


def test_the_sdk_imports_no_library_and_a_library_no_service() -> None:
    mods = imports.modules()
    where, services, libraries = imports.rooms(mods), imports.service_packages(), imports.library_packages()
    edges = imports.package_graph(mods)
    assert {(a, b) for (a, b) in edges if where[a] == "services/sdk" and where[b] != "services/sdk"} == set()
    assert {(a, b) for (a, b) in edges if a in libraries and b in services} == set()


def test_every_import_of_another_distribution_is_a_declared_dependency() -> None:
    """Services depend on what they use: an import of webenv.agent needs webenv-agent in the pyproject.toml."""
    assert imports.undeclared_imports(imports.modules()) == set()


def test_each_audience_has_its_own_distribution() -> None:
    """The sdk keeps the contract, the runtime and the client; the agent models (policy, trainer, judge, collector,
    client), the LLM layer (policy, judge, world model, trainer), the ecosystem adapters (over the client) and the
    test support are libraries of their own, and a service installs only those it uses."""
    mods = imports.modules()
    where = imports.rooms(mods)
    expected = {"webenv.agent": "libs/agent", "webenv.llm": "libs/llm", "webenv.compat": "libs/compat",
                "webenv.testing": "libs/testing", "webenv.fuzz": "libs/testing"}
    for pkg, folder in expected.items():
        assert where[pkg] == folder, pkg
    for pkg in ("webenv.v1", "webenv.errors", "webenv.actions", "webenv.envcontract", "webenv.runtime",
                "webenv.envservice", "webenv.streams", "webenv.client"):
        assert where[pkg] == "services/sdk", pkg
    assert "webenv.compat.gym" in mods and "webenv.client.gym" not in mods  # Gymnasium is an ecosystem too
    deps = {folder: d for folder, (_, d) in imports.distributions().items()}
    assert deps["services/browser"] == deps["services/sites"] == deps["services/gateway"] == {"webenv-sdk"}
    assert deps["services/sdk"] == set()
    root = imports.ROOT
    sdk = tomllib.loads((root / "services/sdk/pyproject.toml").read_text())["project"]
    assert not {"gymnasium", "numpy", "torch"} & {r.split(">")[0].split("=")[0] for r in sdk["dependencies"]}
    testing = tomllib.loads((root / "libs/testing/pyproject.toml").read_text())["project"]
    assert testing["entry-points"]["pytest11"] == {"webenv": "webenv.testing"}  # the plugin is the testing lib's
    assert "entry-points" not in sdk


def test_no_services_tests_import_another_service() -> None:
    """A service's tests (services/<name>/tests) import no other service's package, nor the client's: a test that
    needs two services is a cross-service test of tests/ (as tests/test_openenv_tabs.py is, the OpenEnv part of the
    farm's test of open tabs). The client's tests may drive services as the client does: over the contract."""
    import ast

    services = imports.service_packages()
    crossing = []
    for path in sorted(imports.SERVICES.glob("*/tests/**/*.py")):
        home = path.relative_to(imports.SERVICES).parts[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                pkg = ".".join(name.split(".")[:2])
                if pkg in services and services[pkg] != home:
                    crossing.append(f"{path.relative_to(imports.ROOT)}: {name}")
    assert crossing == [], crossing
