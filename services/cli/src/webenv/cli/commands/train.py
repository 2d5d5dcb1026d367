"""`webenv train`: the learning loop (webenv.cli.learn) on a running stack or one it starts (--stack)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import typer
from webenv.cli.commands.common import (
    COLLECTOR,
    POLICY,
    SAMPLING,
    TRAINER,
    address,
    choice,
    console,
    fail,
    sigterm_interrupts,
)
from webenv.cli.stack import DEFAULT_WORLDMODEL, Stack


def train(
    name: str = typer.Option("agent", help="Checkpoint family the loop trains (versions name@1, name@2, ...)."),
    demos: int = typer.Option(60, help="Oracle demonstrations on train-split tasks for the BC warm start."),
    reference_demos: int = typer.Option(0, help="Also train BC on this many demonstrations, as a reference."),
    iterations: int = typer.Option(4, help="RL iterations after the warm start."),
    collect: int = typer.Option(300, help="Episodes collected per iteration (train split)."),
    eval_episodes: int = typer.Option(200, "--eval", help="Test-split episodes per evaluation (same tasks each time)."),
    train_eval: int = typer.Option(100, help="Train-split episodes per evaluation."),
    validation_eval: int = typer.Option(100, help="Validation-split episodes per evaluation: the checkpoint reported "
                                                  "is the best on these, never on test."),
    holdout_family: str = typer.Option("", help="A site family never trained on (e.g. shop), evaluated as its own "
                                                "suite: its sites are left out of training and the trainer refuses them."),
    family_eval: int = typer.Option(100, help="Episodes on the held-out family's websites per evaluation."),
    miniwob_tasks: int = typer.Option(20, help="MiniWoB++ tasks the oracle solves, run zero-shot by every checkpoint "
                                               "and by random (0 = skip)."),
    handmade_tasks: int = typer.Option(40, help="Tasks of the hand-made websites (data/rubric/handmade.json: facts in "
                                               "prose, lists and tables, no generator template) run zero-shot by every "
                                               "reported checkpoint, the oracle and random (0 = skip)."),
    handmade_file: str = typer.Option("handmade.json", help="The hand-made suite's task file: handmade.json (six test "
                                                            "sites, reported) or handmade_dev.json (four sites to design "
                                                            "fact reading on)."),
    oracle_slack: int = typer.Option(4, help="No task's step cap below its oracle's length plus this."),
    oracle_ceiling: bool = typer.Option(True, help="Run the oracle on every suite's tasks under the same caps."),
    eval_mode: str = typer.Option("every", help="Checkpoints that run test, the held-out family and MiniWoB++: every "
                                              "one, or selected (the BC warm start and the RL checkpoint chosen on "
                                              "validation, once chosen; every checkpoint runs validation)."),
    overlap: bool = typer.Option(False, help="Evaluate each version while the next iteration collects with it "
                                             "(same data, less wall time; the report gives wall time per iteration)."),
    temperature: float = typer.Option(1.0, help="Sampling temperature while collecting."),
    algorithm: str = typer.Option("filtered_bc", help="filtered_bc (WebGym), policy_gradient, group (GRPO), partial "
                                  "(fact-group credit + subtask relabeling) or branching (forked rollouts)."),
    group_size: int = typer.Option(4, help="(group, branching) episodes per group: k rollouts of a task, or an "
                                   "anchor and its k - 1 forks."),
    branch_step: int = typer.Option(2, help="(branching) steps an anchor takes before it is forked."),
    step_normalize: bool = typer.Option(False, help="Divide each episode's step weights by its steps (1/k)."),
    kl_coef: float = typer.Option(0.0, help="Beta of the RL jobs' KL penalty towards the BC warm start's ranking "
                                            "(0 = none, at most 10)."),
    kl_reference: str = typer.Option("warm-start", help="What the KL penalty holds each RL job to: warm-start (the BC "
                                                        "checkpoint) or parent (the previous iterate, a trust region)."),
    relabel_answers: bool = typer.Option(False, help="Train every answer step towards every answer candidate the "
                                                     "task's rubric accepts, not only the one typed "
                                                     "(AlgorithmOptions.relabel_answers; BC and RL jobs)."),
    hard_negatives: int = typer.Option(0, help="Passages borrowed from the site's other pages added to each training "
                                               "step as wrong answers (AlgorithmOptions.hard_negatives; 0 = none, at "
                                               "most 16; BC and RL jobs)."),
    demo_starts: float = typer.Option(0.0, help="Share of each RL collection started along the warm start's "
                                                "demonstrations: a demonstration's first steps replayed (how many: "
                                                "uniform), then the policy acts (RunSpec.starts; 0 = none, at most 1)."),
    model: str = typer.Option("scorer", help="The ranker trained: scorer (hashed features, trains in minutes) or encoder "
                                             "(fine-tuned all-MiniLM-L6-v2; slower per example, its first epoch most)."),
    bc_epochs: int = typer.Option(40),
    rl_epochs: int = typer.Option(4),
    sampling: str = typer.Option("uniform", help="uniform, easy-only, hard-biased, frontier or template-frontier task sampling."),
    concurrency: int = typer.Option(4, help="Episodes in flight per run, halved for each of --overlap's two runs "
                                               "(0 = the collector's default of 16: on 2 cores episodes ran past their "
                                               "deadlines)."),
    baselines: str = typer.Option("random,explore", help="Policies evaluated on the test split beside (comma list)."),
    baseline_eval: int = typer.Option(100, help="Test-split episodes per baseline policy."),
    seed: int = typer.Option(1),
    out: Path = typer.Option(Path("bench/results"), help="Folder for learning.md, learning.json, learning.png."),
    stack: bool = typer.Option(False, help="Start a local stack on free ports for the loop (embedded store)."),
    sites_count: int = typer.Option(200, help="Synthetic sites of the local stack (--stack)."),
    data_dir: Path = typer.Option(None, help="Data folder of the local stack (--stack)."),
    collector: str = typer.Option(COLLECTOR),
    trainer: str = typer.Option(TRAINER),
    policy: str = typer.Option(POLICY),
    dyna: bool = typer.Option(False, help="Instead of the iterations: --collect rollouts in the world model vs in real "
                                           "browsers from the BC checkpoint, each trained on; report bench/results/dyna.md."),
    worldmodel: Path = typer.Option(DEFAULT_WORLDMODEL, help="(--dyna --stack) the world model the stack serves."),
    sim_env: str = typer.Option("", help="(--dyna without --stack) the world model's address."),
) -> None:
    """The learning loop: oracle demos -> BC warm start -> N x (collect -> judge -> train -> load -> evaluate)."""
    from webenv.cli.learn import Loop, LoopConfig, write_report
    from webenv.cli.signals import ARMS

    if algorithm not in ARMS:
        raise typer.BadParameter(f"{algorithm!r}: expected one of {', '.join(ARMS)}", param_hint="--algorithm")
    if not 2 <= group_size <= 33:
        raise typer.BadParameter("must be within 2..33", param_hint="--group-size")
    choice(sampling, SAMPLING, "--sampling")
    choice(eval_mode, dict.fromkeys(("every", "selected")), "--eval-mode")
    choice(kl_reference, dict.fromkeys(("warm-start", "parent")), "--kl-reference")
    if kl_reference != "warm-start" and not kl_coef:
        raise typer.BadParameter(f"{kl_reference!r} is the reference of --kl-coef, which is 0", param_hint="--kl-reference")
    if model not in ("scorer", "encoder"):
        raise typer.BadParameter(f"{model!r}: expected scorer or encoder", param_hint="--model")
    cfg = LoopConfig(name=name, model=model, demo_episodes=demos, reference_demo_episodes=reference_demos, iterations=iterations,
                     collect_episodes=collect, eval_episodes=eval_episodes, train_eval_episodes=train_eval,
                     temperature=temperature, algorithm=algorithm, bc_epochs=bc_epochs, rl_epochs=rl_epochs,
                     sampling=sampling, concurrency=concurrency, group_size=group_size, branch_step=branch_step,
                     step_normalize=step_normalize, kl_coef=kl_coef, kl_reference=kl_reference,
                     relabel_answers=relabel_answers,
                     hard_negatives=hard_negatives, demo_starts=demo_starts, baselines=tuple(b for b in baselines.split(",") if b),
                     baseline_episodes=baseline_eval, seed=seed,
                     out_dir=str(out), dyna=dyna, validation_episodes=validation_eval, holdout_family=holdout_family,
                     family_episodes=family_eval, miniwob_tasks=miniwob_tasks, handmade_tasks=handmade_tasks, handmade_file=handmade_file, oracle_slack=oracle_slack,
                     oracle_ceiling=oracle_ceiling, overlap=overlap, eval_mode=eval_mode)
    for option, value, low, high in (("--validation-eval", validation_eval, 0, 10_000),
                                     ("--family-eval", family_eval, 1, 10_000), ("--miniwob-tasks", miniwob_tasks, 0, 1000),
                                     ("--handmade-tasks", handmade_tasks, 0, 1000),
                                     ("--oracle-slack", oracle_slack, 0, 100), ("--kl-coef", kl_coef, 0, 10),
                                     ("--hard-negatives", hard_negatives, 0, 16), ("--demo-starts", demo_starts, 0, 1)):
        if not low <= value <= high:
            raise typer.BadParameter(f"must be in [{low}, {high}], got {value}", param_hint=option)
    if dyna:
        if not (worldmodel / "config.json").exists():
            raise typer.BadParameter(f"{worldmodel} is not a model directory (no config.json): `make worldmodel` "
                                     "builds one", param_hint="--worldmodel")
        starts = worldmodel / "start_states.jsonl"  # the model directory's recorded start pages (JSONL, "url")
        hosts = {urlsplit(json.loads(line).get("url", "")).hostname
                 for line in starts.read_text(encoding="utf-8").splitlines() if line.strip()} if starts.exists() else set()
        cfg.sim_sites = tuple(sorted(h for h in hosts if h))
        if not cfg.sim_sites:
            raise typer.BadParameter(f"{worldmodel} records no start pages", param_hint="--worldmodel")
    local = None
    sigterm_interrupts()
    if stack:
        data_dir = data_dir or Path(".webenv") / f"train-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        local = Stack(data_dir, free_ports=True, sites_count=sites_count, worldmodel=str(worldmodel) if dyna else "")
        try:
            with console.status("starting the stack...") as status:
                local.start(on_ready=lambda n, a: status.update(f"{n} SERVING at {a}"))
        except KeyboardInterrupt:
            local.stop()
            raise typer.Exit(130) from None
        collector, trainer, policy, sites = (local.address(n) for n in ("collector", "trainer", "policy", "sites"))
        if dyna:
            cfg.sim_env = local.address("worldmodel")
        console.print(f"stack up ({', '.join(local.services)}); data in {data_dir.resolve()}")
    else:
        collector, trainer, policy, sites = (address(n, v) for n, v in (("collector", collector), ("trainer", trainer),
                                                                         ("policy", policy), ("sites", None)))
        if dyna:
            if not sim_env:
                raise typer.BadParameter("the world model's address (or --stack)", param_hint="--sim-env")
            cfg.sim_env = sim_env
    try:
        loop = Loop(cfg, collector=collector, trainer=trainer, policy=policy, sites=sites, say=console.print)
        result = loop.run_loop()
    except grpc.RpcError as exc:
        raise fail(exc) from None
    except ValueError as exc:  # a loop option the catalog or the oracle cannot serve, named by the field
        raise typer.BadParameter(str(exc), param_hint="--" + str(exc).partition(":")[0].replace("_", "-")) from None
    except RuntimeError as exc:
        console.print(f"[red]error[/red] {exc}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        console.print("interrupted; stopping")
        raise typer.Exit(130) from None
    finally:
        if local is not None:
            with console.status("stopping the stack..."):
                local.stop()
    import shlex
    import sys

    paths = write_report(result, out, "webenv train " + " ".join(shlex.quote(a) for a in sys.argv[2:]))
    console.print("learning curve: " + ", ".join(str(p) for p in paths))
