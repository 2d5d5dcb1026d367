"""Deployment artefacts: deploy/docker/Dockerfile, docker-compose.yml, deploy/k8s, deploy/prometheus, deploy/grafana,
docs/operations.md.

Everything here runs offline and fast (a few seconds): YAML/JSON parsing, the port and address conventions,
`WEBENV_*` names checked against the services' real settings classes, Kubernetes manifests validated against the
OpenAPI schemas shipped by the `kubernetes-validate` package, Prometheus configuration and rules checked (and
unit-tested) with `promtool`, and every PromQL expression checked to name only metrics the services export.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from concurrent import futures
from pathlib import Path

import pytest
import yaml
from webenv.testing import load_test_module

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"  # every service image, one target each
OPERATIONS = ROOT / "docs" / "operations.md"

# The port conventions (docs/architecture: "Default ports").
PORTS = {
    "browser": (50051, 9451),
    "policy": (50052, 9452),
    "worldmodel": (50053, 9453),
    "judge": (50054, 9454),
    "sites": (50055, 9455),
    "collector": (50056, 9456),
    "trainer": (50057, 9457),
    "gateway": (50058, 9458),
    "openenv": (50059, 9459),
}
SITES_HTTP_PORT = 8800
GATEWAY_HTTP_PORT = 8080
SERVICES = sorted(PORTS)
K8S_VERSIONS = ("1.30", "1.37")  # oldest supported (native gRPC probes GA since 1.27) and newest schema shipped

PROMTOOL = shutil.which("promtool") or "promtool"  # Debian package `prometheus` (deploy/apt-packages.txt)


# --- helpers ---------------------------------------------------------------------------------------------------


@functools.cache
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    base: str  # a stage's name or ${PYTHON_IMAGE}
    text: str  # its instructions, continuation lines joined, comments dropped


def parse_stages(text: str) -> tuple[dict[str, str], dict[str, Stage]]:
    """(the ARGs before the first FROM with their defaults, the stages by name in the file's order)."""
    lines = [ln for ln in text.replace("\\\n", " ").splitlines() if ln.strip() and not ln.startswith("#")]
    first = next(i for i, ln in enumerate(lines) if ln.startswith("FROM "))
    assert all(ln.startswith("ARG ") for ln in lines[:first]), "before the first FROM only ARG"
    global_args = {k: v.strip('"') for k, _, v in (ln.removeprefix("ARG ").partition("=") for ln in lines[:first])}
    starts = [i for i, ln in enumerate(lines) if ln.startswith("FROM ")] + [len(lines)]
    stages: dict[str, Stage] = {}
    for begin, end in itertools.pairwise(starts):
        m = re.fullmatch(r"FROM (\S+) AS (\S+)", lines[begin])
        assert m, f"every stage is named: {lines[begin]}"
        assert m.group(2) not in stages, f"stage {m.group(2)} defined twice"
        stages[m.group(2)] = Stage(m.group(2), m.group(1), "\n".join(lines[begin + 1:end]))
    return global_args, stages


@functools.cache
def service_stages() -> dict[str, Stage]:
    return parse_stages(DOCKERFILE.read_text())[1]


def stage_chain(name: str) -> list[Stage]:
    """The stage and its ancestors, the base image's child first (``name`` last)."""
    stages, chain = service_stages(), []
    while name in stages:
        chain.insert(0, stages[name])
        name = stages[name].base
    assert name == "${PYTHON_IMAGE}", f"a chain ends at {name}"
    return chain


def image_text(name: str) -> str:
    """What a service's image is made of: its target's chain from the base image (not the build stages)."""
    return "\n".join(s.text for s in stage_chain(name))


def build_text(name: str) -> str:
    """The build stages whose /opt/venv the target copies, with their ancestors."""
    sources = re.findall(r"^COPY --from=(\S+) /opt/venv /opt/venv$", service_stages()[name].text, re.M)
    assert len(sources) == 1, f"{name}: one COPY --from=<build stage> /opt/venv"
    return "\n".join(s.text for s in stage_chain(sources[0]))


def service_targets() -> list[str]:
    """The service images: the stages built FROM the shared runtime stage."""
    return [s.name for s in service_stages().values() if s.base == "runtime"]


@functools.cache
def settings_fields(service: str) -> set[str]:
    """Field names of the service's settings class (WEBENV_<FIELD>), from the real pydantic model."""
    from webenv.runtime.config import ServiceSettings

    module = importlib.import_module(f"webenv.{service}.config")  # every service is installed: none may be missing
    classes = [c for c in vars(module).values()
               if isinstance(c, type) and issubclass(c, ServiceSettings) and c is not ServiceSettings]
    assert classes, f"no ServiceSettings subclass in webenv.{service}.config"
    return {name for c in classes for name in c.model_fields}


def common_fields() -> set[str]:
    from webenv.runtime.config import ServiceSettings

    return set(ServiceSettings.model_fields)


def check_env_names(service: str, names: list[str], where: str) -> None:
    known = settings_fields(service)
    bad = [n for n in names if n.startswith("WEBENV_") and n.removeprefix("WEBENV_").lower() not in known]
    assert not bad, f"{where}: {service} reads no such settings (typo? not implemented?): {bad}"


def resolve_compose_value(value: object) -> str:
    """`${VAR:-default}` -> default, `${VAR}` -> "" (what compose does with an empty environment)."""
    return re.sub(r"\$\{\w+(?::?-([^}]*))?\}", lambda m: m.group(1) or "", str(value))


def validate_settings(service: str, env: dict[str, str], monkeypatch, tmp_path: Path) -> None:
    """Instantiate the service's settings classes with exactly ``env``: the values must pass its validation.

    Model folders (`/models/...`) are stood in for by empty models (a config.json) under ``tmp_path``.
    """
    from pydantic import ValidationError
    from webenv.runtime.config import ServiceSettings, describe_validation_error

    module = importlib.import_module(f"webenv.{service}.config")
    classes = [c for c in vars(module).values()
               if isinstance(c, type) and issubclass(c, ServiceSettings) and c is not ServiceSettings]
    monkeypatch.chdir(tmp_path)  # no stray .env file
    for key in [k for k in os.environ if k.startswith("WEBENV_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if value.startswith("/models/"):
            folder = tmp_path / value.lstrip("/")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.json").write_text("{}")
            value = str(folder)
        monkeypatch.setenv(key, value)
    for cls in classes:
        try:
            cls()
        except ValidationError as exc:
            pytest.fail(f"{service}: settings rejected:\n{describe_validation_error(exc)}")


def dockerfile_env(service: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in image_text(service).splitlines():
        if line.startswith("ENV "):
            env.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    return env


# --- metric names ----------------------------------------------------------------------------------------------

_METRIC_DEF = re.compile(r"\b(Counter|Gauge|Histogram|Summary)\(\s*[\"']([A-Za-z_:][A-Za-z0-9_:]*)[\"']")


@functools.cache
def exported_metrics() -> frozenset[str]:
    """Series names the services expose: prometheus_client definitions in services/*/src (the sdk included)."""
    names = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
    sources = [p for p in (ROOT / "services").glob("*/src/**/*.py") if "/webenv/v1/" not in p.as_posix()]
    for path in sources:
        for kind, name in _METRIC_DEF.findall(path.read_text()):
            if kind == "Counter":
                base = name.removesuffix("_total")
                names |= {f"{base}_total", f"{base}_created"}
            elif kind in ("Histogram", "Summary"):
                names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum", f"{name}_created"}
                if kind == "Summary":
                    names.add(name)
            else:
                names.add(name)
    return frozenset(names)


# Labels every scraped series gets from Prometheus (prometheus.yml, prometheus-k8s.yml).
TARGET_LABELS = {"job", "instance", "app", "namespace", "pod", "node"}


@functools.cache
def metric_labels() -> dict[str, frozenset[str]]:
    """Exposed series name -> label names, from the metric objects themselves (imports the defining modules)."""
    from prometheus_client import REGISTRY

    for path in (ROOT / "services").glob("*/src/webenv/**/*.py"):
        if "/webenv/v1/" in path.as_posix() or not _METRIC_DEF.search(path.read_text()):
            continue
        service = path.relative_to(ROOT / "services").parts[0]
        module = ".".join(path.relative_to(ROOT / "services" / service / "src").with_suffix("").parts)
        importlib.import_module(module)
    out: dict[str, frozenset[str]] = {}
    for collector in list(REGISTRY._collector_to_names):  # the only way to list label names
        name, kind = getattr(collector, "_name", None), getattr(collector, "_type", None)
        if not name or not name.startswith(("webenv_", "grpc_")):
            continue
        labels = frozenset(collector._labelnames)
        if kind == "counter":
            out[f"{name}_total"] = labels
        elif kind in ("histogram", "summary"):
            out |= {f"{name}_bucket": labels | {"le"}, f"{name}_count": labels, f"{name}_sum": labels}
        else:
            out[name] = labels
    return out


_DOCUMENTED_VALUES = re.compile(r"\(([a-z0-9_]+(?:,\s*[a-z0-9_]+)+)\)")


@functools.cache
def documented_label_values() -> dict[str, frozenset[str]]:
    """Metric name (without _total/_bucket/... suffixes) -> label values its help text lists in parentheses, e.g.
    "Training jobs by outcome (accepted, succeeded, failed, stopped)." for values the code derives (enum names)."""
    from prometheus_client import REGISTRY

    metric_labels()  # imports every module that defines metrics
    out: dict[str, frozenset[str]] = {}
    for collector in list(REGISTRY._collector_to_names):
        name, doc = getattr(collector, "_name", None), getattr(collector, "_documentation", "")
        if name and name.startswith("webenv_"):
            out[name] = frozenset(v.strip() for group in _DOCUMENTED_VALUES.findall(doc) for v in group.split(","))
    return out


def promql_label_problems(expr: str, extra: dict[str, frozenset[str]]) -> list[str]:
    """Label names in selectors and in by/without/on/ignoring clauses that the metrics involved do not have."""
    known = {**metric_labels(), **extra, "up": frozenset()}
    problems = []
    e = re.sub(r"\$\{?\w+\}?", "x", expr)
    for metric, matchers in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}", e):
        if metric not in known:
            continue
        for label in re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", re.sub(r'"(?:[^"\\]|\\.)*"', '""', matchers)):
            if label not in known[metric] | TARGET_LABELS:
                problems.append(f"{metric} has no label {label!r}")
    used = promql_metric_names(expr)
    available = set(TARGET_LABELS).union(*(known.get(m, frozenset()) for m in used))
    for clause in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e):
        for label in filter(None, (x.strip() for x in clause.split(","))):
            if label not in available:
                problems.append(f"no metric of the expression has label {label!r}")
    return problems


_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "by", "without", "on",
             "ignoring", "inf", "nan", "atan2"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (functions, keywords, labels, strings and durations removed)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)   # strings
    e = re.sub(r"\$\{?\w+\}?", "", e)                                            # Grafana variables
    e = re.sub(r"\{[^}]*\}", "", e)                                              # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                                             # ranges and subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def test_metric_names_are_collected_from_the_code():
    names = exported_metrics()
    for expected in ("grpc_server_handled_total", "grpc_server_handling_seconds_bucket",
                     "webenv_browser_sessions_active", "webenv_collector_spool_rows",
                     "webenv_collector_episodes_finished_total", "webenv_judge_evaluations_total",
                     "webenv_policy_act_seconds_count", "webenv_worldmodel_predictions_total",
                     "webenv_sites_http_requests_total"):
        assert expected in names
    assert "webenv_collector_step_phase_seconds" not in names  # a histogram is only queried with a suffix


def test_metric_labels_come_from_the_metric_objects():
    labels = metric_labels()
    assert labels["grpc_server_handled_total"] == {"grpc_service", "grpc_method", "grpc_type", "grpc_code"}
    assert labels["webenv_collector_step_phase_seconds_bucket"] == {"phase", "le"}
    assert set(labels) <= exported_metrics()
    assert promql_label_problems('sum by (phase) (rate(webenv_collector_steps_total{phase="x"}[5m]))', {}) == [
        "webenv_collector_steps_total has no label 'phase'", "no metric of the expression has label 'phase'"]


GRPC_TYPES = {"unary", "server_stream", "client_stream", "bidi_stream"}


def promql_label_values(expr: str) -> list[tuple[str, str, str]]:
    """(metric, label, value) for every plain value a selector compares a label with (regex alternatives split)."""
    out = []
    for metric, matchers in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}", expr):
        for label, op, value in re.findall(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', matchers):
            values = value.split("|") if op in ("=~", "!~") else [value]
            out += [(metric, label, v) for v in values if re.fullmatch(r"[A-Za-z0-9_]+", v)]
    return out


@functools.cache
def service_source(service: str) -> str:
    return "\n".join(p.read_text() for p in (ROOT / "services" / service / "src").rglob("*.py"))


def label_value_problems(expr: str) -> list[str]:
    """Label values no code could produce: gRPC codes and types by their definitions, webenv_<service>_* label
    values must appear as string literals in that service's source or be listed in the metric's help text."""
    import grpc

    problems = []
    for metric, label, value in promql_label_values(expr):
        if label in TARGET_LABELS:
            continue
        if label == "grpc_code":
            ok = value in grpc.StatusCode.__members__
        elif label == "grpc_type":
            ok = value in GRPC_TYPES
        elif metric.startswith("webenv_"):
            service = metric.split("_")[1]
            documented = documented_label_values()
            base = re.sub(r"_(total|created|bucket|count|sum)$", "", metric)
            ok = (re.search(rf"[\"']{re.escape(value)}[\"']", service_source(service)) is not None
                  or value in documented.get(metric, documented.get(base, frozenset())))
        else:
            continue
        if not ok:
            problems.append(f"{metric}{{{label}=...{value!r}}}: no such value in the code")
    return problems


def test_label_values_are_checked_against_the_code():
    assert label_value_problems('webenv_collector_episodes_finished_total{outcome=~"passed|failed"}') == []
    assert label_value_problems('webenv_browser_browser_restarts_total{reason="crash"}') == []
    assert label_value_problems('grpc_server_handled_total{grpc_code="UNAVAILABLE", grpc_type="unary"}') == []
    assert label_value_problems('grpc_server_handled_total{grpc_code="Unavailable"}') != []
    assert label_value_problems('webenv_judge_llm_calls_total{result="nonsense_value_x"}') != []
    # values derived from an enum (JobState names), listed in the metric's help text
    assert label_value_problems('webenv_trainer_jobs_total{outcome="failed"}') == []
    assert label_value_problems('webenv_trainer_jobs_created{outcome=~"succeeded|stopped"}') == []
    assert label_value_problems('webenv_trainer_jobs_total{outcome="exploded"}') != []


def test_promql_metric_name_extraction():
    expr = ('histogram_quantile(0.95, sum by (job, le) (rate(grpc_server_handling_seconds_bucket'
            '{job=~"$job", grpc_service!~"grpc[.].*"}[$__rate_interval]))) / ignoring(phase) group_left '
            'sum(rate(webenv_collector_steps_total[5m])) > 0.5 and on(job) up == 0 or vector(0)')
    assert promql_metric_names(expr) == {"grpc_server_handling_seconds_bucket", "webenv_collector_steps_total", "up"}


# --- docker-compose --------------------------------------------------------------------------------------------


def test_compose_parses_and_has_the_platform():
    services = compose()["services"]
    expected = {*SERVICES, "redis", "clickhouse", "prometheus", "grafana"}
    assert expected <= set(services), f"missing from docker-compose.yml: {expected - set(services)}"


def test_every_deployed_service_has_a_target():
    """One Dockerfile for every service image (deploy/docker/Dockerfile, `--target <name>`): each service with a
    `python -m webenv.<name>` entry point that compose deploys has its target, and no target is a service nobody runs."""
    mains = {p.parents[0].name for p in (ROOT / "services").glob("*/src/webenv/*/__main__.py")
             if p.parents[0].name == p.parents[3].name}
    deployed = mains & set(compose()["services"])
    assert deployed == set(SERVICES), f"services with a __main__ in compose: {sorted(deployed)}"
    assert sorted(service_targets()) == SERVICES, f"{DOCKERFILE}: targets {service_targets()}"
    assert not list((ROOT / "services").glob("*/Dockerfile")), "the per-service Dockerfiles are gone: one file"


def test_compose_builds_every_service_from_its_target():
    services = compose()["services"]
    for name in SERVICES:
        build = services[name].get("build")
        assert build, f"{name}: no build section"
        assert build["context"] == ".", f"{name}: build context must be the repository root (protos/, services/sdk)"
        assert build["dockerfile"] == DOCKERFILE.relative_to(ROOT).as_posix(), f"{name}: dockerfile"
        assert build["target"] == name and name in service_stages(), f"{name}: target {build.get('target')}"


def test_dockerfile_writes_the_shared_stages_once():
    """The stub generation, the sdk install, the package sources and the runtime user are written once, in shared
    stages; only the sdk's torch variant repeats the sdk install (torch's layer has to come before the code)."""
    text = DOCKERFILE.read_text()
    stages = service_stages()
    for name in ("build", "stubs", "sdk", "sdk-torch", "runtime"):
        assert name in stages, f"no shared stage {name}"
    assert stages["build"].base == stages["runtime"].base == "${PYTHON_IMAGE}"
    assert {stages[n].base for n in ("stubs", "sdk", "sdk-torch")} == {"build"}
    for once in ("protos/generate.sh", "COPY protos/ protos/", "COPY services/sdk/ services/sdk/", "useradd",
                 "ARG CA_CERT", "python -m venv /opt/venv", "PYTHONUNBUFFERED=1"):
        assert len(re.findall(rf"^(?!#).*{re.escape(once)}", text, re.M)) == 1, f"{once!r} written more than once"
    assert "protos/generate.sh" in stages["stubs"].text and "useradd --uid 10001" in stages["runtime"].text
    assert text.count("RUN pip install ./services/sdk\n") == 2  # sdk and sdk-torch
    for name in SERVICES:
        build = re.search(r"^COPY --from=(\S+) /opt/venv", stages[name].text, re.M).group(1)
        assert build == f"build-{name}" and stages[build].base in ("sdk", "sdk-torch"), f"{name}: built from {build}"
        assert re.search(rf"^COPY services/{name}/ services/{name}/$", stages[build].text, re.M), name
        assert "COPY --from=stubs /src/services/sdk/ services/sdk/" in build_text(name), f"{name}: generated stubs"
        # nothing else of the build stages reaches the image
        assert not re.search(r"^COPY --from=(?!build-)", image_text(name), re.M), f"{name}: copies from a build stage"


@pytest.mark.parametrize("name", SERVICES)
def test_dockerfile_fits_the_deploy_contract(name):
    """What compose and the manifests rely on: uid 10001, exec-form entrypoint (SIGTERM reaches Python)."""
    text = image_text(name)
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1] == "10001", f"{name}: run as the non-root user 10001"
    assert re.search(r"^RUN useradd --uid 10001 ", text, re.M)
    entrypoints = re.findall(r"^ENTRYPOINT .*", text, re.M)
    assert entrypoints == [f'ENTRYPOINT ["python", "-m", "webenv.{name}"]'], f"{name}: exec-form ENTRYPOINT"
    assert dockerfile_env(name)["PYTHONUNBUFFERED"] == "1"
    assert dockerfile_env(name)["PATH"].startswith("/opt/venv/bin:")


@pytest.mark.parametrize("name", SERVICES)
def test_compose_ports_follow_the_conventions(name):
    grpc_port, metrics_port = PORTS[name]
    svc = compose()["services"][name]
    env = svc["environment"]
    assert env["WEBENV_GRPC_PORT"] == str(grpc_port)
    assert env["WEBENV_METRICS_PORT"] == str(metrics_port)
    published = {int(str(p).rsplit(":", 1)[-1].split("/")[0]) for p in svc.get("ports", [])}
    assert grpc_port in published
    assert str(metrics_port) in [str(p) for p in svc.get("expose", [])]
    if name == "sites":
        assert env["WEBENV_HTTP_PORT"] == str(SITES_HTTP_PORT) and SITES_HTTP_PORT in published
    if name == "gateway":
        assert env["WEBENV_HTTP_PORT"] == str(GATEWAY_HTTP_PORT) and GATEWAY_HTTP_PORT in published
    image_env = dockerfile_env(name)  # the image's own defaults agree too
    assert image_env["WEBENV_GRPC_PORT"] == str(grpc_port)
    assert image_env["WEBENV_METRICS_PORT"] == str(metrics_port)
    (expose,) = re.findall(r"^EXPOSE (.*)$", image_text(name), re.M)
    assert {str(grpc_port), str(metrics_port)} <= set(expose.split()), f"{name}: EXPOSE {expose}"
    if "WEBENV_HTTP_PORT" in image_env:
        assert image_env["WEBENV_HTTP_PORT"] in expose.split()


@pytest.mark.parametrize("name", SERVICES)
def test_compose_env_names_are_settings_the_service_reads(name):
    check_env_names(name, list(compose()["services"][name]["environment"]), "docker-compose.yml")


@pytest.mark.parametrize("name", SERVICES)
def test_compose_env_values_pass_the_services_validation(name, monkeypatch, tmp_path):
    env = {k: resolve_compose_value(v) for k, v in compose()["services"][name]["environment"].items()}
    validate_settings(name, env, monkeypatch, tmp_path)


def test_compose_peer_addresses_point_at_the_right_ports():
    services = compose()["services"]
    checked = 0
    for name in SERVICES:
        for key, value in services[name]["environment"].items():
            if not (key.endswith("_ADDR") and key.startswith("WEBENV_")):
                continue
            for address in str(value).split(","):
                host, port = address.strip().rsplit(":", 1)
                assert host in services, f"{name}.{key}={value}: no compose service {host}"
                expected = SITES_HTTP_PORT if key == "WEBENV_FARM_SITES_HTTP_ADDR" else PORTS[host][0]
                assert int(port) == expected, f"{name}.{key}={value}: {host} listens on {expected}"
                checked += 1
    assert checked >= 6
    assert services["clickhouse"]["image"].startswith("clickhouse/clickhouse-server")


def online_env() -> dict[str, str]:
    lines = (DEPLOY / "docker" / "online.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def test_compose_runs_offline_and_online():
    """Offline (no registry): no infrastructure service starts by default and the collector needs none of them
    (embedded chDB, no Redis); deploy/docker/online.env turns them on and points the collector at them."""
    services = compose()["services"]
    infra = ("redis", "clickhouse", "prometheus", "grafana")
    for name in infra:
        assert "infra" in services[name].get("profiles", []), f"{name}: behind the infra profile"
    for name in SERVICES:
        assert not set(services[name].get("depends_on", {})) & set(infra), f"{name} waits for optional infrastructure"
    collector = services["collector"]["environment"]
    assert resolve_compose_value(collector["WEBENV_STORE_URL"]) == "" and resolve_compose_value(collector["WEBENV_REDIS_URL"]) == ""
    online = online_env()
    assert set(online["COMPOSE_PROFILES"].split(",")) >= {"infra"}
    assert online["WEBENV_STORE_URL"] == "http://clickhouse:8123"
    assert online["WEBENV_REDIS_URL"].startswith("redis://redis:6379")
    assert "${WEBENV_STORE_URL" in collector["WEBENV_STORE_URL"] and "${WEBENV_REDIS_URL" in collector["WEBENV_REDIS_URL"]
    # The same options work with the public image and the local one (deploy/docker/redis), which prepend redis-server.
    assert services["redis"]["command"][0].startswith("--")
    assert "${WEBENV_REDIS_IMAGE" in services["redis"]["image"]


def test_compose_passes_the_build_arguments():
    args = compose()["x-build-args"]
    for name in SERVICES:
        assert compose()["services"][name]["build"]["args"] == args, f"{name}: build args"
    for arg in ("PYTHON_IMAGE", "TORCH_INDEX", "PIP_INDEX_URL", "CA_CERT"):
        assert arg in args
    assert resolve_compose_value(args["PYTHON_IMAGE"]) == parse_stages(DOCKERFILE.read_text())[0]["PYTHON_IMAGE"]


def test_compose_healthchecks_and_shutdown():
    services = compose()["services"]
    for name in SERVICES:
        svc = services[name]
        test = svc["healthcheck"]["test"]
        assert "grpc_health" in " ".join(test), f"{name}: healthcheck must ask grpc.health.v1"
        grace = float(svc["environment"]["WEBENV_GRACE_SECONDS"])
        stop = int(str(svc["stop_grace_period"]).rstrip("s"))
        assert stop > grace, f"{name}: stop_grace_period must exceed WEBENV_GRACE_SECONDS"
    for name in ("redis", "clickhouse"):
        assert "healthcheck" in services[name]


def test_compose_monitoring_mounts():
    services = compose()["services"]
    prom_volumes = services["prometheus"]["volumes"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in prom_volumes
    graf = services["grafana"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in graf["volumes"]
    dash_mount = next(v for v in graf["volumes"] if v.startswith("./deploy/grafana/dashboards:"))
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/webenv.yml").read_text())["providers"][0]
    assert dash_mount.split(":")[1] == provider["options"]["path"]
    assert graf["environment"]["WEBENV_PROMETHEUS_URL"] == "http://prometheus:9090"


def stage_default(stage: str, arg: str) -> str:
    m = re.search(rf'^ARG {arg}="?([^"\n]*)"?$', service_stages()[stage].text, re.M)
    assert m, f"{stage}: no ARG {arg}"
    return m.group(1)


def test_dockerfiles_share_their_base():
    """One base for every image (PYTHON_IMAGE: the public python:3.11 bookworm image or the local one of
    `make base-image`), also for the infrastructure images of deploy/docker/<name>/Dockerfile."""
    files = [DOCKERFILE, *(DEPLOY / "docker").glob("*/Dockerfile")]
    assert len(files) >= 2
    for path in files:
        text = path.read_text()
        m = re.search(r'^ARG PYTHON_IMAGE="?([^"\n]*)"?$', text, re.M)
        assert m, f"{path}: no ARG PYTHON_IMAGE"
        assert re.fullmatch(r"python:3\.11(\.\d+)?-slim-bookworm(@sha256:[0-9a-f]{64})?", m.group(1)), f"{path}: {m.group(1)}"
        # FROM the base or an earlier stage, nothing else
        known = {"${PYTHON_IMAGE}"}
        for base, name in re.findall(r"^FROM (\S+)(?: AS (\S+))?$", text, re.M):
            assert base in known, f"{path}: FROM {base}"
            known.add(name)
        assert len(re.findall(r"^FROM ", text, re.M)) == len(re.findall(r"^FROM \S+(?: AS \S+)?$", text, re.M))


def test_dockerfile_build_arguments_and_torch_layer():
    """The package-source arguments in the shared build stage; torch from TORCH_INDEX (CPU build by default) in a
    layer before any code for the images that always have it, so the builder keeps it across code changes."""
    stages = service_stages()
    for arg in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "CA_CERT"):
        assert stage_default("build", arg) == "", f"ARG {arg}"
    torch_stages = [s for s in stages.values() if "torch==" in s.text]
    assert {s.name for s in torch_stages} == {"sdk-torch", "build-judge"}
    for stage in torch_stages:
        assert stage_default(stage.name, "TORCH_INDEX") == "https://download.pytorch.org/whl/cpu", stage.name
        assert '--index-url "$TORCH_INDEX"' in stage.text, f"{stage.name}: torch from TORCH_INDEX"
    torch = stages["sdk-torch"].text
    assert torch.index('RUN pip install --index-url "$TORCH_INDEX"') < torch.index("COPY "), "torch's layer first"
    for name in ("policy", "trainer", "worldmodel"):
        assert stages[f"build-{name}"].base == "sdk-torch", f"{name}: torch's layer"
    for name in set(SERVICES) - {"policy", "trainer", "worldmodel"}:
        assert stages[f"build-{name}"].base == "sdk", f"{name}: no torch layer"
    for name in ("judge", "policy", "worldmodel"):  # GPU images: EXTRAS=[vllm]; judge: [transformers]
        assert stage_default(f"build-{name}", "EXTRAS") == "", name
        assert f'"./services/{name}${{EXTRAS}}"' in stages[f"build-{name}"].text, f"{name}: EXTRAS installed"
    # the legacy builder builds every stage above the target: torch's stage only above the images that have it
    order = list(stages)
    assert order.index("sdk-torch") > max(order.index(n) for n in ("sites", "browser", "collector", "judge"))


def test_judge_image_has_torch_only_when_asked():
    text = service_stages()["build-judge"].text
    assert stage_default("build-judge", "EXTRAS") == ""
    assert re.search(r'case "\$EXTRAS" in \*transformers\*\) pip install', text)
    deps = tomllib.loads((ROOT / "services/judge/pyproject.toml").read_text())["project"]
    assert not [d for d in deps["dependencies"] if d.startswith(("torch", "transformers"))]
    # the extra is the LLM layer's transformers backend, whose own extra pins torch's CPU build
    assert deps["optional-dependencies"]["transformers"] == ["webenv-llm[transformers]"]
    llm = tomllib.loads((ROOT / "libs/llm/pyproject.toml").read_text())["project"]
    assert any(d.startswith("torch==") for d in llm["optional-dependencies"]["transformers"])
    assert "EXTRAS_judge := [transformers]" in (ROOT / "Makefile").read_text(), "make install: the judge's tests need it"


def test_browser_image_has_what_playwrights_driver_needs():
    """Playwright's node driver links libatomic.so.1, which slim bases lack: without it the farm crash-loops."""
    install = next(ln for ln in image_text("browser").splitlines() if "apt-get install" in ln)
    for pkg in ("chromium", "libatomic1", "fonts-dejavu-core"):
        assert pkg in install.split()
    assert dockerfile_env("browser")["WEBENV_FARM_CHROMIUM_PATH"] == "/usr/lib/chromium/chromium"
    others = [n for n in SERVICES if n != "browser" and "apt-get" in image_text(n)]
    assert not others, f"Debian packages only in the browser image: {others}"


def test_images_keep_their_home_and_volumes():
    """uid 10001 has a home directory where the service writes one (browser, collector, trainer), volumes belong
    to it, and the collector and trainer declare theirs."""
    for name in SERVICES:
        has_home = "mkhomedir_helper webenv" in image_text(name)
        assert has_home is (name in ("browser", "collector", "trainer")), f"{name}: home directory"
    assert re.search(r"^VOLUME /data$", image_text("collector"), re.M)
    assert re.search(r"chown 10001 /data\b", image_text("collector"))
    assert re.search(r'^VOLUME \["/data", "/checkpoints"\]$', image_text("trainer"), re.M)


def test_collector_image_carries_the_webenv_command():
    """`webenv` in a pod (docs/operations.md): the collector image installs webenv-cli, which declares the command."""
    assert re.search(r"^RUN pip install .*\./services/cli\b", service_stages()["build-collector"].text, re.M)
    scripts = tomllib.loads((ROOT / "services/cli/pyproject.toml").read_text())["project"]["scripts"]
    assert "webenv" in scripts


def test_compose_validates_with_docker_compose():
    tool = shutil.which("docker-compose")
    cmd = [tool] if tool else None
    if cmd is None and shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        cmd = ["docker", "compose"] if probe.returncode == 0 else None
    assert cmd, "neither docker-compose nor the docker compose plugin is installed: run `make install`"
    for extra in ([], ["--env-file", str(DEPLOY / "docker" / "online.env")]):
        run = subprocess.run([*cmd, "-f", str(COMPOSE_FILE), *extra, "--profile", "worldmodel", "config", "-q"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr


def test_compose_checkpoints_are_shared_by_trainer_and_policy():
    services = compose()["services"]
    trainer, policy = services["trainer"], services["policy"]
    path = trainer["environment"]["WEBENV_TRAINER_CHECKPOINT_DIR"]
    assert policy["environment"]["WEBENV_POLICY_CHECKPOINT_DIR"] == path
    assert f"checkpoints:{path}" in trainer["volumes"]
    assert f"checkpoints:{path}:ro" in policy["volumes"]
    assert "checkpoints" in compose()["volumes"]
    data_dir = trainer["environment"]["WEBENV_TRAINER_DATA_DIR"]
    assert any(v.endswith(f":{data_dir}") and not v.startswith((".", "/", "$")) for v in trainer["volumes"]), \
        "job records need a named volume (jobs resume from them after a restart)"
    assert trainer["depends_on"]["collector"] == {"condition": "service_healthy"}
    # The image's own mount points belong to uid 10001, so new named volumes start writable for the trainer.
    text = image_text("trainer")
    assert re.search(rf"chown 10001 .*{re.escape(data_dir)}\b.*{re.escape(path)}\b", text)


def test_compose_healthcheck_command_asks_grpc_health():
    """Run the compose healthcheck's Python one-liner against a real health server: 0 SERVING, 1 otherwise."""
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    test = compose()["x-grpc-healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        env = {"WEBENV_GRPC_PORT": str(port), "PATH": "/usr/bin:/bin"}
        for status, rc in ((health_pb2.HealthCheckResponse.SERVING, 0), (health_pb2.HealthCheckResponse.NOT_SERVING, 1)):
            servicer.set("", status)
            run = subprocess.run([sys.executable, "-c", test[3]], env=env, capture_output=True, text=True, timeout=30)
            assert run.returncode == rc, run.stderr
    finally:
        server.stop(0)
    with socket.socket() as s:  # nothing listening: unhealthy
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    run = subprocess.run([sys.executable, "-c", test[3]], env={"WEBENV_GRPC_PORT": str(free)},
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0


# --- Prometheus ------------------------------------------------------------------------------------------------


def test_prometheus_scrapes_every_service():
    config = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    assert config["global"]["scrape_interval"] == "15s"
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    for name, (_, metrics_port) in PORTS.items():
        job = jobs[name]
        if "dns_sd_configs" in job:  # optional services: discovered by their compose DNS name
            assert [(d["names"], d["port"]) for d in job["dns_sd_configs"]] == [([name], metrics_port)]
            assert {"target_label": "app", "replacement": "webenv"} in job["relabel_configs"]
        else:
            targets = [t for sc in job["static_configs"] for t in sc["targets"]]
            assert targets == [f"{name}:{metrics_port}"]
            assert all(sc["labels"]["app"] == "webenv" for sc in job["static_configs"])
    assert "profiles" in compose()["services"]["worldmodel"] and "dns_sd_configs" in jobs["worldmodel"]
    k8s = yaml.safe_load((DEPLOY / "prometheus/prometheus-k8s.yml").read_text())
    assert k8s["global"]["scrape_interval"] == "15s"


def test_promtool_check_config():
    run = subprocess.run([PROMTOOL, "check", "config", "prometheus.yml"], cwd=DEPLOY / "prometheus",
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_check_config_kubernetes():
    run = subprocess.run([PROMTOOL, "check", "config", "prometheus-k8s.yml"], cwd=DEPLOY / "prometheus",
                         capture_output=True, text=True, timeout=30)
    if run.returncode and "kubernetes_sd_configs not found" in run.stdout + run.stderr:
        pytest.skip("this promtool is built without Kubernetes service discovery (Debian's package)")
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_check_and_unit_test_rules():
    prom = DEPLOY / "prometheus"
    run = subprocess.run([PROMTOOL, "check", "rules", "alerts.yml"], cwd=prom, capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 0, run.stdout + run.stderr
    run = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=prom, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def alert_rules() -> list[dict]:
    groups = yaml.safe_load((DEPLOY / "prometheus/alerts.yml").read_text())["groups"]
    return [r for g in groups for r in g["rules"]]


def test_alerts_cover_the_basics_and_use_exported_metrics():
    rules = alert_rules()
    records = {r["record"] for r in rules if "record" in r}
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    for name in ("WebenvServiceDown", "WebenvHighErrorRatio", "WebenvSlowRPCs", "WebenvBrowserCrashes",
                 "WebenvCollectorSpoolGrowing", "WebenvTrainerJobsFailing"):
        assert name in alerts
    known = exported_metrics() | records
    recorded = {r["record"]: frozenset(re.findall(r"by \(([^)]*)\)", r["expr"])[0].replace(" ", "").split(","))
                for r in rules if "record" in r}
    for rule in rules:
        unknown = promql_metric_names(rule["expr"]) - known
        assert not unknown, f"{rule.get('alert') or rule.get('record')}: unknown metrics {unknown}"
        problems = promql_label_problems(rule["expr"], recorded) + label_value_problems(rule["expr"])
        assert not problems, f"{rule.get('alert') or rule.get('record')}: {problems}"
    for alert in alerts.values():
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}
        assert alert["annotations"]["summary"]


# --- Grafana ---------------------------------------------------------------------------------------------------


@functools.cache
def dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted((DEPLOY / "grafana/dashboards").glob("*.json"))}


def panel_exprs(board: dict) -> list[tuple[str, str]]:
    out = []
    for panel in board["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                out.append((inner["title"], target["expr"]))
    return out


def test_grafana_datasource_has_a_fixed_uid():
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())["datasources"]
    assert [d["uid"] for d in ds] == ["webenv-prometheus"]
    assert ds[0]["type"] == "prometheus"


def test_dashboards_parse_and_reference_the_datasource():
    boards = dashboards()
    assert {"overview.json", "rollouts.json", "training.json"} <= set(boards)
    uids = [b["uid"] for b in boards.values()]
    assert len(set(uids)) == len(uids)
    for name, board in boards.items():
        ids = [p["id"] for p in board["panels"]]
        assert len(set(ids)) == len(ids), f"{name}: duplicate panel ids"
        for panel in board["panels"]:
            pos = panel["gridPos"]
            assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, f"{name}: {panel['title']} off the grid"
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "webenv-prometheus", f"{name}: {panel['title']}"
                assert panel["targets"], f"{name}: {panel['title']} has no query"


def test_dashboard_queries_use_exported_metrics():
    known = exported_metrics()
    total = 0
    for name, board in dashboards().items():
        for title, expr in panel_exprs(board):
            names = promql_metric_names(expr)
            assert names, f"{name}: {title}: no metric in {expr!r}"
            unknown = names - known
            assert not unknown, f"{name}: panel {title!r} uses metrics no service exports: {unknown}"
            problems = promql_label_problems(expr, {}) + label_value_problems(expr)
            assert not problems, f"{name}: panel {title!r}: {problems}"
            total += 1
    assert total >= 40
    overview = " ".join(e for _, e in panel_exprs(dashboards()["overview.json"]))
    for metric in ("grpc_server_handled_total", "grpc_server_handling_seconds_bucket"):
        assert metric in overview
    training = " ".join(e for _, e in panel_exprs(dashboards()["training.json"]))
    for metric in ("webenv_trainer_jobs_running", "webenv_trainer_steps_total", "webenv_trainer_examples_per_second",
                   "webenv_trainer_tokens_per_second", "webenv_trainer_checkpoints_total",
                   "webenv_trainer_episodes_read_total", "webenv_trainer_jobs_total"):
        assert metric in training
    rollouts = " ".join(e for _, e in panel_exprs(dashboards()["rollouts.json"]))
    for metric in ("webenv_collector_episodes_finished_total", "webenv_collector_steps_total",
                   "webenv_collector_step_phase_seconds", "webenv_collector_spool_rows",
                   "webenv_collector_store_lag_seconds", "webenv_browser_sessions_active",
                   "webenv_browser_queue_wait_seconds"):
        assert metric in rollouts


def test_dashboard_queries_parse_as_promql(tmp_path):
    rules = []
    for board in dashboards().values():
        for _, expr in panel_exprs(board):
            expr = expr.replace("$__rate_interval", "5m").replace("$job", ".*")
            rules.append({"record": f"dashboard:expr_{len(rules)}", "expr": expr})
    path = tmp_path / "dashboards_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    run = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stdout + run.stderr


def test_generated_files_are_up_to_date():
    for script in (DEPLOY / "grafana/generate.py", DEPLOY / "k8s/generate.py"):
        module = load_test_module(script, f"_gen_{script.parent.name}")
        assert module.main(["--check"]) == 0, f"run: python {script.relative_to(ROOT)}"


# --- Kubernetes ------------------------------------------------------------------------------------------------


@functools.cache
def k8s_docs() -> dict[str, list[dict]]:
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
            for p in sorted((DEPLOY / "k8s/base").glob("*.yaml"))}


def k8s_objects() -> list[dict]:
    return [d for name, docs in k8s_docs().items() if name != "kustomization.yaml" for d in docs]


def find(kind: str, name: str) -> dict:
    matches = [d for d in k8s_objects() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def workload(name: str) -> dict:
    matches = [d for d in k8s_objects() if d["kind"] in ("Deployment", "StatefulSet") and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"no Deployment/StatefulSet {name}"
    return matches[0]


@pytest.fixture
def kv(monkeypatch):
    """kubernetes_validate with its schema files read once (validate() re-reads and re-parses them per call)."""
    import kubernetes_validate as kv  # requirements-dev.txt: offline Kubernetes schemas

    monkeypatch.setattr(kv.utils, "schema_contents", functools.cache(kv.utils.schema_contents))
    return kv


def test_k8s_manifests_validate_against_the_schemas(kv):
    objects = k8s_objects()
    assert len(objects) >= 20
    for version in K8S_VERSIONS:
        for doc in objects:
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError as exc:
                pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} (Kubernetes {version}): "
                            f"{'.'.join(map(str, exc.path))}: {exc.message}")


def test_k8s_kustomization_lists_every_file():
    (kustomization,) = k8s_docs()["kustomization.yaml"]
    files = {p.name for p in (DEPLOY / "k8s/base").glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    assert kustomization["namespace"] == "webenv"
    assert all(d["metadata"].get("namespace", "webenv") == "webenv" for d in k8s_objects())


@pytest.mark.parametrize("name", SERVICES)
def test_k8s_service_conventions(name):
    grpc_port, metrics_port = PORTS[name]
    wl = workload(name)
    pod = wl["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    # native gRPC probes on the gRPC port
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[kind]["grpc"]["port"] == grpc_port, f"{name}: {kind}"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["grpc"] == grpc_port and ports["metrics"] == metrics_port
    # resources and security
    assert set(c["resources"]) == {"requests", "limits"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert tmp and any(v["name"] == tmp[0]["name"] and "emptyDir" in v for v in pod["volumes"])
    # graceful shutdown: the pod's grace covers preStop + WEBENV_GRACE_SECONDS
    config = find("ConfigMap", f"webenv-{name}")["data"]
    assert config["WEBENV_GRPC_PORT"] == str(grpc_port) and config["WEBENV_METRICS_PORT"] == str(metrics_port)
    prestop = int(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > prestop + float(config["WEBENV_GRACE_SECONDS"])
    refs = [e.get("configMapRef", {}).get("name") for e in c["envFrom"]]
    assert refs[:2] == ["webenv-common", f"webenv-{name}"]
    # headless Service for client-side load balancing, selecting this workload's pods
    svc = find("Service", name)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= wl["spec"]["template"]["metadata"]["labels"].items()
    svc_ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    assert svc_ports["grpc"] == grpc_port and svc_ports["metrics"] == metrics_port
    if name == "sites":
        assert svc_ports["http"] == SITES_HTTP_PORT
    if name == "gateway":
        assert svc_ports["http"] == GATEWAY_HTTP_PORT
    # labels Prometheus' pod discovery keeps (prometheus-k8s.yml)
    labels = wl["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/part-of"] == "webenv" and labels["app.kubernetes.io/name"] == name


@pytest.mark.parametrize("name", SERVICES)
def test_k8s_env_names_are_settings_the_service_reads(name):
    names = list(find("ConfigMap", f"webenv-{name}")["data"])
    names += [e["name"] for e in workload(name)["spec"]["template"]["spec"]["containers"][0].get("env", [])]
    check_env_names(name, names, "deploy/k8s")
    common = find("ConfigMap", "webenv-common")["data"]
    bad = [k for k in common if k.startswith("WEBENV_") and k.removeprefix("WEBENV_").lower() not in common_fields()]
    assert not bad, f"webenv-common: not common settings: {bad}"


@pytest.mark.parametrize("name", SERVICES)
def test_k8s_env_values_pass_the_services_validation(name, monkeypatch, tmp_path):
    env = {**find("ConfigMap", "webenv-common")["data"], **find("ConfigMap", f"webenv-{name}")["data"]}
    env |= {e["name"]: f"{name}-0" for e in workload(name)["spec"]["template"]["spec"]["containers"][0].get("env", [])}
    validate_settings(name, env, monkeypatch, tmp_path)


def test_k8s_peer_addresses_point_at_services():
    for name in SERVICES:
        for key, value in find("ConfigMap", f"webenv-{name}")["data"].items():
            if key.startswith("WEBENV_") and key.endswith("_ADDR"):
                # dns:///name:port: every replica behind the name (the collector balances over them), which needs a
                # headless Service (its DNS answers with each pod, not one virtual IP)
                replicas = value.startswith("dns:///")
                host, port = value.removeprefix("dns:///").rsplit(":", 1)
                service = find("Service", host)
                assert not replicas or service["spec"].get("clusterIP") == "None", f"{name}: {key}: not headless"
                expected = SITES_HTTP_PORT if key == "WEBENV_FARM_SITES_HTTP_ADDR" else PORTS[host][0]
                assert int(port) == expected, f"{name}: {key}={value}"


def test_k8s_autoscalers():
    browser = find("HorizontalPodAutoscaler", "browser")["spec"]
    assert browser["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "browser"}
    assert any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in browser["metrics"])
    collector = find("HorizontalPodAutoscaler", "collector")["spec"]
    target = collector["scaleTargetRef"]
    assert workload(target["name"])["kind"] == target["kind"]
    external = [m["external"]["metric"]["name"] for m in collector["metrics"] if m["type"] == "External"]
    assert external == ["webenv_collector_queue_depth"] and set(external) <= exported_metrics()


def strategic_merge(base: dict, patch: dict) -> dict:
    """Enough of kustomize's strategic merge for our patches: maps merge, named lists merge by `name`."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = strategic_merge(out[key], value)
        elif isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value) \
                and isinstance(out.get(key), list):
            merged = {item["name"]: item for item in out[key]}
            for item in value:
                merged[item["name"]] = strategic_merge(merged.get(item["name"], {}), item)
            out[key] = list(merged.values())
        else:
            out[key] = copy.deepcopy(value)
    return out


def gpu_variants() -> dict[str, dict]:
    """Workload name -> the base workload with the GPU component's patch applied."""
    component_dir = DEPLOY / "k8s/components/gpu"
    (component,) = [d for d in yaml.safe_load_all((component_dir / "kustomization.yaml").read_text()) if d]
    assert component["kind"] == "Component"
    out = {}
    for entry in component["patches"]:
        (patch,) = [d for d in yaml.safe_load_all((component_dir / entry["path"]).read_text()) if d]
        name = patch["metadata"]["name"]
        out[name] = strategic_merge(workload(name), patch)
    return out


def test_k8s_gpu_component(kv):
    variants = gpu_variants()
    assert set(variants) == {"policy", "worldmodel", "trainer"}
    for name, merged in variants.items():
        for version in K8S_VERSIONS:
            kv.validate(merged, version, strict=True)
        pod = merged["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        assert {"/tmp", "/dev/shm", "/models"} <= mounts
        assert {m["name"] for m in c["volumeMounts"]} <= {v["name"] for v in pod["volumes"]}
        check_env_names(name, [e["name"] for e in c["env"]], "deploy/k8s/components/gpu")


@pytest.mark.parametrize("name", ["policy", "worldmodel", "trainer"])
def test_k8s_gpu_env_values_pass_the_services_validation(name, monkeypatch, tmp_path):
    env = {**find("ConfigMap", "webenv-common")["data"], **find("ConfigMap", f"webenv-{name}")["data"]}
    (c,) = gpu_variants()[name]["spec"]["template"]["spec"]["containers"]
    env |= {e["name"]: e["value"] for e in c["env"] if "value" in e}
    validate_settings(name, env, monkeypatch, tmp_path)


def test_k8s_gpu_trainer_trains_on_cuda():
    (c,) = gpu_variants()["trainer"]["spec"]["template"]["spec"]["containers"]
    assert {"name": "WEBENV_TRAINER_DEVICE", "value": "cuda"} in c["env"]
    assert find("ConfigMap", "webenv-trainer")["data"]["WEBENV_TRAINER_DEVICE"] == "cpu"  # the base: CPU nodes


def mounts_by_path(name: str) -> tuple[dict[str, dict], dict[str, dict]]:
    """(mountPath -> volumeMount, volume name -> volume) of a workload's container."""
    pod = workload(name)["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    return {m["mountPath"]: m for m in c["volumeMounts"]}, {v["name"]: v for v in pod["volumes"]}


def test_k8s_checkpoints_are_shared_by_trainer_and_policy():
    """The trainer publishes checkpoints where every policy pod reads them (PolicyService.LoadCheckpoint)."""
    claim = find("PersistentVolumeClaim", "webenv-checkpoints")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # one writer pod, many reader pods on any node
    dirs = {"trainer": "WEBENV_TRAINER_CHECKPOINT_DIR", "policy": "WEBENV_POLICY_CHECKPOINT_DIR"}
    for name, key in dirs.items():
        path = find("ConfigMap", f"webenv-{name}")["data"][key]
        mounts, volumes = mounts_by_path(name)
        assert path in mounts, f"{name}: {key}={path} is not a mounted volume"
        volume = volumes[mounts[path]["name"]]
        assert volume["persistentVolumeClaim"]["claimName"] == "webenv-checkpoints"
        read_only = name == "policy"
        assert bool(mounts[path].get("readOnly")) is read_only, f"{name}: {path} readOnly must be {read_only}"
        assert bool(volume["persistentVolumeClaim"].get("readOnly")) is read_only


def test_k8s_trainer_keeps_its_jobs_across_restarts():
    """Job records and resume states live on a claim at WEBENV_TRAINER_DATA_DIR; the pod is replaced, not doubled."""
    wl = workload("trainer")
    assert wl["kind"] == "Deployment" and wl["spec"]["replicas"] == 1
    assert wl["spec"]["strategy"] == {"type": "Recreate"}  # a surge pod could not mount the ReadWriteOnce claim
    data_dir = find("ConfigMap", "webenv-trainer")["data"]["WEBENV_TRAINER_DATA_DIR"]
    mounts, volumes = mounts_by_path("trainer")
    claim_name = volumes[mounts[data_dir]["name"]]["persistentVolumeClaim"]["claimName"]
    claim = find("PersistentVolumeClaim", claim_name)
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "/models" in mounts and mounts["/models"]["readOnly"] is True  # base models for CAUSAL_LM jobs
    pod = wl["spec"]["template"]["spec"]
    grace = float(find("ConfigMap", "webenv-trainer")["data"]["WEBENV_GRACE_SECONDS"])
    assert pod["terminationGracePeriodSeconds"] >= 5 + grace + 60, "time for the training thread's resume save"


def test_k8s_network_policies_admit_every_service_and_confine_the_trainer():
    (ingress,) = [d for d in k8s_docs()["network-policies.yaml"] if d["metadata"]["name"] == "webenv-ingress"]
    rules = ingress["spec"]["ingress"]
    grpc_rule = next(r for r in rules if any("podSelector" in f for f in r["from"]))
    metrics_rule = next(r for r in rules if any("namespaceSelector" in f for f in r["from"]))
    for name, (grpc_port, metrics_port) in PORTS.items():
        assert {"protocol": "TCP", "port": grpc_port} in grpc_rule["ports"], f"{name}: gRPC not admitted"
        assert {"protocol": "TCP", "port": metrics_port} in metrics_rule["ports"], f"{name}: metrics not admitted"
    (egress,) = [d for d in k8s_docs()["network-policies.yaml"] if d["metadata"]["name"] == "trainer-egress"]
    assert egress["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "trainer"}
    targets = [(t.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name"), p["port"])
               for rule in egress["spec"]["egress"] for t in rule["to"] for p in rule["ports"]]
    collector_addr = find("ConfigMap", "webenv-trainer")["data"]["WEBENV_COLLECTOR_ADDR"]
    host, port = collector_addr.rsplit(":", 1)
    assert (host, int(port)) in targets, "the trainer must reach the collector it reads from"
    assert {name for name, _ in targets} <= {host, None}, "DNS and the collector only"


# --- docs ------------------------------------------------------------------------------------------------------


def test_operations_doc_covers_settings_alerts_and_dashboards():
    text = OPERATIONS.read_text()
    missing = [f"WEBENV_{f.upper()}" for f in sorted(common_fields()) if f"WEBENV_{f.upper()}" not in text]
    assert not missing, f"docs/operations.md does not document {missing}"
    alerts = [r["alert"] for r in alert_rules() if "alert" in r]
    assert not [a for a in alerts if a not in text], "docs/operations.md: undocumented alerts"
    for board in dashboards().values():
        assert board["title"] in text
    for heading in ("Deploy", "Configuration", "Health", "Metrics", "Alerts", "Scaling", "Shutdown", "Security",
                    "Backups", "Troubleshooting"):
        assert re.search(rf"^#+ .*{heading}", text, re.M | re.I), f"docs/operations.md: no section on {heading}"
