"""The server on the embedded SmolLM2 through the official ``openai`` client (marked ``real_model``)."""

import openai
import pytest

from adaptive_spec import SpeculativeDecoder, load_model
from adaptive_spec.bench import load_prompts
from adaptive_spec.drafters import build_drafter
from policies import PolicyRegistry, StaticPolicy
from server_kit import live_server

pytestmark = pytest.mark.real_model

PROMPTS = [p.prompt for p in load_prompts("benchmarks/engine.jsonl")][:2]
STATIC = {"mode": "static", "drafter": "ngram", "k": 8}


@pytest.fixture(scope="module")
def served():
    target = load_model("smollm2")
    decoder = SpeculativeDecoder(target, [build_drafter("ngram", target)], policy=PolicyRegistry("adaptive", ["ngram"]))
    with live_server(decoder, timeout_s=120, model="smollm2") as (url, _):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300), decoder


def test_completions_and_streams_equal_the_engine_in_process(served):
    api, decoder = served
    for prompt in PROMPTS:
        ids = list(decoder.tokenizer(prompt)["input_ids"])
        expected = decoder.generate(ids, max_new_tokens=32, policy=StaticPolicy("ngram", 8)).text
        out = api.completions.create(model="smollm2", prompt=prompt, max_tokens=32, temperature=0,
                                     extra_body={"speculation": STATIC})
        assert out.choices[0].text == expected and out.usage.completion_tokens == 32
        streamed = api.completions.create(model="smollm2", prompt=prompt, max_tokens=32, temperature=0, stream=True,
                                          extra_body={"speculation": STATIC})
        assert "".join(c.choices[0].text for c in streamed if c.choices) == expected


def test_chat_applies_the_models_template(served):
    api, decoder = served
    expected = decoder.generate(PROMPTS[0], max_new_tokens=24, policy=StaticPolicy("ngram", 8))  # templated as a user turn
    out = api.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=24,
                                      temperature=0, extra_body={"speculation": STATIC})
    assert out.choices[0].message.content == expected.text
    assert out.usage.prompt_tokens == expected.stats.prompt_tokens
    spec = out.model_extra["metrics"]["speculative_decoding"]
    assert spec["num_spec_steps"] > 0 and spec["num_accepted_draft_tokens"] > 0  # a copy prompt: drafts accepted
