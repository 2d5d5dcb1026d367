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
(`tasks/x.yaml:7: success_criteria[1].selector: required`), not just "invalid task".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from webenv.sites.catalog import DOMAIN, split_of
from webenv.sites.tasks import difficulty_of
from webenv.v1 import common_pb2 as pb

TOP_FIELDS = {"name", "description", "start_url", "success_criteria", "max_steps", "timeout_seconds", "category", "kind"}
CRITERION_FIELDS = {
    "url_contains": ({"value"}, {"any_step"}),
    "dom_contains": ({"selector"}, {"condition", "text", "any_step"}),
    "category_match": ({"value"}, set()),
}
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

    def err(self, node: yaml.Node, field: str, problem: str) -> YamlTaskError:
        return YamlTaskError(self.path, node.start_mark.line + 1, field, problem)

    def mapping(self, node: yaml.Node, field: str, allowed: set[str]) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, field or "document", "must be a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for k, v in node.value:
            key = self.loader.construct_object(k)
            name = f"{field}.{key}" if field else str(key)
            if key not in allowed:
                raise self.err(k, name, f"unknown field (allowed: {', '.join(sorted(allowed))})")
            if key in out:
                raise self.err(k, name, "duplicate field")
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


def _convert(doc: _Doc, root: yaml.Node, index: int) -> pb.Task:
    top = doc.mapping(root, "", TOP_FIELDS)
    for req in ("name", "description", "success_criteria"):
        if req not in top:
            raise doc.err(root, req, "required field is missing")
    name = str(doc.value(top["name"][1], "name", str))
    if not name.strip() or any(ch.isspace() for ch in name):
        raise doc.err(top["name"][1], "name", "must be a non-empty identifier without spaces")
    description = str(doc.value(top["description"][1], "description", str))
    start_url = ""
    if "start_url" in top:
        start_url = str(doc.value(top["start_url"][1], "start_url", str))
        if urlsplit(start_url).scheme not in ("http", "https") or not urlsplit(start_url).hostname:
            raise doc.err(top["start_url"][1], "start_url", f"must be an http(s) URL, got {start_url!r}")
    max_steps = 0
    if "max_steps" in top:
        max_steps = int(doc.value(top["max_steps"][1], "max_steps", int))  # type: ignore[arg-type]
        if max_steps <= 0:
            raise doc.err(top["max_steps"][1], "max_steps", "must be > 0")
    timeout = 0.0
    if "timeout_seconds" in top:
        timeout = float(doc.value(top["timeout_seconds"][1], "timeout_seconds", (int, float)))  # type: ignore[arg-type]
        if timeout <= 0:
            raise doc.err(top["timeout_seconds"][1], "timeout_seconds", "must be > 0")
    kind = pb.TASK_KIND_NAVIGATION
    if "kind" in top:
        k = str(doc.value(top["kind"][1], "kind", str))
        if k not in KINDS:
            raise doc.err(top["kind"][1], "kind", f"must be one of {', '.join(KINDS)}, got {k!r}")
        kind = KINDS[k]
    category = str(doc.value(top["category"][1], "category", str)) if "category" in top else ""

    crit_node = top["success_criteria"][1]
    if not isinstance(crit_node, yaml.SequenceNode) or not crit_node.value:
        raise doc.err(crit_node, "success_criteria", "must be a non-empty list")
    task_id = f"yaml/{name}"
    rubric = pb.Rubric(rubric_id=task_id, version=1)
    group = rubric.groups.add(group_id="success", description=description)
    for i, node in enumerate(crit_node.value):
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
        fields = doc.mapping(node, field, required | optional | {"type"})
        for r in sorted(required):
            if r not in fields:
                raise doc.err(node, f"{field}.{r}", f"required for type {ctype}")
        get = {k: doc.value(v, f"{field}.{k}", bool if k == "any_step" else str) for k, (_, v) in fields.items() if k != "type"}
        if ctype == "url_contains":
            crit = pb.Criterion(url=pb.UrlCriterion(mode=pb.MATCH_MODE_CONTAINS, value=str(get["value"]),
                                                    any_step=bool(get.get("any_step", False))))
            desc = f"The URL contains {get['value']}"
        elif ctype == "dom_contains":
            cond = str(get.get("condition", ""))
            if cond:
                try:
                    compile(cond, "<condition>", "eval")
                except SyntaxError as exc:
                    raise doc.err(fields["condition"][1], f"{field}.condition", f"not a valid expression: {exc.msg}") from None
            crit = pb.Criterion(page=pb.PageCriterion(css_selector=str(get["selector"]), text=str(get.get("text", "")),
                                                      condition=cond, step_index=-1, any_step=bool(get.get("any_step", False))))
            desc = f"An element {get['selector']} exists" + (f" with {cond}" if cond else "")
        else:
            crit = pb.Criterion(category=pb.CategoryCriterion(category=str(get["value"])))
            desc = f"The category is {get['value']}"
            category = category or str(get["value"])
        group.facts.add(fact_id=f"success.{i}", description=desc, criterion=crit)
    host = (urlsplit(start_url).hostname or "") if start_url else ""
    family = host.split("-", 1)[0] if host.endswith("." + DOMAIN) and "-" in host else ""
    return pb.Task(
        task_id=task_id, source=pb.TASK_SOURCE_YAML, kind=kind, instruction=description, start_url=start_url,
        site=host, family=family, split=split_of(host) if host else pb.SPLIT_UNSPECIFIED,
        difficulty=difficulty_of(len(group.facts)), rubric=rubric, max_steps=max_steps, timeout_seconds=timeout,
        category=category, metadata={"yaml_file": str(doc.path), "yaml_index": str(index)},
    )


def load_file(path: str | Path) -> list[pb.Task]:
    """Every task of a YAML file (several documents separated by `---` allowed)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    loader = yaml.SafeLoader(text)
    out: list[pb.Task] = []
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            out.append(_convert(_Doc(path, loader), node, index))
            index += 1
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise YamlTaskError(path, line, "syntax", str(exc.problem or exc.context)) from None
    finally:
        loader.dispose()
    return out


def load_dirs(dirs: list[str | Path]) -> list[pb.Task]:
    out: list[pb.Task] = []
    for d in dirs:
        for p in sorted(Path(d).rglob("*.y*ml")):
            out.extend(load_file(p))
    return out
