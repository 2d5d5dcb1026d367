"""The learning report's honesty rules, on a loop's recorded evaluations: the checkpoint reported is chosen on
validation (never on test), every suite row says what "unseen" means, the oracle rows are the ceiling."""

from __future__ import annotations

import json
import time
from pathlib import Path

from webenv.cli.learning import Evaluation, Loop, LoopConfig, Timing, reason_key, write_report


def loop_with(evals: list[Evaluation], refs: list[str]) -> Loop:
    loop = Loop.__new__(Loop)  # no services: only the recorded evaluations and checkpoints are read
    loop.cfg, loop.evals, loop.runs, loop.timing = LoopConfig(holdout_family="shop", overlap=True), evals, {}, Timing()
    loop.live, loop.restarted_runs, loop.collections = set(), [], []
    loop.miniwob_ids, loop.handmade_ids, loop.reach = (), (), {}
    loop.checkpoints = [{"ref": r, "parent": "", "label": r, "episodes": 1, "examples": 1, "steps": 1, "loss": 0.1,
                         "validation_accuracy": 0.5, "examples_per_second": 1.0} for r in refs]
    loop.iterations = [{"iteration": 1, "collected_with": "agent@1", "evaluated_during_collection": "agent@1",
                        "wall_seconds": 10.0, "phase_seconds": 16.0}]
    return loop


def learning_seeds():
    """bench/learning_seeds.py, loaded as a module (bench/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("learning_seeds", Path(__file__).parents[3] / "bench" / "learning_seeds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ev(version: str, suite: str, passed: int, n: int = 10) -> Evaluation:
    return Evaluation(version, suite, f"run-{version}-{suite}", n, passed, {"information": [passed, n]}, {}, 0, 1, "d")


def test_the_checkpoint_reported_is_chosen_on_validation_never_on_test(tmp_path):
    evals = [ev("oracle", "test", 9), ev("random", "test", 0),
             ev("agent@1", "validation", 2), ev("agent@1", "test", 8), ev("agent@1", "family:shop", 1),
             ev("agent@2", "validation", 5), ev("agent@2", "test", 3), ev("agent@2", "miniwob", 4, 20),
             ev("agent-ref@1", "validation", 9), ev("agent-ref@1", "test", 9)]
    result = loop_with(evals, ["agent@1", "agent@2", "agent-ref@1"]).result(time.monotonic())
    # agent@1 is better on test, agent@2 on validation: the loop reports agent@2; the reference is not a candidate
    assert result["selected"]["ref"] == "agent@2" and result["selected"]["by"] == "validation"
    assert result["selected"]["suites"] == {"validation": 0.5, "test": 0.3, "miniwob": 0.2}
    assert set(result["suites"]) == {"test", "validation", "family:shop", "miniwob"}
    assert "family never trained on" in result["suites"]["family:shop"] and "zero-shot" in result["suites"]["miniwob"]
    md, js = write_report(result, tmp_path, "webenv train")[:2]
    text = md.read_text()
    assert "Selected checkpoint (best on validation, never chosen on test): agent@2" in text
    assert "| oracle (ceiling) | test | 90.0% | [59.6%, 98.2%] | 10 | 1 | 0 | `d` |" in text and "By task kind and difficulty (family:shop" in text
    assert "| 1 | agent@1 | agent@1 | 10 | 16 |" in text  # wall time per iteration beside the sum of its phases
    assert json.loads(js.read_text())["selected"]["ref"] == "agent@2"


def test_a_dyna_report_shows_each_arms_training_data_and_why_its_rollouts_failed(tmp_path):
    from webenv.v1 import collector_pb2, common_pb2
    failed = collector_pb2.StoredEpisode(verdict=common_pb2.Verdict(results=[
        common_pb2.FactResult(outcome=common_pb2.FACT_OUTCOME_HOLDS, criterion_kind="url", reason="on the page"),
        common_pb2.FactResult(outcome=common_pb2.FACT_OUTCOME_FAILS, criterion_kind="answer",
                              reason="answer does not contain '21:30' (step 12)")]))
    # values and numbers masked: episodes failing the same way on different tasks count together
    assert reason_key(failed) == "answer: answer does not contain '…' (step N)"
    assert reason_key(collector_pb2.StoredEpisode(truncated=True)) == "cut at the step cap"
    assert reason_key(collector_pb2.StoredEpisode(error="deadline after 60 s")).startswith("errored: deadline after N")
    loop = loop_with([ev("agent@1", "test", 3)], ["agent@1"])
    loop.cfg.dyna = True
    loop.collections = [
        {"arm": "real", "env": "farm", "address": "", "run_id": "run-r", "episodes": 10, "passed": 4, "errored": 0,
         "by_kind": {"information": [3, 6], "transaction": [1, 4]}, "steps": 90, "browser_steps": 90, "seconds": 30.0,
         "failures": []},
        {"arm": "sim", "env": "world model", "address": "127.0.0.1:1", "run_id": "run-s", "episodes": 10, "passed": 1, "errored": 0,
         "by_kind": {"information": [1, 6], "transaction": [0, 4]}, "steps": 95, "browser_steps": 0, "seconds": 3.0,
         "failures": [("answer: answer does not contain '…'", 9)]}]
    md, js = write_report(loop.result(time.monotonic()), tmp_path, "webenv train --dyna")
    text = md.read_text()
    assert md.name == "dyna.md" and "| sim | world model | 10 | 1 | 1/6 | 0/0 | 0/4 | 95 | 0 | 3 |" in text
    assert "| --- |" + " --- |" * 9 + "\n| real |" in text  # the separator row has as many cells as the header
    assert "| 9 | answer: answer does not contain '…' |" in text
    assert json.loads(js.read_text())["collections"][1]["browser_steps"] == 0


class RecordingCollector:
    """Records the RunSpecs the loop starts (the loop's own choice of spec is what is checked, not a service)."""

    def __init__(self) -> None:
        self.specs = []

    def StartRun(self, req, timeout=None):
        from webenv.v1 import collector_pb2
        self.specs.append(req.spec)
        return collector_pb2.StartRunResponse(run=collector_pb2.Run(run_id=f"run-{len(self.specs)}"))

    def WatchRun(self, req):
        from webenv.v1 import collector_pb2
        yield collector_pb2.WatchRunResponse(run=collector_pb2.Run(run_id=req.run_id,
                                                                   state=collector_pb2.RUN_STATE_SUCCEEDED))


def test_only_the_collection_samples_by_the_loop_strategy_evaluations_are_uniform():
    from webenv.v1 import collector_pb2, common_pb2
    loop = loop_with([], [])
    loop.cfg.sampling, loop.cfg.algorithm, loop.say = "frontier", "filtered_bc", lambda _: None
    loop.collector, loop.train_families = RecordingCollector(), ("bank",)
    loop.run("eval-1-test", policy="agent@1", split=common_pb2.SPLIT_TEST, episodes=5, seed=7920)
    loop.collect(2, "agent@2", history=("run-collect-1",))
    evaluation, collection = loop.collector.specs
    # a frontier evaluation would follow each version's own history: versions compared on different tasks
    assert evaluation.sampling == collector_pb2.SAMPLING_STRATEGY_UNIFORM and not evaluation.history_run_ids
    assert collection.sampling == collector_pb2.SAMPLING_STRATEGY_FRONTIER
    assert list(collection.history_run_ids) == ["run-collect-1"]
    # the loop's concurrency (4: the collector's 16 ran episodes past their deadlines on 2 cores), halved for each
    # of the two runs --overlap keeps in flight
    loop.score, loop.save_progress = (lambda run_id, version, split: ev(version, split, 1)), (lambda: None)
    loop.evaluate("agent@2", common_pb2.SPLIT_TEST, 5, "eval-2-test", shared=True)
    loop.collect(3, "agent@2", shared=True)
    assert [s.concurrency for s in loop.collector.specs] == [4, 4, 2, 2]


class DemoCollector(RecordingCollector):
    """A RecordingCollector whose store holds a demonstration run: two passed demonstrations (3 and 5 steps)."""

    def ReadEpisodes(self, req, timeout=None):
        from webenv.v1 import collector_pb2
        assert req.filter.passed and list(req.run_ids) == ["run-demos"]
        for eid, n in (("demo-a", 3), ("demo-b", 5)):
            yield collector_pb2.ReadEpisodesResponse(episode=collector_pb2.StoredEpisode(episode_id=eid, step_count=n))


def test_demo_starts_take_their_share_of_a_collection_along_the_demonstrations():
    loop = loop_with([], [])
    loop.cfg.sampling, loop.cfg.algorithm, loop.say = "frontier", "filtered_bc", lambda _: None
    loop.cfg.collect_episodes, loop.cfg.demo_starts, loop.demo_run = 40, 0.25, "run-demos"
    loop.collector, loop.train_families = DemoCollector(), ("bank",)
    runs = loop.collect(1, "agent@1", history=("run-collect-0",))
    sampled, started = loop.collector.specs
    assert [r.run_id for r in runs] == ["run-1", "run-2"]
    # the sampled run keeps the rest and the frontier; the starts run draws no tasks and reads no history
    assert sampled.episodes == 30 and list(sampled.history_run_ids) == ["run-collect-0"]
    assert len(started.starts) == 10 and not started.episodes and not started.tasks.ListFields()
    assert not started.history_run_ids and started.act_options.temperature == loop.cfg.temperature
    lengths = {"demo-a": 3, "demo-b": 5}
    assert all(0 <= st.steps < lengths[st.episode_id] for st in started.starts)  # the policy takes at least one
    assert loop.plan_starts(1, 10) == list(started.starts), "seeded: the same iteration draws the same starts"


class BlockingCollector(RecordingCollector):
    """A run's watch stream that ends only when the run is stopped, as the collector's does."""

    def __init__(self) -> None:
        super().__init__()
        import threading
        self.stopped = threading.Event()

    def WatchRun(self, req):
        from webenv.v1 import collector_pb2
        self.stopped.wait(30)
        yield collector_pb2.WatchRunResponse(run=collector_pb2.Run(run_id=req.run_id,
                                                                   state=collector_pb2.RUN_STATE_STOPPED))

    def StopRun(self, req, timeout=None):
        from webenv.v1 import collector_pb2
        self.stopped.set()
        return collector_pb2.StopRunResponse(run=collector_pb2.Run(run_id=req.run_id))


def test_an_interrupted_loop_stops_the_collection_it_overlaps():
    import threading
    loop = loop_with([], [])
    loop.cfg.algorithm, loop.say = "filtered_bc", lambda _: None
    loop.collector, loop.train_families = BlockingCollector(), ("bank",)
    collecting = threading.Thread(target=loop.collect, args=(1, "agent@1"))
    collecting.start()
    deadline = time.monotonic() + 10
    while not loop.live and time.monotonic() < deadline:
        time.sleep(0.01)
    loop.stop_live()  # what the loop does when its evaluation is interrupted (Ctrl-C, SIGTERM)
    collecting.join(5)
    assert not collecting.is_alive() and not loop.live


def test_a_cut_off_loop_leaves_its_figures_and_the_report_replaces_them(tmp_path):
    loop = loop_with([ev("agent@1", "test", 3)], ["agent@1"])
    loop.cfg.out_dir, loop.t_start = str(tmp_path), time.monotonic()
    loop.evals[0].outcomes = {"t1": [1, 1], "t2": [0, 1]}
    loop.save_progress()  # what the loop does after every evaluation
    partial = json.loads((tmp_path / "learning.partial.json").read_text())
    assert partial["evaluations"][0]["outcomes"] == {"t1": [1, 1], "t2": [0, 1]}
    write_report(loop.result(loop.t_start), tmp_path, "webenv train")
    assert not (tmp_path / "learning.partial.json").exists() and (tmp_path / "learning.json").exists()


def test_the_seeds_report_pairs_rl_with_its_own_warm_start_on_the_same_tasks(tmp_path):
    seeds = learning_seeds()
    # 10 test tasks: BC solves 2, RL the same 2 and 4 more (6 discordant wins, 0 losses)
    bc = ev("agent@1", "test", 2)
    bc.outcomes = {f"t{i}": [int(i < 2), 1] for i in range(10)}
    rl = ev("agent@2", "test", 6)
    rl.outcomes = {f"t{i}": [int(i < 6), 1] for i in range(10)}
    val = [ev("agent@1", "validation", 1), ev("agent@2", "validation", 4)]
    loop = loop_with([bc, rl, *val, ev("random", "test", 0)], ["agent@1", "agent@2"])
    loop.checkpoints[0]["label"], loop.checkpoints[1]["label"] = "bc", "rl-1"
    for i, folder in enumerate(("s1", "s2")):
        (tmp_path / folder).mkdir()
        config = {"seed": i + 1, "algorithm": "partial", "kl_coef": 0.1 * i}
        result = loop.result(time.monotonic()) | {"config": config}
        (tmp_path / folder / "learning.json").write_text(json.dumps(result))
    assert seeds.main([str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "README.md")]) == 0
    summary = json.loads((tmp_path / "README.json").read_text())
    test = summary["suites"]["test"]
    assert test["n"] == 20 and test["wins"] == 8 and test["losses"] == 0 and abs(test["gain"] - 0.4) < 1e-9
    assert test["ci95"][0] > 0.15 and test["p"] < 0.01 and summary["goal_met"] is False  # two seeds, not three
    text = (tmp_path / "README.md").read_text()
    assert "| test | 2 | 20.0% | 60.0% | +40.0 |" in text and "| random |" not in text.split("## Transactions")[0].split("| suite")[0]
    # by kind of task (a task id's last part): here every task is its own kind, pooled over the two seeds
    assert "| t1 | - | - | 2/2 | 2/2 | - |" in text and "| t5 | - | - | 0/2 | 2/2 | - |" in text
    assert summary["by_task_kind"]["t5"] == {"test bc": [0, 2], "test rl": [2, 2]}
    # the same runs read as arms of an ablation: one row per arm, named by its algorithm and options
    assert seeds.main(["--ablation", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "abl.md")]) == 0
    arms = json.loads((tmp_path / "abl.json").read_text())["arms"]
    # (named by the options set away from the reported recipe's: its KL term is 0.5)
    assert [a["arm"] for a in arms] == ["partial, kl_coef 0.0", "partial, kl_coef 0.1"]
    assert arms[0]["suites"]["test"]["wins"] == 4 and abs(arms[0]["suites"]["test"]["gain"] - 0.4) < 1e-9
    assert "| partial, kl_coef 0.1 | 2 | agent@2 | 20.0% -> 60.0%, +40.0 [" in (tmp_path / "abl.md").read_text()



def test_the_seeds_report_has_the_held_out_builders_goal_and_a_table_by_builder_and_kind(tmp_path):
    seeds = learning_seeds()
    evals = []
    for version, split, k in (("agent@1", "test", 2), ("agent@2", "test", 5), ("agent@1", "builders:govform,hashapp", 1),
                              ("agent@2", "builders:govform,hashapp", 4), ("oracle", "builders:govform,hashapp", 6),
                              ("agent@1", "validation", 1), ("agent@2", "validation", 3)):
        e = ev(version, split, k)
        e.episodes = 6
        e.outcomes = {f"{split}-t{i}": [int(i < k), 1] for i in range(6)}
        if split.startswith("builders"):  # 3 govform information tasks, 3 hashapp transactions
            e.by_builder = {"govform/information": [min(k, 3), 3], "hashapp/transaction": [max(0, k - 3), 3]}
        evals.append(e)
    loop = loop_with(evals, ["agent@1", "agent@2"])
    loop.checkpoints[0]["label"], loop.checkpoints[1]["label"] = "bc", "rl-1"
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "learning.json").write_text(json.dumps(loop.result(time.monotonic()) | {"config": {"seed": 1}}))
    assert seeds.main([str(tmp_path / "s1"), "--out", str(tmp_path / "README.md")]) == 0
    summary = json.loads((tmp_path / "README.json").read_text())
    got = summary["suites"]["builders:govform,hashapp"]
    assert abs(got["gain"] - 0.5) < 1e-9 and summary["builders_goal_met"] is False  # one seed, not three
    text = (tmp_path / "README.md").read_text()
    assert "Goal (issue 48: >= 15 points on the held-out builders' websites over 3 seeds): not met" in text
    assert "| govform | builders | information | 1/3 (33%) | 3/3 (100%) | 3/3 (100%) | - |" in text
    assert "| hashapp | builders | transaction | 0/3 (0%) | 1/3 (33%) | 3/3 (100%) | - |" in text
    # with the catalog's validation (gzipped JSONL, as committed): its tasks, oracle passes, failures and floor
    import gzip

    from webenv.cli.validation import Check, TaskReport

    lines = [TaskReport(f"synthetic/x-{i}/info-0", "synthetic", "information", "govform",
                        {"oracle": Check(i != 1, "" if i != 1 else "no pass"), "floor": Check(True)}, floor=0.5 * (i == 2))
             for i in range(3)]
    with gzip.open(tmp_path / "v.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r.as_dict()) + "\n" for r in lines)
    assert seeds.main([str(tmp_path / "s1"), "--validity", str(tmp_path / "v.jsonl.gz"), "--out",
                       str(tmp_path / "V.md")]) == 0
    text = (tmp_path / "V.md").read_text()
    assert "| govform | builders | information | 1/3 (33%) | 3/3 (100%) | 3/3 (100%) | - | 3 | 2/3 (67%) | 1 | 0.50 |" in text
    assert "| hashapp | builders | transaction | 0/3 (0%) | 1/3 (33%) | 3/3 (100%) | - | - | - | - | - |" in text


def test_versus_pairs_two_runs_of_the_same_seed_version_by_version(tmp_path):
    seeds = learning_seeds()

    def run(folder: str, seed: int, bc_solves: int, rl_solves: int) -> Path:
        bc, rl = ev("agent@1", "test", bc_solves), ev("agent@2", "test", rl_solves)
        bc.outcomes = {f"t{i}": [int(i < bc_solves), 1] for i in range(10)}
        rl.outcomes = {f"t{i}": [int(i < rl_solves), 1] for i in range(10)}
        loop = loop_with([bc, rl, ev("agent@1", "validation", 1), ev("agent@2", "validation", 4)], ["agent@1", "agent@2"])
        loop.checkpoints[0]["label"], loop.checkpoints[1]["label"] = "bc", "rl-1"
        (tmp_path / folder).mkdir(parents=True)
        result = loop.result(time.monotonic()) | {"config": {"seed": seed, "algorithm": "filtered_bc"}}
        (tmp_path / folder / "learning.json").write_text(json.dumps(result))
        return tmp_path / folder

    a, b = run("scorer/seed1", 1, 2, 6), run("encoder/seed1", 1, 4, 7)
    assert seeds.main([str(a), "--versus", str(b), "--out", str(tmp_path / "vs.md")]) == 0
    test = json.loads((tmp_path / "vs.json").read_text())["suites"]["test"]
    assert test["bc"]["wins"] == 2 and test["bc"]["losses"] == 0 and abs(test["bc"]["gain"] - 0.2) < 1e-9
    assert test["rl"]["wins"] == 1 and abs(test["rl"]["gain"] - 0.1) < 1e-9
    assert "| test | selected | 60.0% | 70.0% | +10.0 |" in (tmp_path / "vs.md").read_text()
    # runs of different seeds are not paired, and each A needs its B
    other = run("encoder/seed2", 2, 4, 7)
    try:
        seeds.main([str(a), "--versus", str(other), "--out", str(tmp_path / "bad.md")])
        raise AssertionError("seeds 1 and 2 were paired")
    except SystemExit as exc:
        assert "same seed" in str(exc)
    assert seeds.main([str(a), "--versus", str(b), str(other), "--out", str(tmp_path / "bad.md")]) == 2

class RecordingPolicy:
    def __init__(self) -> None:
        self.loaded = []

    def LoadCheckpoint(self, req, timeout=None):
        from webenv.v1 import policy_pb2
        self.loaded.append(req.ref)
        return policy_pb2.LoadCheckpointResponse(policy=policy_pb2.PolicyInfo(version=req.ref))


def test_eval_mode_selected_runs_the_reported_suites_only_on_bc_and_the_checkpoint_chosen_on_validation():
    """`--eval-mode selected`: every RL checkpoint runs validation; test, the held-out family and builders, MiniWoB++
    and the hand-made websites run on the BC warm start and, after the loop, on the one chosen on validation (no test figure of any other exists)."""
    from types import SimpleNamespace

    loop = loop_with([], [])
    loop.cfg.eval_mode, loop.cfg.iterations, loop.cfg.overlap, loop.cfg.train_eval_episodes = "selected", 3, False, 0
    loop.cfg.baselines, loop.cfg.oracle_ceiling, loop.cfg.reference_demo_episodes = (), False, 0
    loop.say, loop.miniwob_ids, loop.policy = (lambda _: None), ("miniwob/click-test",), RecordingPolicy()
    loop.handmade_ids = ("rubric/handmade-quillpine-1",)
    validation = {"agent@1": 2, "agent@2": 6, "agent@3": 4, "agent@4": 5}  # agent@2 is the best on validation

    def fake_evaluate(version, suite, label, run_args):
        e = ev(version, suite, validation[version] if suite == "validation" else 1)
        loop.evals.append(e)
        return e

    def fake_train(label, algorithm, run_ids, parent, epochs):
        ref = f"agent@{len(loop.checkpoints) + 1}"
        loop.checkpoints.append({"ref": ref})
        return SimpleNamespace(ref=ref)

    loop.prepare = loop.baselines_and_ceiling = lambda: None
    loop._evaluate, loop.train = fake_evaluate, fake_train
    loop.collect = lambda it, version, history=(): [SimpleNamespace(run_id=f"run-collect-{it}")]
    loop.run = lambda *a, **k: SimpleNamespace(run_id="run-demos")
    result = loop.run_loop()
    ran = {(e.version, e.split) for e in loop.evals}
    reported = {"test", "family:shop", "builders:govform,hashapp", "miniwob", "handmade"}
    assert {v for v, s in ran if s == "validation"} == {"agent@1", "agent@2", "agent@3", "agent@4"}
    assert {v for v, s in ran if s in reported} == {"agent@1", "agent@2"}  # BC and the selected only
    assert {s for v, s in ran if v == "agent@2"} == reported | {"validation"}
    assert result["selected"]["ref"] == "agent@2" and loop.policy.loaded == ["agent@2"]
    assert [e.split for e in loop.evals if e.version == "agent@2"] == ["validation", "test", "family:shop",
                                                                        "builders:govform,hashapp", "miniwob", "handmade"]


def test_the_kl_term_holds_each_rl_job_to_the_warm_start_or_to_its_parent():
    """`--kl-reference warm-start` (the default) names the BC checkpoint in every RL job; `parent` leaves the job's
    reference empty, which the trainer reads as the job's parent (the previous iterate)."""
    from webenv.v1 import trainer_pb2

    for reference, expected in (("warm-start", "agent@1"), ("parent", "")):
        loop = loop_with([], [])
        loop.cfg.algorithm, loop.cfg.kl_coef, loop.cfg.kl_reference = "filtered_bc", 0.5, reference
        loop.say, loop.warm_ref, loop.policy, specs = (lambda _: None), "agent@1", RecordingPolicy(), []

        class Trainer:
            def StartJob(self, req, timeout=None, specs=specs):
                specs.append(req.spec)
                return trainer_pb2.StartJobResponse(job=trainer_pb2.Job(job_id="j"))

        loop.trainer = Trainer()
        loop.watch_job = lambda job_id: trainer_pb2.Job(job_id=job_id, state=trainer_pb2.JOB_STATE_SUCCEEDED,
                                                        checkpoint=trainer_pb2.Checkpoint(ref="agent@3"))
        assert loop.train("rl-2", trainer_pb2.TRAINING_ALGORITHM_FILTERED_BC, ["run-d", "run-c1"], "agent@2", 4).ref \
            == "agent@3"
        (spec,) = specs
        assert (spec.parent, spec.options.kl_coef, spec.options.kl_reference) == ("agent@2", 0.5, expected), reference
