"""The suffix drafter behind the server: drafts from the same key's past answers, never another key's,
its history's size on /metrics, and its file written at shutdown only when asked."""

from __future__ import annotations

import pytest

from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters import HistoryStore, NgramDrafter, SuffixDrafter
from adaptive_spec.models import LoadedModel
from adaptive_spec.server import Settings, create_app
from adaptive_spec.server.cli import _suffix_file
from adaptive_spec.server.run import serving_in_thread
from policies.registry import PolicyRegistry
from server_kit import MODEL, ChatNumberTokenizer, client
from tiny import one_thread, tiny_llama

PROMPT = "<30> <31> <5> <9> <13>"
FORCE_SUFFIX = {"speculation": {"mode": "static", "drafter": "suffix", "k": 8}}


def suffix_decoder(store: HistoryStore, policy: str = "plain", observers=None) -> SpeculativeDecoder:
    model = tiny_llama(seed=3)
    target = LoadedModel(name=MODEL, model=model, tokenizer=ChatNumberTokenizer(model.config.vocab_size))
    return SpeculativeDecoder(target, [NgramDrafter(), SuffixDrafter(store)], policy=PolicyRegistry(policy, ["ngram", "suffix"]),
                              observers=observers)


def gauges(text: str) -> dict[str, float]:
    return {line.split(" ")[0][len("adaptive_spec_suffix_history_"):]: float(line.split(" ")[1])
            for line in text.splitlines() if line.startswith("adaptive_spec_suffix_history_")}


@pytest.mark.parametrize("max_batch", [1, 4], ids=["batch-1", "batched"])
def test_a_keys_repeated_answer_is_drafted_from_its_history_and_only_for_that_key(max_batch):
    from adaptive_spec.telemetry.spec import build_prometheus_observer

    store = HistoryStore()
    decoder = suffix_decoder(store, observers=[build_prometheus_observer([])])
    app = create_app(lambda: decoder, MODEL, Settings(max_batch=max_batch))
    with one_thread(), serving_in_thread(app, timeout_s=30) as url, client(url) as http:
        def ask(key: str) -> dict:
            response = http.post("/v1/completions", headers={"X-Traffic-Key": key},
                                 json={"prompt": PROMPT, "max_tokens": 24, "temperature": 0, **FORCE_SUFFIX})
            assert response.status_code == 200, response.text
            return response.json()

        assert gauges(http.get("/metrics").text) == {"tokens": 0, "outputs": 0, "keys": 0, "memory_bytes": 0}
        first, again, other = ask("tenant-a"), ask("tenant-a"), ask("tenant-b")
        exposition = http.get("/metrics").text
        shown = gauges(exposition)
    plain = decoder.generate(decoder.tokenizer(PROMPT)["input_ids"], max_new_tokens=24, policy=PolicyRegistry("plain", []).get(""))
    assert first["choices"][0]["text"] == again["choices"][0]["text"] == other["choices"][0]["text"] == plain.text
    spec = [r["metrics"]["speculative_decoding"]["num_accepted_draft_tokens"] for r in (first, again, other)]
    assert spec[1] >= 16 and spec[1] > spec[0]  # most of the answer, from tenant-a's first one
    assert spec[2] == spec[0]  # tenant-b drafts from its own request only, as tenant-a's first did
    # telemetry labels its steps as the other drafters' (vLLM's spec-decode counters, by drafter)
    assert any(line.startswith("adaptive_spec_spec_decode_accepted_tokens_total{") and 'adaptive_spec_drafter="suffix"' in line
               for line in exposition.splitlines()), exposition
    assert shown["tokens"] == 3 * 24 and shown["outputs"] == 3 and shown["keys"] == 2 and shown["memory_bytes"] > 0


def test_the_history_is_saved_at_shutdown_when_asked_and_loads_in_a_new_server(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTIVE_SPEC_CACHE", str(tmp_path))
    path = _suffix_file(MODEL)
    store = HistoryStore()
    decoder = suffix_decoder(store)
    app = create_app(lambda: decoder, MODEL, Settings(), on_shutdown=lambda: store.save(path, MODEL))
    with one_thread(), serving_in_thread(app, timeout_s=30) as url, client(url) as http:
        answer = http.post("/v1/completions", headers={"X-Traffic-Key": "a"},
                           json={"prompt": PROMPT, "max_tokens": 16, "temperature": 0}).json()
        assert not path.exists()  # written at shutdown, not per request
    assert path.parent == tmp_path / "suffix" and path.exists()
    restarted = HistoryStore()
    assert restarted.load(path, MODEL) == 1
    def accepted(store: HistoryStore) -> int:
        decoder = suffix_decoder(store)
        result = decoder.generate(decoder.tokenizer(PROMPT)["input_ids"], max_new_tokens=16, key="a",
                                  force_drafter="suffix", force_k=8)
        assert result.text == answer["choices"][0]["text"]
        return result.stats.accepted_tokens

    assert accepted(restarted) > accepted(HistoryStore())  # the saved answer is drafted from after the restart
