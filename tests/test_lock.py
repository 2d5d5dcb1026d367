"""requirements.lock (the versions `make install` installs, `make lock` writes it) agrees with what the project
declares: every dependency of every pyproject.toml under services/ and libs/ and of requirements-dev.txt is pinned there, at a
version its specifier allows. A dependency added or re-pinned without `make lock` fails here, not on a fresh
machine's install."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def locked() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for n, line in enumerate((ROOT / "requirements.lock").read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"requirements.lock:{n}: not a pin (name==version): {line!r}"
        key = canonicalize_name(name)
        assert key not in pins, f"requirements.lock:{n}: {name} pinned twice"
        pins[key] = Version(version)
    return pins


def declared() -> list[tuple[str, Requirement]]:
    out = []
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(("requirements-dev.txt", Requirement(line)))
    for path in sorted([*(ROOT / "services").glob("*/pyproject.toml"), *(ROOT / "libs").glob("*/pyproject.toml")]):
        project = tomllib.loads(path.read_text())["project"]
        out += [(str(path.relative_to(ROOT)), Requirement(r)) for r in project.get("dependencies", [])]
    return out


def test_every_declared_dependency_is_pinned_within_its_specifier() -> None:
    pins = locked()
    assert len(pins) > 50
    problems = []
    for where, req in declared():
        if req.name.startswith("webenv-") or (req.marker and not req.marker.evaluate()):
            continue  # the project's own packages are installed editable, not pinned
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{where}: {req} is not in requirements.lock")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{where}: {req} does not allow the locked {req.name}=={pin}")
    assert not problems, "run `make lock` after installing:\n" + "\n".join(problems)
