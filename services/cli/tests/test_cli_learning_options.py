"""One defaults table for the learning loop: its defaults are the reported recipe (the run's own recorded config),
`webenv train`'s options are built from it, and the loop passes values instead of mutating itself."""

from __future__ import annotations

import inspect
import json
from dataclasses import asdict
from pathlib import Path

import grpc
import pytest
from webenv.cli.commands.train import WHERE, config_of, train
from webenv.cli.learning import RECIPE, Loop, LoopConfig
from webenv.cli.learning.options import LATER_OPTIONS, LATER_SUITES, PER_RUN, changed, table
from webenv.v1 import collector_pb2, trainer_pb2

ROOT = Path(__file__).resolve().parents[3]


def test_webenv_trains_default_config_is_the_reported_recipes_recorded_config():
    """`webenv train --stack` with no flags runs the reported recipe: the config the command builds from its own
    defaults equals the config each seed of the recipe's run recorded, but for the folder each run writes to."""
    defaults = {p.name: p.default.default for p in inspect.signature(train).parameters.values()}
    built = asdict(config_of(defaults))
    assert built == asdict(LoopConfig())
    for seed in (1, 2, 3):
        recorded = json.loads((ROOT / RECIPE / f"seed{seed}" / "learning.json").read_text())["config"]
        recorded["seed"] = 1  # the seed is the run's own choice: its default is 1
        # suites added since (they measure, never train), and training options whose default is what the run did
        later = (set(LATER_SUITES) | set(LATER_OPTIONS)) - set(recorded)
        assert set(recorded) | later == set(built), set(recorded) ^ set(built)
        differ = {k: (built[k], recorded[k]) for k in built
                  if k not in PER_RUN and k not in later and json.loads(json.dumps(built[k])) != recorded[k]}
        assert differ == {}, differ
    assert changed({**recorded, "temperature": 1.0}) == {"temperature": 1.0}
    assert {k: built[k] for k in LATER_OPTIONS} == LATER_OPTIONS


def test_the_commands_options_are_the_tables():
    offered = [n for n in inspect.signature(train).parameters if n not in WHERE]
    assert offered == [o["name"] for o in table() if o["cli"]]
    assert all(o["help"] for o in table()), "every option says what it does"


class Collector:
    """StartRun answering with the given codes first (a failing call each), then a run."""

    def __init__(self, *codes: grpc.StatusCode) -> None:
        self.codes, self.requests = list(codes), []

    def StartRun(self, req, timeout=None):
        self.requests.append(req.request_id)
        if self.codes:
            code = self.codes.pop(0)
            err = grpc.RpcError()
            err.code = lambda: code
            raise err
        return collector_pb2.StartRunResponse(run=collector_pb2.Run(run_id="run-1"))


def bare_loop() -> Loop:
    loop = Loop.__new__(Loop)  # no services: the stubs are set by each test
    loop.cfg, loop.say, loop.checkpoints, loop.runs = LoopConfig(), (lambda _: None), [], {}
    return loop


def test_start_run_asks_again_only_while_the_collector_is_unavailable(monkeypatch):
    """A one-answer call is asked again (the same request id: one run) while the collector restarts, and any other
    status is raised at once, never retried as a broken stream would be."""
    monkeypatch.setattr("time.sleep", lambda s: None)
    loop = bare_loop()
    loop.collector = Collector(grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE)
    assert loop.start_run(collector_pb2.RunSpec()).run_id == "run-1"
    assert len(loop.collector.requests) == 3 and len(set(loop.collector.requests)) == 1
    for code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.INVALID_ARGUMENT):
        loop.collector = Collector(code)
        with pytest.raises(grpc.RpcError):
            loop.start_run(collector_pb2.RunSpec())
        assert len(loop.collector.requests) == 1, code


def test_relabel_subtasks_reaches_the_rl_jobs_only():
    """(--relabel-subtasks) An RL job asks for subtask relabeling and reads the failed rollouts too (filtered BC would
    read only the passed ones); the BC warm start stays on passed demonstrations, without relabeling."""
    loop = bare_loop()
    loop.cfg.relabel_subtasks, loop.warm_ref, specs = True, "agent@1", []

    class Trainer:
        def StartJob(self, req, timeout=None):
            specs.append(req.spec)
            raise LookupError  # the spec is all this test reads

    loop.trainer = Trainer()
    for algorithm, parent in ((trainer_pb2.TRAINING_ALGORITHM_BC, ""),
                              (trainer_pb2.TRAINING_ALGORITHM_FILTERED_BC, "agent@1")):
        with pytest.raises(LookupError):
            loop.train("it", algorithm, ["run-1"], parent, 4)
    bc, rl = specs
    assert not bc.options.relabel_subtasks and bc.data.filter.HasField("passed")
    assert rl.options.relabel_subtasks and not rl.data.filter.HasField("passed")
    assert rl.algorithm == trainer_pb2.TRAINING_ALGORITHM_FILTERED_BC and rl.options.kl_coef == 0.5


def test_the_reference_bc_is_its_own_family_without_renaming_the_loop():
    """(--reference-demos) BC on more demonstrations trains as `<name>-ref`, passed to the job; the loop's own name is
    never swapped and restored around it."""
    loop = bare_loop()
    loop.cfg.reference_demo_episodes, jobs, evaluated = 80, [], []
    loop.run = lambda label, **kw: collector_pb2.Run(run_id=f"run-{label}")

    def train(label, algorithm, run_ids, parent, epochs, name=""):
        jobs.append((label, algorithm, run_ids, name, loop.cfg.name))
        return trainer_pb2.Checkpoint(ref=f"{name}@1")

    loop.train, loop.evaluate_checkpoint = train, lambda ref, it: evaluated.append((ref, it))
    loop.reference()
    assert jobs == [("reference-bc", trainer_pb2.TRAINING_ALGORITHM_BC, ["run-reference-demos"], "agent-ref", "agent")]
    assert evaluated == [("agent-ref@1", "reference")]


def test_make_learn_keeps_no_defaults_of_its_own():
    """`make learn` passes only what is set on its command line: with nothing set, `webenv train`'s defaults (the
    reported recipe); a variable set passes its option (dry run: `make -n`, nothing starts)."""
    import subprocess

    def train_line(*args: str) -> str:
        out = subprocess.run(["make", "-n", "learn", "SEEDS=1", *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return " ".join(next(ln for ln in out.stdout.splitlines() if "webenv train" in ln).split())

    assert "webenv train --stack --seed $s --out bench/results/learning/recipe/seed$s" in train_line()
    assert "--stack --algorithm partial --iterations 3 --kl-coef 0 --sampling uniform --seed" in train_line(
        "ALGORITHM=partial", "ITERATIONS=3", "KL=0", "LEARN_ARGS=--sampling uniform")
