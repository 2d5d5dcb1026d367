"""One's own rubric JSON tasks in the catalog, through the `webenv` command and a real sites service: tasks on a
team's local or intranet hosts are `rubric-json` and are listed by the file they came from."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner
from webenv.cli.commands import common
from webenv.cli.main import app
from webenv.sites.config import Settings
from webenv.sites.service import SitesService


async def test_webenv_tasks_lists_one_files_tasks_on_local_hosts(tmp_path: Path) -> None:
    rdir = tmp_path / "rubric"
    rdir.mkdir()
    (rdir / "intranet.json").write_text(
        '[{"task_id": "wiki-owner", "website": "http://wiki.corp.example:8080/", "task": "Who owns the wiki", '
        '"fact_groups": [{"facts": ["f"]}]}, {"task_id": "local-app", "website": "http://127.0.0.1:3000/", '
        '"task": "Log in", "fact_groups": [{"facts": ["f"]}]}]')
    settings = Settings(host="127.0.0.1", grpc_port=0, metrics_port=0, http_port=0, http_host="127.0.0.1", sites_count=8,
                        log_json=False, sites_rubric_dirs=[str(rdir)], sites_miniwob=False)
    common.console.width = 200

    def invoke(*args: str):
        return CliRunner().invoke(app, list(args))

    async with SitesService(settings) as svc:
        addr = f"127.0.0.1:{svc.port}"
        r = await asyncio.to_thread(invoke, "tasks", "--from-file", "intranet.json", "--sites", addr)
        assert r.exit_code == 0 and "2 tasks match" in r.output, r.output
        assert "rubric/wiki-owner" in r.output and "rubric/local-app" in r.output and "rubric-json" in r.output
        r = await asyncio.to_thread(invoke, "tasks", "--source", "rubric-json", "--limit", "100", "--sites", addr)
        assert r.exit_code == 0 and "rubric/local-app" in r.output, r.output
        r = await asyncio.to_thread(invoke, "tasks", "--from-file", "nowhere.json", "--sites", addr)
        assert r.exit_code == 1 and "filter.task_files" in r.output and "intranet.json" in r.output, r.output
