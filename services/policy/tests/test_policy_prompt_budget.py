"""One prompt and context budget for serving and training: the prompt a policy served for a step (real gRPC, the
transformers backend) is token for token the prompt the trainer rebuilds from the stored step (webenv.agent.steps
+ webenv.agent.prompt.prompt_ids under the policy's PromptBudget), the model's own Memory line carried to the next
step included, and an over-long page is cut the same way on both sides."""

from __future__ import annotations

import random

from webenv.agent.prompt import prompt_ids, step_prompt
from webenv.agent.steps import episode_steps
from webenv.llm import encode
from webenv.policy.synthetic import random_observation, request
from webenv.v1 import collector_pb2, policy_pb2

MAX_NEW = 6


async def test_training_prompt_is_the_serving_prompt(serve_policy, policy_stub, tiny_model):
    rng = random.Random(7)
    pages = [random_observation(rng, n=4), random_observation(rng, n=400)]  # the second overflows the context
    async with serve_policy(policy_model_path=str(tiny_model), policy_max_new_tokens=MAX_NEW,
                            policy_max_observation_chars=100_000) as (server, app), policy_stub(server) as stub:
        llm = app.policies["llm"]
        tok, budget = app.batcher.backend.tokenizer, llm.budget
        history: list[policy_pb2.HistoryEntry] = []
        episode = collector_pb2.StoredEpisode(episode_id="ep-budget")
        served = []
        for i, page in enumerate(pages):
            req = request(page, policy="llm", episode_id="ep-budget", seed=1, step_index=i)
            req.history.extend(history)
            if i == 0:
                episode.task.CopyFrom(req.task)
            resp = await stub.Act(req, timeout=60)
            served.append((encode(tok, llm.generation_request(req), budget.prompt_room), resp.prompt_tokens))
            # what the collector stores and hands on (webenv.collector.episode)
            said = f"Memory: the cart is empty\nAction: {resp.action_text}"  # a model answer carrying memory
            episode.trajectory.steps.add(step_index=i, observation=page, action=resp.action, url_after=page.url,
                                         action_text=resp.action_text, raw_output=said,
                                         completion_token_ids=resp.completion_token_ids)
            history.append(policy_pb2.HistoryEntry(action_text=resp.action_text, url=page.url,
                                                   memory="the cart is empty"))
        steps = list(episode_steps(episode))
        rebuilt = [prompt_ids(tok, step_prompt(st.request, budget), budget) for st in steps]
    assert budget.context_tokens == 2048 and budget.new_tokens == MAX_NEW
    for (ids, counted), train in zip(served, rebuilt, strict=True):
        assert ids == train and counted == len(ids)
    assert len(served[1][0]) == budget.prompt_room, "the long page is cut to the same last tokens on both sides"
    # the model's own memory reaches the next prompt (before the cut: a page this long leaves only its tail)
    assert "Memory: the cart is empty" in step_prompt(steps[1].request, budget).user
