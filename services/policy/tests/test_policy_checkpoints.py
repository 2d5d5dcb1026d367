"""Trained checkpoints served without a restart: LoadCheckpoint, versions in ListPolicies and ActResponse,
pinned versions, sampling, and clear errors for bad references (real server, real channel)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import grpc
import pytest
import torch
from webenv.agent import checkpoints
from webenv.agent import scorer as lib
from webenv.agent.candidates import context, propose
from webenv.policy.synthetic import random_observation
from webenv.v1 import common_pb2, policy_pb2, trainer_pb2

AXTREE = ('[1] banner ""\n\t[2] link "Home"\n\t[3] search ""\n\t\t[4] searchbox "Search"\n\t\t[5] button "Go"\n'
          '[6] main ""\n\t[7] heading "Shop" level=1\n\t[8] link "Red Kettle"')


def publish(root: Path, name: str, version: int, seed: int) -> None:
    torch.manual_seed(seed)
    staging = Path(tempfile.mkdtemp(dir=root))
    lib.save(lib.ScorerModel(lib.ScorerConfig(buckets=1 << 12, dim=8, hidden=16)), staging)
    meta = trainer_pb2.Checkpoint(name=name, version=version, ref=f"{name}@{version}",
                                  algorithm=trainer_pb2.TRAINING_ALGORITHM_BC, model=trainer_pb2.MODEL_KIND_SCORER)
    checkpoints.publish(staging, root, meta)


def act_request(policy: str, step: int = 0, temperature: float = 0.0, episode_id: str = "ep-1") -> policy_pb2.ActRequest:
    obs = random_observation(__import__("random").Random(1))
    obs.axtree = AXTREE
    req = policy_pb2.ActRequest(episode_id=episode_id, policy=policy, observation=obs, step_index=step, seed=7,
                                instruction='Find "Red Kettle" and open it.')
    req.options.temperature = temperature
    return req


async def test_load_serve_and_pin_versions(serve_policy, policy_stub, tmp_path):
    publish(tmp_path, "agent", 1, seed=1)
    async with serve_policy(policy_checkpoint_dir=tmp_path) as (server, _), policy_stub(server) as stub:
        resp = await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="agent"), timeout=60)
        assert resp.policy.name == "agent" and resp.policy.version == "agent@1" and resp.policy.backend == "scorer"
        act = await stub.Act(act_request("agent"), timeout=30)
        assert act.policy == "agent" and act.policy_version == "agent@1" and act.model == "agent@1"
        ctx = context(act_request("agent").instruction, act_request("agent").observation, "", [], 0)
        assert act.action_text in {c.text for c in propose(ctx)}, "a scorer only ever picks a proposed action"
        assert act.memory == ctx.memory

        publish(tmp_path, "agent", 2, seed=2)  # a new version appears while serving
        await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="agent@2"), timeout=60)
        assert (await stub.Act(act_request("agent"), timeout=30)).policy_version == "agent@2"
        assert (await stub.Act(act_request("agent@1"), timeout=30)).policy_version == "agent@1", "pinned version"
        listed = {(p.name, p.version) for p in (await stub.ListPolicies(policy_pb2.ListPoliciesRequest())).policies}
        assert {("agent", "agent@1"), ("agent", "agent@2")} <= listed and ("oracle", "") in listed

        greedy = {(await stub.Act(act_request("agent@2"), timeout=30)).action_text for _ in range(3)}
        assert len(greedy) == 1, "temperature 0 is deterministic"
        sampled = [(await stub.Act(act_request("agent@2", step=s, temperature=5.0), timeout=30)).action_text
                    for s in range(12)]
        assert len(set(sampled)) > 1, "a temperature samples among the candidates"
        again = [(await stub.Act(act_request("agent@2", step=s, temperature=5.0), timeout=30)).action_text
                 for s in range(12)]
        assert sampled == again, "sampling is reproducible by (seed, episode, step)"

        async def sample(episode_id: str) -> list[str]:
            return [(await stub.Act(act_request("agent@2", step=s, temperature=5.0, episode_id=episode_id),
                                    timeout=30)).action_text for s in range(12)]

        # the same place in another run's plan (another random run id) samples the same; another place does not
        assert await sample("run-0a1b2c3d4e5f-000003") == await sample("run-9f8e7d6c5b4a-000003")
        assert await sample("run-0a1b2c3d4e5f-000003") != await sample("run-0a1b2c3d4e5f-000004")


@pytest.mark.parametrize(("ref", "code", "field"), [
    ("", grpc.StatusCode.INVALID_ARGUMENT, "ref"),
    ("../etc", grpc.StatusCode.INVALID_ARGUMENT, "ref"),
    ("agent@0", grpc.StatusCode.INVALID_ARGUMENT, "ref"),
    ("oracle", grpc.StatusCode.INVALID_ARGUMENT, "ref"),
    ("ghost", grpc.StatusCode.NOT_FOUND, "ref"),
    ("agent@9", grpc.StatusCode.NOT_FOUND, "ref"),
])
async def test_bad_references_are_refused_by_field(serve_policy, policy_stub, tmp_path, ref, code, field):
    publish(tmp_path, "agent", 1, seed=1)
    async with serve_policy(policy_checkpoint_dir=tmp_path) as (server, _), policy_stub(server) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=ref), timeout=30)
        assert err.value.code() == code and field in err.value.details()
    shutil.rmtree(tmp_path / "agent")


async def test_scorer_needs_the_axtree(serve_policy, policy_stub, tmp_path):
    publish(tmp_path, "agent", 1, seed=1)
    async with serve_policy(policy_checkpoint_dir=tmp_path, policy_checkpoints="agent") as (server, _), \
            policy_stub(server) as stub:
        req = act_request("agent")
        req.observation.axtree = ""
        del req.observation.formats[:]  # the caller did not ask for the AXTREE
        req.observation.formats.append(common_pb2.OBSERVATION_FORMAT_ELEMENTS)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Act(req, timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "observation.axtree" in err.value.details()
        # asked for and made empty (about:blank, a page with nothing accessible): acted on, never refused
        req.observation.formats.append(common_pb2.OBSERVATION_FORMAT_AXTREE)
        act = await stub.Act(req, timeout=30)
        cands = propose(context(req.instruction, req.observation, "", [], 0))
        assert act.action_text in {c.text for c in cands} and {"go_back()", 'answer("done")'} <= {c.text for c in cands}
        # every candidate repeated out (a question has no "done"; go_back taken twice): go_back, no empty ranking
        req.instruction = "What is the price of the Red Kettle?"
        req.step_index = 2
        req.history.extend([policy_pb2.HistoryEntry(action_text="go_back()", url="about:blank")] * 2)
        ctx = context(req.instruction, req.observation, "", [(h.action_text, "") for h in req.history], 2)
        assert propose(ctx) == []
        act = await stub.Act(req, timeout=30)
        assert act.action.WhichOneof("kind") == "go_back"


async def test_encoder_checkpoint_loads_acts_and_round_trips(serve_policy, policy_stub, tmp_path):
    from webenv.agent import encoder as enc

    torch.manual_seed(1)
    staging = Path(tempfile.mkdtemp(dir=tmp_path))
    enc.save(enc.new(enc.EncoderConfig(tune_layers=1)), staging)
    assert (staging / "encoder" / "config.json").is_file() and (staging / "head.pt").is_file()
    checkpoints.publish(staging, tmp_path, trainer_pb2.Checkpoint(
        name="enc", version=1, ref="enc@1", algorithm=trainer_pb2.TRAINING_ALGORITHM_BC,
        model=trainer_pb2.MODEL_KIND_ENCODER))
    async with serve_policy(policy_checkpoint_dir=tmp_path) as (server, _), policy_stub(server) as stub:
        resp = await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="enc"), timeout=300)
        assert resp.policy.version == "enc@1" and resp.policy.backend == "encoder"
        act = await stub.Act(act_request("enc"), timeout=120)
        assert act.policy_version == "enc@1"
    req = act_request("enc")
    ctx = context(req.instruction, req.observation, "", [], 0)
    cands = propose(ctx)
    assert act.action_text in {c.text for c in cands}, "the encoder only ever picks a proposed action"
    # the published folder round-trips: loaded here, it ranks the step as the service did
    local = enc.Encoder(enc.load(checkpoints.resolve(tmp_path, "enc@1")))
    logp = local.log_probs(ctx, cands)
    assert cands[max(range(len(cands)), key=logp.__getitem__)].text == act.action_text
