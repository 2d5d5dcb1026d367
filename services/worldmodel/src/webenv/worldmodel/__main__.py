"""`python -m webenv.worldmodel` / `webenv-worldmodel` serves; `... dataset|train|evaluate|card|conformance|consistency` run the offline commands.

`webenv worldmodel build` runs the offline commands in this order as subprocesses (webenv.cli.wmbuild). Their
modules are imported when a command runs, not before: serving and `--help` do not pay for torch's import.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Literal

import typer
from webenv.runtime.cli import service_app


def _serve() -> None:
    from webenv.runtime import run
    from webenv.worldmodel.app import main
    from webenv.worldmodel.config import Settings

    run(main, Settings, name="webenv-worldmodel")


app = service_app("webenv-worldmodel", "The world model: WorldModelService and the simulated EnvironmentService.",
                  _serve)
cli = app  # the console script (pyproject.toml)

#: Transitions files, as `--data` takes them (repeatable: `--data a.jsonl --data b.jsonl`).
DATA = typer.Option(..., exists=True, dir_okay=False, help="Transitions JSONL file (webenv-worldmodel dataset); repeatable.")


@app.command()
def dataset(
    export: list[str] = typer.Option(..., metavar="LEVEL:AXTREE:MARKDOWN",
                                     help="One run's collection level and its AXTREE and MARKDOWN TRANSITIONS exports, "
                                          "joined by ':' (repeatable)."),
    sites: Path = typer.Option(..., exists=True, dir_okay=False,
                               help="JSON host -> {split, family}, as the task catalog splits them."),
    out: Path = typer.Option(...),
) -> None:
    """Join TRANSITIONS exports into the world model's training data."""
    from collections import Counter

    from webenv.worldmodel.dataset import join_exports, write_transitions

    triples = [e.split(":") for e in export]
    for e, t in zip(export, triples, strict=True):
        if len(t) != 3 or not all(t):
            raise typer.BadParameter(f"{e!r}: expected LEVEL:AXTREE:MARKDOWN", param_hint="--export")
    try:
        hosts = json.loads(sites.read_text())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--sites") from None
    try:
        records = [r for level, ax, md in triples for r in join_exports([ax], [md], hosts, level)]
    except (OSError, ValueError, KeyError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--export") from None
    write_transitions(records, out)
    split = Counter(r.split for r in records)
    typer.echo(json.dumps({"transitions": len(records), "train": split["train"], "validation": split["validation"], "test": split["test"],
                           "sites": len({r.site for r in records}), "out": str(out)}))


@app.command()
def train(
    data: list[Path] = DATA,
    out: str = typer.Option(...),
    init: str = typer.Option("", help="Local model directory to fine-tune (default: from scratch)."),
    reasoning_fraction: float = typer.Option(
        0.0, help="Fraction of examples with a reasoning paragraph before the prediction (WebWorld's injection)."),
    max_lines: int = typer.Option(24, help="Page lines shown in a prompt (around the element acted on)."),
    size: Literal["tiny", "small"] = typer.Option("small"),
    max_len: int = typer.Option(1024),
    batch_size: int = typer.Option(8),
    lr: float = typer.Option(2e-3),
    max_steps: int = typer.Option(1000),
    max_minutes: float = typer.Option(14.0),
    eval_every: int = typer.Option(50),
    seed: int = typer.Option(0),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/checkpoint."),
    device: str = typer.Option("auto"),
    threads: int = typer.Option(1, help="Torch intra-op threads (0 = torch's default)."),
) -> None:
    """Train the world model on its transitions; stops at --max-steps or --max-minutes, whichever comes first."""
    from dataclasses import asdict

    from webenv.worldmodel.train import TrainConfig
    from webenv.worldmodel.train import train as run_training

    cfg = TrainConfig(data=[str(p) for p in data], out=out, init=init, max_lines=max_lines,
                      reasoning_fraction=reasoning_fraction, size=size, max_len=max_len, batch_size=batch_size, lr=lr,
                      max_steps=max_steps, max_minutes=max_minutes, eval_every=eval_every, seed=seed, resume=resume,
                      device=device, threads=threads)
    typer.echo(json.dumps(asdict(run_training(cfg))))


@app.command()
def evaluate(
    data: list[Path] = DATA,
    model: str = typer.Option("", help="Model directory (empty: baselines only)."),
    backend: Literal["transformers", "vllm"] = typer.Option("transformers"),
    limit: int = typer.Option(0, help="Held-out transitions scored (0 = all)."),
    rollout_episodes: int = typer.Option(32, help="Held-out episodes replayed open loop (noisy below ~30)."),
    rollout_steps: int = typer.Option(30),
    mode: Literal["analogy+lm", "analogy", "lm", "rules"] = typer.Option("analogy+lm", help="Who decides page actions."),
    lm_path: str = typer.Option("", help="A Hugging Face causal LM folder scored in WebWorld's format (it decides every "
                                         "page action; --model still gives retrieval's data)."),
    retrieval_context: bool = typer.Option(True, help="With --lm-path: retrieval's prediction goes into the prompt."),
    max_new_tokens: int = typer.Option(256, help="Cap on generated tokens per language-model prediction."),
    hold_out_family: str = typer.Option("", help="Leave-one-family-out: score every website of this family, index "
                                                 "none of them (retrieval only: the language model saw every family)."),
    reasoning: Literal["auto", "on", "off"] = typer.Option(
        "auto", help="The language model reasons first (auto: when trained with reasoning examples)."),
    compare_lm: bool = typer.Option(
        False, "--compare-lm", help="Also score the language model alone, reasoning off and on (on --lm-limit transitions)."),
    lm_limit: int = typer.Option(300),
    split: Literal["test", "validation"] = typer.Option("test", help="Which websites are scored: the held-out (test) "
                                                                    "ones, or the validation builders' (validation)."),
    out: Path = typer.Option(None, help="Write JSON here (and .md and a rollout plot .png next to it)."),
    threads: int = typer.Option(1, help="Torch threads (1 is fastest for tiny models on shared CPUs)."),
) -> None:
    """Fidelity on held-out websites only, against copy-state and lookup baselines; prints the Markdown report."""
    from webenv.worldmodel.dataset import read_transitions
    from webenv.worldmodel.evaluate import evaluate as score
    from webenv.worldmodel.evaluate import plot_rollouts, to_markdown
    from webenv.worldmodel.predict import load_world_model

    try:
        records = read_transitions(data)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--data") from None

    async def run() -> dict:  # the model loads and predicts on one event loop (vLLM's engine is bound to it)
        predictor = await load_world_model(backend, model, threads=threads, mode=mode, max_new_tokens=max_new_tokens,
                                           reason={"auto": None, "on": True, "off": False}[reasoning], lm_path=lm_path,
                                           retrieval_context=retrieval_context) if model else None
        try:
            return await score(records, predictor, limit, rollout_episodes, rollout_steps, compare_lm, lm_limit,
                               hold_out_family, split)
        finally:
            if predictor is not None and predictor.llm is not None:
                await predictor.llm.close()

    if lm_path and not (Path(lm_path) / "config.json").exists():
        raise typer.BadParameter(f"{lm_path}: no config.json there", param_hint="--lm-path")
    if hold_out_family:
        from webenv.worldmodel.page import family_of

        families = sorted({family_of(r.site) for r in records})
        if hold_out_family not in families:
            raise typer.BadParameter(f"no transitions of family {hold_out_family!r} (the data has {', '.join(families)})",
                                     param_hint="--hold-out-family")
    res = asyncio.run(run())
    md = to_markdown(res)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2))
        out.with_suffix(".md").write_text(md)
        if "rollout" in res and res["rollout"]["per_step"]:
            plot_rollouts(res, out.with_name("rollouts.png"))
    typer.echo(md)


@app.command()
def card(model: Path = typer.Option(..., help="A model directory (what `train` leaves in OUT/model).")) -> None:
    """Write the model card of a model directory (MODEL_CARD.md) from the files next to the weights."""
    from webenv.worldmodel.card import CARD_FILE
    from webenv.worldmodel.card import card as write_card

    if not (model / "config.json").exists():
        raise typer.BadParameter(f"{model} is not a model directory (no config.json)", param_hint="--model")
    (model / CARD_FILE).write_text(write_card(model))
    typer.echo(model / CARD_FILE)


@app.command()
def conformance(
    worldmodel: str = typer.Option(..., help="The world model's EnvironmentService address (host:port)."),
    episodes: Path = typer.Option(None, exists=True, dir_okay=False,
                                  help="Recorded episodes: StoredEpisode JSON, one a line (as --save-episodes writes)."),
    collector: str = typer.Option("", help="A collector's address: replay the stored episodes of --run (ReadEpisodes)."),
    run_id: list[str] = typer.Option([], "--run", help="Collector run id (repeatable; with --collector)."),
    farm: str = typer.Option("", help="Record oracle episodes here first (the browser farm's address)."),
    sites: str = typer.Option("", help="With --farm: the task catalog (sites service) whose synthetic tasks are run."),
    record: int = typer.Option(20, help="With --farm: oracle episodes recorded (the first tasks of the catalog)."),
    html: bool = typer.Option(True, help="With --farm: record (and ask the simulation for) HTML too."),
    exclude_family: list[str] = typer.Option([], help="With --farm: skip this family's tasks (repeatable)."),
    save_episodes: Path = typer.Option(None, help="Write the episodes replayed here (StoredEpisode JSONL)."),
    limit: int = typer.Option(0, help="Episodes replayed at most (0 = all)."),
    out: Path = typer.Option(None, help="Write the report's JSON here and its Markdown next to it (.md)."),
    command: str = typer.Option("", help="The command line written into the report."),
    note: str = typer.Option("", help="A paragraph written into the report (what was replayed against what)."),
) -> None:
    """Replay recorded real episodes through the world model and compare every StepResponse field by field."""
    import sys

    from webenv.worldmodel import conformance as conf

    sources = [bool(episodes), bool(collector), bool(farm)]
    if sum(sources) != 1:
        raise typer.BadParameter("give exactly one of --episodes, --collector (with --run) or --farm (with --sites)",
                                 param_hint="--episodes")
    if collector and not run_id:
        raise typer.BadParameter("--collector needs at least one --run", param_hint="--run")
    if farm and not sites:
        raise typer.BadParameter("--farm needs --sites (the task catalog)", param_hint="--sites")
    if record < 1:
        raise typer.BadParameter(f"must be at least 1, got {record}", param_hint="--record")
    if limit < 0:
        raise typer.BadParameter(f"must be 0 (all) or more, got {limit}", param_hint="--limit")
    try:
        if episodes:
            recorded = conf.read_jsonl(str(episodes))
        elif collector:
            recorded = conf.read_collector(collector, run_id, limit)
        else:
            recorded = asyncio.run(conf.record_from_catalog(farm, sites, record, html, exclude_family))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--episodes") from None
    if limit:
        recorded = recorded[:limit]
    if save_episodes:
        conf.write_jsonl(recorded, str(save_episodes))
    rep = asyncio.run(conf.run(worldmodel, recorded))
    md = conf.to_markdown(rep, command or " ".join(["python -m webenv.worldmodel", *sys.argv[1:]]), note)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rep.as_dict(), indent=2))
        out.with_suffix(".md").write_text(md)
    typer.echo(md)



@app.command()
def consistency(
    sessions: int = typer.Option(40, min=1, help="Simulated sessions (random walks) per setting."),
    steps: int = typer.Option(12, min=1, help="Steps per session."),
    noise: list[float] = typer.Option([0.0, 0.25], help="Share of new documents whose prices are mispredicted "
                                                          "(repeatable)."),
    seed: int = typer.Option(0),
    out: Path = typer.Option(None, help="Write the Markdown report here."),
) -> None:
    """Values shown for one item across the pages of a simulated session, value memory off and on (tiny web)."""
    import sys

    from webenv.worldmodel.agreement import report

    for p in noise:
        if not 0.0 <= p <= 1.0:
            raise typer.BadParameter(f"must be within 0..1, got {p}", param_hint="--noise")
    md = asyncio.run(report(sessions, steps, noise, seed, " ".join(["python -m webenv.worldmodel", *sys.argv[1:]])))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(md)
    typer.echo(md)

if __name__ == "__main__":
    cli()
