"""Determinism, split by website, scale of the default catalog, and the shapes tasks promise."""

from __future__ import annotations

import subprocess
import sys

import yaml
from starlette.testclient import TestClient
from webenv.sites.catalog import SiteCatalog, stricter_split
from webenv.sites.state import StateStore
from webenv.sites.tasks import site_tasks
from webenv.sites.web import SitesApp
from webenv.sites.world import build_world
from webenv.splits import split_of
from webenv.v1 import common_pb2 as pb


def _pages(cat: SiteCatalog, host: str) -> list[str]:
    site = cat.get(host)
    assert site is not None
    client = TestClient(SitesApp(cat, StateStore()))
    paths = ["/", f"/{site.family.path}?sort=value_desc&page=2", f"/{site.family.path}/{site.items[5].id}", "/help"]
    return [client.get(p, headers={"host": host}, follow_redirects=False).text for p in paths]


def test_same_seed_same_sites_pages_and_tasks() -> None:
    a, b = SiteCatalog(40, seed=7), SiteCatalog(40, seed=7)
    for sa, sb in zip(a.sites, b.sites, strict=True):
        assert (sa.host, sa.name, sa.look, sa.items, sa.users) == (sb.host, sb.name, sb.look, sb.items, sb.users)
        assert [t.SerializeToString(deterministic=True) for t in site_tasks(sa)] == \
            [t.SerializeToString(deterministic=True) for t in site_tasks(sb)]
    for host in ("shop-0002.web.test", "bank-0001.web.test", "wiki-0004.web.test"):
        assert _pages(a, host) == _pages(b, host)


def test_other_seed_other_content_same_split() -> None:
    a, c = SiteCatalog(16, seed=0), SiteCatalog(16, seed=1)
    assert [s.items[0].title for s in a.sites] != [s.items[0].title for s in c.sites]
    assert [s.split for s in a.sites] == [s.split for s in c.sites]  # split depends on the host alone


def test_sites_differ_in_look_and_wording() -> None:
    cat = SiteCatalog(200, seed=0)
    for fam in {s.family.name for s in cat.sites}:
        sites = [s for s in cat.sites if s.family.name == fam]
        assert len({int(s.look["layout"]) for s in sites}) == 3
        assert len({s.name for s in sites}) > len(sites) * 0.8
        assert len({s.words["search"] for s in sites}) >= 3


def test_split_leakage_is_zero() -> None:
    world = build_world(count=200, with_miniwob=True)
    split_by_site: dict[str, set[int]] = {}
    for t in world.tasks.tasks:
        split_by_site.setdefault(t.site, set()).add(t.split)
        if t.site:  # the host's split, or a stricter one from the site's builder (test_sites_builders.py)
            assert t.split == stricter_split(split_of(t.site), t.split)
    assert all(len(v) == 1 for v in split_by_site.values())
    splits = {t.split for t in world.tasks.tasks if t.source == pb.TASK_SOURCE_SYNTHETIC}
    assert splits == {pb.SPLIT_TRAIN, pb.SPLIT_VALIDATION, pb.SPLIT_TEST}


def test_default_catalog_scale_and_task_shapes() -> None:
    world = build_world()  # the defaults the service runs with
    assert len(world.sites.sites) >= 1000
    synthetic = [t for t in world.tasks.tasks if t.source == pb.TASK_SOURCE_SYNTHETIC]
    assert len(synthetic) >= 20_000
    stats = world.tasks.stats()
    assert len([f for f in stats["family"] if f != "miniwob" and f != "-"]) >= 8
    for t in synthetic[:3000]:
        n = sum(len(g.facts) for g in t.rubric.groups)
        expected = pb.DIFFICULTY_EASY if n <= 3 else pb.DIFFICULTY_MEDIUM if n <= 6 else pb.DIFFICULTY_HARD
        assert t.difficulty == expected, t.task_id
        assert t.oracle and t.oracle[-1].HasField("answer")
        assert all(a.WhichOneof("kind") in ("click", "fill", "select", "answer") for a in t.oracle)
        for a in t.oracle:
            kind = a.WhichOneof("kind")
            if kind != "answer":
                assert getattr(a, kind).target.WhichOneof("ref") == "selector"
        gids = {g.group_id for g in t.rubric.groups}
        for sub in t.subtasks:
            assert set(sub.group_ids) < gids and sub.instruction
    assert {pb.DIFFICULTY_EASY, pb.DIFFICULTY_MEDIUM, pb.DIFFICULTY_HARD} <= {t.difficulty for t in synthetic}
    assert len({t.instruction for t in synthetic}) > 0.95 * len(synthetic)


def test_cli_stats_and_export(tmp_path) -> None:
    env = {"WEBENV_SITES_COUNT": "8", "WEBENV_SITES_MINIWOB": "false", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "webenv.sites", "stats"], env=env, capture_output=True, text=True, check=True)
    assert '"sites": 8' in out.stdout
    target = tmp_path / "tasks.jsonl"
    subprocess.run([sys.executable, "-m", "webenv.sites", "export-tasks", "--format", "jsonl", "--out", str(target)],
                   env=env, capture_output=True, text=True, check=True)
    lines = target.read_text().splitlines()
    assert len(lines) > 100 and '"task_id"' in lines[0]
    ytarget = tmp_path / "tasks.yaml"
    subprocess.run([sys.executable, "-m", "webenv.sites", "export-tasks", "--format", "yaml", "--out", str(ytarget),
                    "--source", "yaml"], env=env, capture_output=True, text=True, check=True)
    docs = list(yaml.safe_load_all(ytarget.read_text()))
    assert docs and all(d["source"] == "TASK_SOURCE_YAML" for d in docs)
    bad = subprocess.run([sys.executable, "-m", "webenv.sites", "stats"], env={**env, "WEBENV_SITES_COUNT": "many"},
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "WEBENV_SITES_COUNT" in bad.stderr
