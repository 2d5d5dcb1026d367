"""Tasks in the seed's YAML format, converted to rubric tasks.

```yaml
name: find_product_under_50
description: Find any product under $50 in the Electronics category
start_url: http://shop-0000.web.test/products      # our addition: where the session opens
success_criteria:
  - type: url_contains
    value: /products/
  - type: dom_contains
    selector: .price
    condition: "float(text.strip('$')) < 50"
  - type: category_match
    value: Electronics
max_steps: 20
timeout_seconds: 60
```
Files are parsed to PyYAML nodes first so every error names the file, line and field
(`tasks/x.yaml:7: success_criteria[1].selector: required`), not just "invalid task", and every problem of
every file is collected (`TaskFileError.errors`) so one run of a loader reports them all, one line each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import yaml
from webenv.envcontract import web_url_problem
from webenv.splits import SYNTHETIC_DOMAIN as DOMAIN
from webenv.splits import split_of
from webenv.taskfiles.common import TaskFileError, difficulty_of, load_folders
from webenv.v1 import common_pb2 as pb

TOP_FIELDS = {"name", "description", "start_url", "success_criteria", "max_steps", "timeout_seconds", "category", "kind"}
CRITERION_FIELDS = {
    "url_contains": ({"value"}, {"any_step"}),
    "dom_contains": ({"selector"}, {"condition", "text", "any_step"}),
    "category_match": ({"value"}, set()),
}
T = TypeVar("T")
KINDS = {"information": pb.TASK_KIND_INFORMATION, "navigation": pb.TASK_KIND_NAVIGATION,
         "transaction": pb.TASK_KIND_TRANSACTION, "open_ended": pb.TASK_KIND_OPEN_ENDED}


class YamlTaskError(ValueError):
    """A malformed YAML task; the message starts with `file:line:` and names the field."""

    def __init__(self, path: str | Path, line: int, field: str, problem: str) -> None:
        super().__init__(f"{path}:{line}: {field}: {problem}")
        self.path, self.line, self.field, self.problem = str(path), line, field, problem


@dataclass
class _Doc:
    path: Path
    loader: yaml.SafeLoader
    problems: list[YamlTaskError] = field(default_factory=list)

    def err(self, node: yaml.Node, field: str, problem: str) -> YamlTaskError:
        return YamlTaskError(self.path, node.start_mark.line + 1, field, problem)

    def attempt(self, fn: Callable[[], T], default: T) -> T:
        """``fn()``, or ``default`` with its problem recorded: one bad field does not hide the next."""
        try:
            return fn()
        except YamlTaskError as exc:
            self.problems.append(exc)
            return default

    def mapping(self, node: yaml.Node, field: str, allowed: set[str]) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """The mapping's fields; unknown and duplicate fields are recorded as problems and left out."""
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, field or "document", "must be a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for k, v in node.value:
            key = self.loader.construct_object(k)
            name = f"{field}.{key}" if field else str(key)
            if key not in allowed:
                self.problems.append(self.err(k, name, f"unknown field (allowed: {', '.join(sorted(allowed))})"))
            elif key in out:
                self.problems.append(self.err(k, name, "duplicate field"))
            else:
                out[str(key)] = (k, v)
        return out

    def value(self, node: yaml.Node, field: str, typ: type | tuple[type, ...]) -> object:
        if not isinstance(node, yaml.ScalarNode):
            raise self.err(node, field, "must be a single value")
        val = self.loader.construct_object(node)
        if isinstance(val, bool) and typ is not bool:
            raise self.err(node, field, f"must be {_tname(typ)}, got a boolean")
        if not isinstance(val, typ):
            raise self.err(node, field, f"must be {_tname(typ)}, got {type(val).__name__} {val!r}")
        return val


def _tname(typ: type | tuple[type, ...]) -> str:
    names = [t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,))]
    return {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false"}.get(names[0], names[0]) \
        if len(names) == 1 else " or ".join(names)


def _convert(doc: _Doc, root: yaml.Node, index: int) -> pb.Task | None:
    """The task of one document, or None with every problem found recorded in ``doc.problems``."""
    before = len(doc.problems)
    top = doc.mapping(root, "", TOP_FIELDS)
    for req in ("name", "description", "success_criteria"):
        if req not in top:
            doc.problems.append(doc.err(root, req, "required field is missing"))

    def name_of() -> str:
        name = str(doc.value(top["name"][1], "name", str))
        if not name.strip() or any(ch.isspace() for ch in name):
            raise doc.err(top["name"][1], "name", "must be a non-empty identifier without spaces")
        return name

    def start_url_of() -> str:
        url = str(doc.value(top["start_url"][1], "start_url", str))
        problem = web_url_problem(url)  # the farm's rule for start URLs, so a bad one fails here, not per episode
        if problem:
            name = top["name"][1].value if "name" in top and isinstance(top["name"][1], yaml.ScalarNode) else "?"
            raise doc.err(top["start_url"][1], "start_url", f"task {name!r}: start URL {url[:200]!r} {problem}")
        return url.strip()

    def positive(key: str, typ: type | tuple[type, ...]) -> float:
        v = doc.value(top[key][1], key, typ)
        if v <= 0:  # type: ignore[operator]
            raise doc.err(top[key][1], key, "must be > 0")
        return v  # type: ignore[return-value]

    def kind_of() -> int:
        k = str(doc.value(top["kind"][1], "kind", str))
        if k not in KINDS:
            raise doc.err(top["kind"][1], "kind", f"must be one of {', '.join(KINDS)}, got {k!r}")
        return KINDS[k]

    name = doc.attempt(name_of, "") if "name" in top else ""
    description = doc.attempt(lambda: str(doc.value(top["description"][1], "description", str)), "") \
        if "description" in top else ""
    start_url = doc.attempt(start_url_of, "") if "start_url" in top else ""
    max_steps = int(doc.attempt(lambda: positive("max_steps", int), 0)) if "max_steps" in top else 0
    timeout = float(doc.attempt(lambda: positive("timeout_seconds", (int, float)), 0)) if "timeout_seconds" in top else 0.0
    kind = doc.attempt(kind_of, pb.TASK_KIND_NAVIGATION) if "kind" in top else pb.TASK_KIND_NAVIGATION
    category = doc.attempt(lambda: str(doc.value(top["category"][1], "category", str)), "") if "category" in top else ""

    task_id = f"yaml/{name}"
    rubric = pb.Rubric(rubric_id=task_id, version=1)
    group = rubric.groups.add(group_id="success", description=description)
    crit_node = top["success_criteria"][1] if "success_criteria" in top else None
    if crit_node is not None and (not isinstance(crit_node, yaml.SequenceNode) or not crit_node.value):
        doc.problems.append(doc.err(crit_node, "success_criteria", "must be a non-empty list"))
    elif crit_node is not None:
        for i, node in enumerate(crit_node.value):
            fact = doc.attempt(lambda i=i, node=node: _criterion(doc, node, i), None)
            if fact is not None:
                crit, desc, cat = fact
                category = category or cat
                group.facts.add(fact_id=f"success.{i}", description=desc, criterion=crit)
    if len(doc.problems) > before:
        return None
    host = (urlsplit(start_url).hostname or "") if start_url else ""
    family = host.split("-", 1)[0] if host.endswith("." + DOMAIN) and "-" in host else ""
    return pb.Task(
        task_id=task_id, source=pb.TASK_SOURCE_YAML, kind=kind, instruction=description, start_url=start_url,
        site=host, family=family, split=split_of(host) if host else pb.SPLIT_UNSPECIFIED,
        difficulty=difficulty_of(len(group.facts)), rubric=rubric, max_steps=max_steps, timeout_seconds=timeout,
        category=category, metadata={"yaml_file": str(doc.path), "yaml_index": str(index)},
    )


def _criterion(doc: _Doc, node: yaml.Node, i: int) -> tuple[pb.Criterion, str, str]:
    """One success criterion: (criterion, fact description, category it names)."""
    field = f"success_criteria[{i}]"
    if not isinstance(node, yaml.MappingNode):
        raise doc.err(node, field, "must be a mapping with a `type`")
    keys = {str(doc.loader.construct_object(k)): v for k, v in node.value}
    if "type" not in keys:
        raise doc.err(node, f"{field}.type", "required field is missing")
    ctype = str(doc.value(keys["type"], f"{field}.type", str))
    if ctype not in CRITERION_FIELDS:
        raise doc.err(keys["type"], f"{field}.type", f"must be one of {', '.join(CRITERION_FIELDS)}, got {ctype!r}")
    required, optional = CRITERION_FIELDS[ctype]
    before = len(doc.problems)
    fields = doc.mapping(node, field, required | optional | {"type"})
    for r in sorted(required):
        if r not in fields:
            doc.problems.append(doc.err(node, f"{field}.{r}", f"required for type {ctype}"))
    get = {k: doc.attempt(lambda k=k, v=v: doc.value(v, f"{field}.{k}", bool if k == "any_step" else str), None)
           for k, (_, v) in fields.items() if k != "type"}
    if ctype == "dom_contains" and get.get("condition"):
        try:
            compile(str(get["condition"]), "<condition>", "eval")
        except SyntaxError as exc:
            doc.problems.append(doc.err(fields["condition"][1], f"{field}.condition", f"not a valid expression: {exc.msg}"))
    if len(doc.problems) > before:
        return pb.Criterion(), "", ""
    if ctype == "url_contains":
        crit = pb.Criterion(url=pb.UrlCriterion(mode=pb.MATCH_MODE_CONTAINS, value=str(get["value"]),
                                                any_step=bool(get.get("any_step", False))))
        return crit, f"The URL contains {get['value']}", ""
    if ctype == "dom_contains":
        cond = str(get.get("condition") or "")
        crit = pb.Criterion(page=pb.PageCriterion(css_selector=str(get["selector"]), text=str(get.get("text") or ""),
                                                  condition=cond, step_index=-1, any_step=bool(get.get("any_step", False))))
        return crit, f"An element {get['selector']} exists" + (f" with {cond}" if cond else ""), ""
    crit = pb.Criterion(category=pb.CategoryCriterion(category=str(get["value"])))
    return crit, f"The category is {get['value']}", str(get["value"])


def load_file(path: str | Path) -> list[pb.Task]:
    """Every task of a YAML file (several documents separated by `---` allowed).

    Raises TaskFileError with every problem of every document (a syntax error ends the file's reading).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError([YamlTaskError(path, 0, "file", f"cannot be read: {exc}")]) from None
    loader = yaml.SafeLoader(text)
    out: list[pb.Task] = []
    problems: list[YamlTaskError] = []
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            doc = _Doc(path, loader)
            try:
                task = _convert(doc, node, index)
            except YamlTaskError as exc:  # the document as a whole is unusable (not a mapping)
                doc.problems.append(exc)
                task = None
            problems.extend(doc.problems)
            if task is not None:
                out.append(task)
            index += 1
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        problems.append(YamlTaskError(path, line, "syntax", str(exc.problem or exc.context)))
    finally:
        loader.dispose()
    if problems:
        raise TaskFileError(problems)
    return out


def load_dirs(dirs: list[str | Path]) -> list[pb.Task]:
    """Every task of every YAML file under ``dirs``; TaskFileError lists the problems of all files at once."""
    return load_folders(dirs, "*.y*ml", load_file)
