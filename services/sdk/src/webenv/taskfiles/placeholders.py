"""Where a benchmark's sites are: WebArena-style placeholders (``__SHOPPING__``, ``__GITLAB__``, ...) to base URLs.

One configuration, read when a benchmark task file is loaded:

- ``WEBENV_SITE_<NAME>`` (``WEBENV_SITE_SHOPPING=http://127.0.0.1:7770``) for the placeholder ``__<NAME>__``;
- else the file ``WEBENV_BENCHMARK_SITES`` names: JSON, either ``{"__SHOPPING__": "http://...", ...}`` or
  WebArena-Verified's own config (``{"environments": {"__SHOPPING__": {"urls": [...], "active_url_idx": 0}}}``);
- else BrowserGym's names: ``WA_<NAME>`` (WebArena) and ``VWA_<NAME>`` (VisualWebArena).

A task that names a placeholder none of these maps is refused before anything runs, the message naming the
placeholder and the variable that would map it (:class:`UnmappedPlaceholder`).

The same file says how each site's state is managed (:class:`SiteState`, read by the farm when a session opens a
benchmark task): a placeholder's value may be an object instead of a URL string, ``{"url": ..., "storage_state":
"auth/shopping.json", "login_command": ["python", "auto_login.py"], "reset_url": "http://host:8080/reset",
"reset_method": "POST", "reset_command": ["./reset.sh"], "reset_timeout_s": 600}`` (a WebArena-Verified
``environments`` entry may carry the same keys beside its ``urls``): a Playwright storage_state file applied to a
session whose task has ``require_login`` (the login command runs once first when the file is missing), and a reset
hook (the endpoint, else the command) called before a task with ``require_reset``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A site placeholder: upper case between double underscores (``__last_url__`` / ``__page__`` are not sites).
PLACEHOLDER = re.compile(r"__([A-Z][A-Z0-9_]*?)__")
FILE_VAR = "WEBENV_BENCHMARK_SITES"


class UnmappedPlaceholder(ValueError):
    """A placeholder with no base URL; ``placeholder`` names it."""

    def __init__(self, where: str, placeholder: str) -> None:
        name = placeholder.strip("_")
        super().__init__(f"{where}: placeholder {placeholder} has no base URL: set WEBENV_SITE_{name} (or WA_{name}, "
                         f"or map it in the {FILE_VAR} file)")
        self.placeholder = placeholder


@dataclass(frozen=True)
class SiteState:
    """How one site's state is managed (the ``WEBENV_BENCHMARK_SITES`` file's object for its placeholder).

    ``storage_state``: a Playwright storage_state file (cookies and localStorage origins, as WebArena's
    ``.auth/*_state.json``), applied when a task needs a login; ``login_command``: argv run
    once when that file is missing, to write it; ``reset_url`` (called with ``reset_method``, a 2xx answer meaning the reset is done) or else ``reset_command`` (argv, exit code 0): the
    site's reset hook, called before a task with ``require_reset``."""

    placeholder: str
    storage_state: str = ""
    login_command: tuple[str, ...] = ()
    reset_url: str = ""
    reset_method: str = "POST"
    reset_command: tuple[str, ...] = ()
    reset_timeout_s: float = 600.0

    @property
    def resettable(self) -> bool:
        return bool(self.reset_url or self.reset_command)


STATE_KEYS = ("storage_state", "login_command", "reset_url", "reset_method", "reset_command", "reset_timeout_s")


def _site_state(placeholder: str, obj: dict[str, Any], where: str, base: Path) -> SiteState | None:
    """The SiteState of a config object (None without any of its keys); ValueError naming the bad key."""
    if not any(k in obj for k in STATE_KEYS):
        return None
    fields: dict[str, Any] = {}
    for key in ("storage_state", "reset_url", "reset_method"):
        if obj.get(key) is not None:
            if not isinstance(obj[key], str) or not obj[key]:
                raise ValueError(f"{where}.{key}: expected a non-empty string")
            fields[key] = obj[key]
    for key in ("login_command", "reset_command"):
        if obj.get(key) is not None:
            v = obj[key]
            if not isinstance(v, list) or not v or not all(isinstance(a, str) for a in v):
                raise ValueError(f"{where}.{key}: expected a command as a list of strings (argv)")
            fields[key] = tuple(v)
    if obj.get("reset_timeout_s") is not None:
        v = obj["reset_timeout_s"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ValueError(f"{where}.reset_timeout_s: expected a positive number of seconds")
        fields["reset_timeout_s"] = float(v)
    method = fields.get("reset_method", "POST").upper()
    if method not in ("GET", "POST", "PUT"):
        raise ValueError(f"{where}.reset_method: expected GET, POST or PUT, not {fields['reset_method']!r}")
    fields["reset_method"] = method
    if "storage_state" in fields:
        fields["storage_state"] = str((base / fields["storage_state"]).resolve())
    return SiteState(placeholder=placeholder, **fields)


def _from_file(path: str) -> tuple[dict[str, str], dict[str, SiteState]]:
    """The file's placeholder -> base URL and placeholder -> SiteState."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{FILE_VAR}={path}: cannot be read as JSON: {exc}") from None
    base = Path(path).resolve().parent
    urls: dict[str, str] = {}
    states: dict[str, SiteState] = {}
    if isinstance(data, dict) and isinstance(data.get("environments"), dict):  # WebArena-Verified's config
        for key, env in data["environments"].items():
            if not isinstance(env, dict):
                continue
            if env.get("urls"):
                idx = env.get("active_url_idx") or 0
                u = env["urls"]
                urls[key] = str(u[idx] if 0 <= idx < len(u) else u[0])
            state = _site_state(key, env, f"{FILE_VAR}={path}: environments.{key}", base)
            if state:
                states[key] = state
        return urls, states
    if not isinstance(data, dict):
        raise ValueError(f"{FILE_VAR}={path}: expected an object of placeholder -> base URL strings (or objects)")
    for key, value in data.items():
        if isinstance(value, str):
            urls[key] = value
        elif isinstance(value, dict):
            if value.get("url") is not None:
                if not isinstance(value["url"], str):
                    raise ValueError(f"{FILE_VAR}={path}: {key}.url: expected a string")
                urls[key] = value["url"]
            state = _site_state(key, value, f"{FILE_VAR}={path}: {key}", base)
            if state:
                states[key] = state
        else:
            raise ValueError(f"{FILE_VAR}={path}: {key}: expected a base URL string or an object")
    return urls, states


def placeholder_of(site: str) -> str:
    """A WebArena ``sites`` name's placeholder: ``shopping_admin`` -> ``__SHOPPING_ADMIN__``."""
    return f"__{site.strip().upper()}__"


class SiteMap:
    """Placeholder -> base URL, from the environment (``env``: os.environ unless given)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = os.environ if env is None else env
        self.file, self.states = _from_file(self.env[FILE_VAR]) if self.env.get(FILE_VAR) else ({}, {})

    def state(self, placeholder: str) -> SiteState | None:
        """How the site's state is managed (login, reset), None when the configuration says nothing of it."""
        return self.states.get(placeholder)

    def url(self, placeholder: str) -> str | None:
        name = placeholder.strip("_")
        for value in (self.env.get(f"WEBENV_SITE_{name}"), self.file.get(placeholder),
                      self.env.get(f"WA_{name}"), self.env.get(f"VWA_{name}")):
            if value:
                return value.rstrip("/")
        return None

    def substitute(self, value: Any, where: str) -> Any:
        """``value`` (a string, or lists / objects of them) with every placeholder replaced by its base URL;
        raises UnmappedPlaceholder naming the first one without a mapping."""
        if isinstance(value, str):
            def repl(m: re.Match[str]) -> str:
                url = self.url(m.group(0))
                if url is None:
                    raise UnmappedPlaceholder(where, m.group(0))
                return url
            return PLACEHOLDER.sub(repl, value)
        if isinstance(value, list):
            return [self.substitute(v, where) for v in value]
        if isinstance(value, dict):
            return {k: self.substitute(v, where) for k, v in value.items()}
        return value
