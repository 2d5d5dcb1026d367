"""Where a benchmark's sites are: WebArena-style placeholders (``__SHOPPING__``, ``__GITLAB__``, ...) to base URLs.

One configuration, read when a benchmark task file is loaded:

- ``WEBENV_SITE_<NAME>`` (``WEBENV_SITE_SHOPPING=http://127.0.0.1:7770``) for the placeholder ``__<NAME>__``;
- else the file ``WEBENV_BENCHMARK_SITES`` names: JSON, either ``{"__SHOPPING__": "http://...", ...}`` or
  WebArena-Verified's own config (``{"environments": {"__SHOPPING__": {"urls": [...], "active_url_idx": 0}}}``);
- else BrowserGym's names: ``WA_<NAME>`` (WebArena) and ``VWA_<NAME>`` (VisualWebArena).

A task that names a placeholder none of these maps is refused before anything runs, the message naming the
placeholder and the variable that would map it (:class:`UnmappedPlaceholder`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
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


def _from_file(path: str) -> dict[str, str]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{FILE_VAR}={path}: cannot be read as JSON: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("environments"), dict):  # WebArena-Verified's config
        out = {}
        for key, env in data["environments"].items():
            urls = env.get("urls") if isinstance(env, dict) else None
            if urls:
                idx = env.get("active_url_idx") or 0
                out[key] = str(urls[idx] if 0 <= idx < len(urls) else urls[0])
        return out
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError(f"{FILE_VAR}={path}: expected an object of placeholder -> base URL strings")
    return dict(data)


class SiteMap:
    """Placeholder -> base URL, from the environment (``env``: os.environ unless given)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = os.environ if env is None else env
        self.file = _from_file(self.env[FILE_VAR]) if self.env.get(FILE_VAR) else {}

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
