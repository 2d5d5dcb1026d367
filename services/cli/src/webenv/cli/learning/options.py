"""The loop's options: one table of every option with its default, its `webenv train` flag, its help and its bounds.

`webenv train`'s options are built from this table (commands/train.py), the Makefile's learn targets pass only what
they set away from it, and the bench scripts read their defaults here. Its defaults are the reported recipe,
`fbc-kl-i5-v150-t05` (bench/results/learning/fbc-kl-i5-v150-t05: filtered BC with a KL term of 0.5 towards the BC
warm start, 5 iterations of 200 rollouts sampled at temperature 0.5, the checkpoint chosen on 150 validation tasks,
the reported suites run on BC and the selected checkpoint only), so `webenv train --stack` with no flags runs it;
services/cli/tests/test_cli_learning_options.py holds the defaults equal to that run's recorded config.
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, dataclass, field, fields

from webenv.v1 import collector_pb2

from ..signals import ARMS

#: The task file of the hand-made suite (the sites service's data/rubric/handmade.json, TaskFilter.task_files).
HANDMADE_FILE = "handmade.json"
#: Where the reported recipe's run is recorded (its config is these defaults).
RECIPE = "bench/results/learning/fbc-kl-i5-v150-t05"


def option(default, help: str = "", *, flag: str = "", low: float | None = None, high: float | None = None,
           choices: tuple[str, ...] = (), cli: bool = True):
    """A field of the table: its default, help, `webenv train` flag (default: from its name), bounds or choices;
    ``cli`` False for what the command does not offer (set by the loop itself or by a bench script)."""
    return field(default=default, metadata={"help": help, "flag": flag, "low": low, "high": high,
                                            "choices": choices, "cli": cli})



#: The collector's task sampling strategies, as the loop names them (SAMPLING_STRATEGY_TEMPLATE_FRONTIER: template-frontier).
SAMPLINGS = tuple(n.removeprefix("SAMPLING_STRATEGY_").lower().replace("_", "-")
                  for n in collector_pb2.SamplingStrategy.keys() if not n.endswith("_UNSPECIFIED"))


@dataclass
class LoopConfig:
    """What `webenv train` runs. Defaults: the reported recipe."""

    name: str = option("agent", "Checkpoint family the loop trains (versions name@1, name@2, ...).")
    demo_episodes: int = option(50, "Oracle demonstrations on train-split tasks for the BC warm start.", flag="--demos")
    reference_demo_episodes: int = option(0, "Also train BC on this many demonstrations, as a reference (0 = skip).",
                                          flag="--reference-demos")
    iterations: int = option(5, "RL iterations after the warm start.")
    collect_episodes: int = option(200, "Episodes collected per iteration (train split), sampled at --temperature.",
                                   flag="--collect")
    eval_episodes: int = option(150, "Test-split episodes per evaluation, greedy (the same tasks each time).",
                                flag="--eval")
    train_eval_episodes: int = option(0, "Train-split episodes per evaluation, greedy.", flag="--train-eval")
    temperature: float = option(0.5, "Sampling temperature of the RL collections (evaluation is greedy).")
    algorithm: str = option("filtered_bc", "filtered_bc (WebGym), policy_gradient, group (GRPO), partial (fact-group "
                            "credit + subtask relabeling) or branching (forked rollouts).", choices=tuple(ARMS))
    group_size: int = option(4, "(group, branching) episodes per group: k rollouts of a task, or an anchor and its "
                             "k - 1 forks.", low=2, high=33)
    branch_step: int = option(2, "(branching) steps an anchor takes before it is forked.")
    step_normalize: bool = option(False, "Divide each episode's step weights by its steps (AsyncWebRL's 1/k).")
    # seed 1's RL iterations took the held-out family from 26% to 8% with nothing holding the ranking near the warm
    # start's (bench/results/learning/notes.md)
    kl_coef: float = option(0.5, "Beta of the RL jobs' KL penalty towards --kl-reference (0 = none, at most 10).",
                            low=0, high=10)
    # with the warm start as reference, a step BC ranks confidently wrong keeps about half of BC's mass on its wrong
    # candidate at beta 0.5
    kl_reference: str = option("warm-start", "What the KL penalty holds each RL job to: warm-start (the BC "
                               "checkpoint) or parent (the previous iterate, a trust region).",
                               choices=("warm-start", "parent"))
    relabel_answers: bool = option(False, "Train every answer step towards every answer candidate the task's rubric "
                                   "accepts, not only the one typed (AlgorithmOptions.relabel_answers; BC and RL jobs).")
    # builders-f2 seed 1: over five collections the three-record transactions (tx-4, tx-5) passed 1 of 47 and 1 of 39
    # rollouts, while 13 and 15 of their failures completed a record (all its fact groups held), which filtered BC
    # throws away (bench/results/learning/notes.md, "Why RL lifts little on the web of builders")
    relabel_subtasks: bool = option(False, "(RL jobs) Also train on every subtask a failed rollout completed, as a "
                                    "success for that subtask's instruction (AlgorithmOptions.relabel_subtasks, "
                                    "WebGym's relabeling; filtered BC then reads the failed rollouts too).")
    hard_negatives: int = option(0, "Passages borrowed from the site's other pages added to each training step as "
                                 "wrong answers (AlgorithmOptions.hard_negatives; 0 = none; BC and RL jobs).",
                                 low=0, high=16)
    demo_starts: float = option(0.0, "Share of each RL collection started along the warm start's demonstrations: a "
                                "demonstration's first steps replayed (how many: uniform), then the policy acts "
                                "(RunSpec.starts, Backplay's way; 0 = none).", low=0, high=1)
    model: str = option("scorer", "The ranker trained: scorer (hashed features, trains in minutes) or encoder "
                        "(fine-tuned all-MiniLM-L6-v2; slower per example).", choices=("scorer", "encoder"))
    bc_epochs: int = option(40, "Epochs of the BC warm start.")
    rl_epochs: int = option(4, "Epochs of each RL job.")
    sampling: str = option("frontier", "Tasks of the RL collections: uniform, easy-only, hard-biased, frontier or "
                           "template-frontier (evaluations always draw uniformly).",
                           choices=SAMPLINGS)
    # on 2 cores at the collector's 16 a step took ~2 s and 14% of random's test episodes ran past their 60 s deadline
    concurrency: int = option(4, "Episodes in flight per run, halved for each of --overlap's two runs (0 = the "
                              "collector's default of 16: on 2 cores episodes ran past their deadlines).")
    baselines: tuple[str, ...] = option(("random",), "Policies evaluated on the test split beside (comma list).")
    baseline_episodes: int = option(50, "Test-split episodes per baseline policy.", flag="--baseline-eval")
    horizons: tuple[int, int, int] = option((12, 16, 20), "Step caps by difficulty (WebGym's).", cli=False)
    oracle_slack: int = option(4, "No task's step cap below its oracle's length plus this.", low=0, high=100)
    validation_episodes: int = option(150, "Validation-split episodes per evaluation: the checkpoint reported is the "
                                      "best on these, never on test.", flag="--validation-eval", low=0, high=10_000)
    holdout_family: str = option("shop", "A site family never trained on, evaluated as its own suite: its sites are "
                                 "left out of training and the trainer refuses them (\"\" = none).")
    family_episodes: int = option(50, "Episodes on the held-out family's websites per evaluation.",
                                  flag="--family-eval", low=1, high=10_000)
    heldout_builders: tuple[str, ...] = option(("govform", "hashapp"), "Site builders never trained on (their websites "
                                               "are all test split, so the trainer refuses them), evaluated as their "
                                               "own suite on the trained families (comma list; empty = none).")
    builder_episodes: int = option(150, "Episodes on the held-out builders' websites per evaluation.",
                                   flag="--builder-eval", low=1, high=10_000)
    miniwob_suite: str = option("served", "The MiniWoB++ zero-shot suite: served (every task the catalog serves, one "
                                "episode each) or oracle (--miniwob-tasks of those the oracle scripts).",
                                choices=("served", "oracle"))
    miniwob_tasks: int = option(20, "(--miniwob-suite oracle) MiniWoB++ tasks the oracle solves, run zero-shot by every "
                                "reported checkpoint and by random (0 = skip the MiniWoB++ suite).", low=0, high=1000)
    # MiniWoB's pages give an episode 10 s from the start: 20 sessions opened at once on 2 loaded cores all ran out
    miniwob_concurrency: int = option(2, "Episodes in flight on the MiniWoB++ suite.", cli=False)
    handmade_tasks: int = option(40, "Tasks of the hand-made websites (facts in prose, lists and tables, no generator "
                                 "template) run zero-shot by every reported checkpoint, the oracle and random "
                                 "(0 = skip).", low=0, high=1000)
    handmade_file: str = option(HANDMADE_FILE, "The hand-made suite's task file: handmade.json (six test sites, "
                                "reported) or handmade_dev.json (four sites to design fact reading on).")
    overlap: bool = option(False, "Evaluate each version while the next iteration collects with it (same data, less "
                           "wall time; the report gives wall time per iteration).")
    oracle_ceiling: bool = option(True, "Run the oracle on every suite's tasks under the same caps (the ceiling).")
    eval_mode: str = option("selected", "Checkpoints that run test, the held-out family, MiniWoB++ and the hand-made "
                            "sites: every one, or selected (the BC warm start and the RL checkpoint chosen on "
                            "validation, once chosen; every checkpoint runs validation).", choices=("every", "selected"))
    seed: int = option(1, "The loop's seed: tasks, demonstrations, sampling and training all follow from it.")
    out_dir: str = option("bench/results", "Folder for learning.md, learning.json, learning.png.", flag="--out")
    # Dyna: instead of the RL iterations, one step from the BC checkpoint with the same budget of rollouts collected
    # in the world model at `sim_env` vs in real browsers, on the sites it knows
    dyna: bool = option(False, "Instead of the iterations: --collect rollouts in the world model vs in real browsers "
                        "from the BC checkpoint, each trained on; report dyna.md.")
    sim_env: str = option("", "(--dyna without --stack) the world model's address.")
    sim_sites: tuple[str, ...] = option((), "(--dyna) the websites the world model has start pages for.", cli=False)


#: Where each run writes: not part of the recipe (a run's recorded config names its own folder).
PER_RUN = ("out_dir",)
#: Suites added after the reported recipe's run (issue 48: the held-out builders, every MiniWoB++ task served): they
#: measure and never train, so a run without them (the recipe's recorded config) ran the same recipe; a recorded
#: config that lacks them ran without them (`changed` then counts their defaults as unset).
LATER_SUITES = {"heldout_builders": (), "builder_episodes": 150, "miniwob_suite": "oracle"}
#: Training options added after the reported recipe's run, whose default is what that run did (off).
LATER_OPTIONS = {"relabel_subtasks": False}


def table() -> list[dict]:
    """Every option: name, type, default, flag, help, bounds, choices, whether `webenv train` offers it."""
    hints = typing.get_type_hints(LoopConfig)
    out = []
    for f in fields(LoopConfig):
        m = f.metadata
        out.append({"name": f.name, "type": hints[f.name], "default": f.default if f.default is not MISSING else None,
                    "flag": m["flag"] or "--" + f.name.replace("_", "-"), "help": m["help"], "low": m["low"],
                    "high": m["high"], "choices": m["choices"], "cli": m["cli"]})
    return out


def flag_of(name: str) -> str:
    """The `webenv train` flag of option ``name`` (``--name`` for a name the table lacks)."""
    return next((o["flag"] for o in table() if o["name"] == name), "--" + name.replace("_", "-"))


def problems(cfg: LoopConfig) -> list[tuple[str, str]]:
    """(flag, what is wrong) for every option out of its bounds or choices, and a KL reference without a KL term."""
    out = []
    for o in table():
        value = getattr(cfg, o["name"])
        if o["choices"] and value not in o["choices"]:
            out.append((o["flag"], f"{value!r}: expected one of {', '.join(o['choices'])}"))
        if (o["low"] is not None and not value >= o["low"]) or (o["high"] is not None and not value <= o["high"]):
            out.append((o["flag"], f"must be in [{o['low']}, {o['high']}], got {value}"))
    if cfg.kl_reference != "warm-start" and not cfg.kl_coef:
        out.append(("--kl-reference", f"{cfg.kl_reference!r} is the reference of --kl-coef, which is 0"))
    return out


def changed(cfg: dict, keys: typing.Iterable[str] | None = None) -> dict:
    """The options of a recorded config (learning.json's "config") set away from the defaults (the reported recipe),
    among ``keys`` (all when None); an option the run did not record counts as the default."""
    defaults = {o["name"]: o["default"] for o in table()}
    names = list(keys) if keys is not None else [n for n in defaults if n not in PER_RUN]
    return {k: cfg[k] for k in names if k in cfg and _plain(cfg[k]) != _plain(defaults[k])}


def _plain(value):
    return list(value) if isinstance(value, tuple) else value
