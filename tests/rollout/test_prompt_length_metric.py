"""The step's longest prompt is logged per agent and overall (it sizes the update's memory)."""

from teamrl.rollout.summary import sample_metrics
from teamrl.sample import Sample


def _sample(agent: str, prompt_len: int, completion_len: int) -> Sample:
    return Sample(
        agent=agent,
        policy="shared",
        turn=0,
        group=(0, 0, agent),
        prompt_ids=list(range(prompt_len)),
        completion_ids=[1] * completion_len,
        sampler_logprobs=[0.0] * completion_len,
    )


def test_prompt_length_is_the_maximum_per_agent_and_overall():
    samples = [_sample("tool", 5, 2), _sample("tool", 9, 4), _sample("reasoner", 40, 3)]
    m = sample_metrics(samples, ["tool", "reasoner", "absent"])
    assert m["prompt_length/tool/max"] == 9.0  # a maximum, not the mean 7
    assert m["prompt_length/reasoner/max"] == 40.0
    assert m["prompt_length/max"] == 40.0
    assert "prompt_length/absent/max" not in m  # an agent without samples logs nothing
    assert m["completion_length/tool"] == 3.0  # the other metrics are unchanged
