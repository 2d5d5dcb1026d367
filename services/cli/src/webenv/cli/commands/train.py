"""`webenv train`: the learning loop (webenv.cli.learning) on a running stack or one it starts (--stack).

Its loop options are built from the loop's defaults table (webenv.cli.learning.options: one default, flag, help and
bound per option), whose defaults are the reported recipe: `webenv train --stack` with no flags runs it. The options
here are only where to run it (a stack of its own, or the services' addresses).
"""

from __future__ import annotations

import inspect
import json
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import typer
from webenv.cli.commands.common import (
    COLLECTOR,
    POLICY,
    TRAINER,
    address,
    console,
    fail,
    sigterm_interrupts,
)
from webenv.cli.learning.options import LoopConfig, flag_of, problems, table
from webenv.cli.stack import DEFAULT_WORLDMODEL, Stack

#: Where the loop runs: not part of the recipe, so not in the defaults table.
WHERE = {
    "stack": (bool, typer.Option(False, help="Start a local stack on free ports for the loop (embedded store).")),
    "sites_count": (int, typer.Option(200, help="Synthetic sites of the local stack (--stack).")),
    "data_dir": (Path, typer.Option(None, help="Data folder of the local stack (--stack).")),
    "collector": (str, typer.Option(COLLECTOR)),
    "trainer": (str, typer.Option(TRAINER)),
    "policy": (str, typer.Option(POLICY)),
    "worldmodel": (Path, typer.Option(DEFAULT_WORLDMODEL, help="(--dyna --stack) the world model the stack serves.")),
}
#: Options whose command-line form differs from the config's: (CLI type, to the config, from the config).
#: A tuple of names as a comma list ("" = none).
COMMA_LIST = (str, lambda v: tuple(b for b in v.split(",") if b), ",".join)
FORMS = {
    "baselines": COMMA_LIST,
    "heldout_builders": COMMA_LIST,
    "out_dir": (Path, str, Path),
}


def _parameters() -> list[inspect.Parameter]:
    """The command's parameters: every loop option the table offers, then where to run it."""
    out = []
    for o in table():
        if not o["cli"]:
            continue
        kind, default = o["type"], o["default"]
        if o["name"] in FORMS:
            kind, default = FORMS[o["name"]][0], FORMS[o["name"]][2](default)
        decl = f"{o['flag']}/--no-{o['flag'][2:]}" if kind is bool else o["flag"]
        out.append(inspect.Parameter(o["name"], inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                     default=typer.Option(default, decl, help=o["help"])))
    out += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=k, default=opt) for n, (k, opt) in WHERE.items()]
    return out


def config_of(values: dict) -> LoopConfig:
    """The loop's config from the command's values (the table's options only)."""
    names = {o["name"] for o in table() if o["cli"]}
    return LoopConfig(**{k: FORMS[k][1](v) if k in FORMS else v for k, v in values.items() if k in names})


def train(**values) -> None:
    """The learning loop: oracle demos -> BC warm start -> N x (collect -> judge -> train -> load -> evaluate).
    With no option it runs the reported recipe (docs/learning.md)."""
    from webenv.cli.learning import Loop, write_report

    cfg = config_of(values)
    for flag, problem in problems(cfg):
        raise typer.BadParameter(problem, param_hint=flag)
    stack, sites_count, data_dir, worldmodel = (values[k] for k in ("stack", "sites_count", "data_dir", "worldmodel"))
    collector, trainer, policy, dyna, sim_env, out = (values["collector"], values["trainer"], values["policy"],
                                                      cfg.dyna, cfg.sim_env, Path(cfg.out_dir))
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
        raise typer.BadParameter(str(exc), param_hint=flag_of(str(exc).partition(":")[0])) from None
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


train.__signature__ = inspect.Signature(_parameters())  # typer reads the options from here
train.__annotations__ = {p.name: p.annotation for p in train.__signature__.parameters.values()}
