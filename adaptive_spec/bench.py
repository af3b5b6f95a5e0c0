"""Side-by-side speed benchmark: our decoder's configs and transformers' peers, in one process.

Every config runs on every prompt, interleaved prompt by prompt so that slow drifts of the
machine (thermal, other load) hit all configs alike, after one warm-up generation each; the
configs' order is rotated every round and every prompt (``paired.schedule``) so that none always
runs first or last. Greedy only: then every config must produce exactly the ``plain`` config's
tokens, and the benchmark checks that it does, in every round.

The JSON keeps every round's figures (``per_round``: seconds, new tokens, equality with plain and
position in the order, [prompt][round] per config) and the paired comparisons computed from them
(``paired``: median tokens/s ratio per (round, prompt) unit with a 95% bootstrap interval, see
``adaptive_spec.paired``). The per-config summary (``configs``) reports each (config, prompt) by
its median round, as before: aggregate ``tokens_per_s`` is total new tokens / total wall seconds
of those rows (not a mean of rates).
"""

from __future__ import annotations

import os
import platform
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import torch
import transformers

from adaptive_spec import bench_checkpoint
from adaptive_spec.config import GenerationConfig
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters import HistoryStore, SuffixDrafter, build_drafter
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.hf_peers import HF_PEERS, HFPeer
from adaptive_spec.models import LoadedModel
from adaptive_spec.paired import METHOD, REPORT_HEADER, paired_report, position_counts, report_rows, schedule
from adaptive_spec.prompts import Prompt, load_prompts  # noqa: F401 (re-exported: bench's prompt files)
from policies.base import Policy
from policies.registry import make_policy, parse_spec

ADAPTIVE_DRAFTERS = ("ngram", "int8")  # what `adaptive` may choose from in the benchmark
# `adaptive` with the suffix drafter available too (drafting from the outputs of earlier prompts)
ADAPTIVE_SUFFIX = "adaptive-suffix"


@dataclass
class BenchConfig:
    name: str
    drafters: tuple[str, ...] = ()
    make_policy: Callable[[], Policy] | None = None  # engine configs
    peer: str | None = None  # transformers configs
    policy: Policy | None = field(default=None, repr=False)  # one long-lived instance per run


def parse_config(name: str) -> BenchConfig:
    """A bench config: one of the transformers peers (``HF_PEERS``) or a policy spec in the grammar
    of ``policies.registry.parse_spec`` (``plain``, ``static:int8:8+early_stop=learned``,
    ``heuristic:ngram``, ``adaptive+max_k=8``). ``adaptive`` chooses among ``ADAPTIVE_DRAFTERS``."""
    if name in HF_PEERS:
        return BenchConfig(name, ("int8",) if name == "hf-assisted-int8" else (), peer=name)
    if name == ADAPTIVE_SUFFIX:
        drafters = (*ADAPTIVE_DRAFTERS, "suffix")
        return BenchConfig(name, drafters, lambda: make_policy("adaptive", list(drafters)))
    try:
        spec = parse_spec(name)
    except ValueError as exc:
        peers = ", ".join(HF_PEERS)
        raise InvalidParameterError("configs", name, f"{exc}; or a transformers peer, one of {peers}") from exc
    drafters = {"plain": (), "adaptive": ADAPTIVE_DRAFTERS}.get(spec.kind, (spec.drafter,))
    try:
        make_policy(name, list(drafters))  # fail now on a bad spec, not after loading the models
    except ValueError as exc:
        raise InvalidParameterError("configs", name, str(exc)) from exc
    return BenchConfig(name, drafters, lambda: make_policy(name, list(drafters)))


def bench_configs(config_names: list[str]) -> list[BenchConfig]:
    """The configs a run measures: ``config_names`` parsed, with ``plain`` first when it is not
    among them (the reference every output is compared with). A name given twice is refused: its
    runs would share one row per prompt, each round counted twice, as if ``rounds`` were doubled."""
    seen = set()
    for name in config_names:
        if name in seen:
            raise InvalidParameterError("configs", name, "given twice; name each config once")
        seen.add(name)
    configs = [parse_config(name) for name in config_names]
    if "plain" not in config_names:
        configs.insert(0, parse_config("plain"))
    return configs


def check_prompts_fit(decoder: SpeculativeDecoder, prompts: list[Prompt], encoded: list[list[int]],
                      cfg: GenerationConfig) -> None:
    """Every prompt and the token budget fit the model's context, checked before the first
    generation: a long prompt late in the file must not end a run there. The error names the prompt."""
    for prompt, ids in zip(prompts, encoded):
        try:
            decoder.check_fits(ids, cfg)
        except InvalidParameterError as exc:
            raise InvalidParameterError(exc.name, exc.value, f"prompt {prompt.id!r}: {exc.reason}") from None


def run_bench(
    target: LoadedModel,
    prompts: list[Prompt],
    config_names: list[str],
    max_new_tokens: int,
    progress: Callable[[str], None] | None = None,
    record_steps: bool = False,
    observers: list | None = None,
    rounds: int = 1,
    checkpoint: str | os.PathLike | None = None,
) -> dict:
    """Run every config on every prompt, interleaved prompt by prompt, ``rounds`` times over, the
    configs' order rotated each round and prompt.

    Every round's figures are kept (``per_round``) and compared in pairs (``paired``); each
    (config, prompt) of ``configs`` is reported by its median round (its seconds, and that round's
    steps). Controllers stay long-lived across rounds, as in a service that sees the same traffic
    again.

    A config with the ``suffix`` drafter has a decoder and a history of past outputs of its own,
    emptied at the start of every round: within a round it drafts from the outputs of the prompts
    before the current one, in file order, as a service seeing that stream once would; never from
    another config's answer to the same prompt, nor from an earlier round's.

    With ``checkpoint`` (a file path) the run's state is saved there after every prompt, and a run
    of the same command resumes from it (``bench_checkpoint``)."""
    if not (isinstance(rounds, int) and rounds >= 1):
        raise InvalidParameterError("rounds", rounds, "must be an integer >= 1")
    ids = [p.id for p in prompts]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:  # outputs are compared with plain's by id: a repeated id compares two prompts
        raise InvalidParameterError("prompts", repeated, "duplicate ids; each prompt needs its own")
    configs = bench_configs(config_names)
    names = [c.name for c in configs]
    state = bench_checkpoint.BenchState(
        bench_checkpoint.signature(target.name, prompts, names, max_new_tokens, rounds, record_steps))
    if checkpoint is not None:
        state = bench_checkpoint.load(checkpoint, state.signature) or state
    state.begin_session()
    drafter_specs = sorted({d for c in configs for d in c.drafters if d not in ("none", "suffix")})
    drafters = {spec: build_drafter(spec, target) for spec in drafter_specs}
    decoder = SpeculativeDecoder(target, drafters.values(), observers=observers)
    histories = state.histories or {c.name: HistoryStore() for c in configs if "suffix" in c.drafters}
    decoders = {name: SpeculativeDecoder(target, [*drafters.values(), SuffixDrafter(store)], observers=observers)
                for name, store in histories.items()}
    gen_cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    peers = {
        c.name: HFPeer(c.peer, target.model, decoder.eos_ids, drafters["int8"].lm.model if c.peer == "hf-assisted-int8" else None)
        for c in configs if c.peer
    }
    encoded = [decoder.encode_prompt(p.prompt) for p in prompts]
    check_prompts_fit(decoder, prompts, encoded, gen_cfg)

    def run_one(c: BenchConfig, ids: list[int], cfg: GenerationConfig, key: str = "") -> dict:
        if c.peer:
            tokens, seconds = peers[c.name].generate(ids, cfg.max_new_tokens)
            return {"token_ids": tokens, "seconds": seconds}
        result = decoders.get(c.name, decoder).generate(ids, cfg, policy=c.policy, key=key)
        s = result.stats
        out = {"token_ids": result.token_ids, "seconds": s.elapsed_s, "acceptance_rate": s.acceptance_rate,
               "mean_acceptance_length": s.mean_acceptance_length, "steps": s.steps, "drafts": s.drafts,
               "draft_tokens": s.draft_tokens, "accepted_tokens": s.accepted_tokens, "prefill_s": s.prefill_s}
        if record_steps:
            out["step_records"] = [[o.drafter, o.k, o.proposed, o.num_accepted, o.emitted, round(o.draft_s, 6), round(o.verify_s, 6)]
                                   for o in result.steps]
        return out

    for c in configs:  # first calls pay for allocator growth and kernel selection per shape: keep them out
        if c.make_policy:
            c.policy = c.make_policy()
        if not state.done:  # (a finished checkpoint is only summarized: nothing to warm up)
            # a key of its own: a suffix drafter's measured history (restored by a resumed run) never
            # holds the warm-up's answer
            run_one(c, encoded[0], gen_cfg, key="warm-up")
        if c.make_policy:  # the measured run starts with a fresh controller: it must learn on the job
            c.policy = state.policies[c.name] if c.name in state.policies else c.make_policy()

    runs: dict[tuple[str, int], list[dict]] = defaultdict(list, state.runs)  # (config, prompt) -> a row per round
    by_name = {c.name: c for c in configs}
    for round_ in range(state.next_round, rounds):
        first = state.next_prompt if round_ == state.next_round else 0
        if first == 0:
            for store in histories.values():
                store.clear()
        for i in range(first, len(prompts)):
            prompt, ids = prompts[i], encoded[i]
            for position, name in enumerate(schedule(names, round_, i)):
                if progress:
                    where = f"round {round_ + 1}/{rounds} · " if rounds > 1 else ""
                    progress(f"{where}[{i + 1}/{len(prompts)}] {prompt.id} · {name}")
                out = run_one(by_name[name], ids, gen_cfg)
                out.update(id=prompt.id, kind=prompt.kind, new_tokens=len(out["token_ids"]), position=position)
                out["tokens_per_s"] = out["new_tokens"] / out["seconds"]
                runs[(name, i)].append(out)
            if checkpoint is not None:
                state.advance(round_, i, len(prompts))
                state.runs, state.histories = dict(runs), histories
                state.policies = {c.name: c.policy for c in configs if c.policy is not None}
                bench_checkpoint.save(checkpoint, state)
    rows = {c.name: [_median_round(runs[(c.name, i)]) for i in range(len(prompts))] for c in configs}
    result = summarize(target.name, max_new_tokens, prompts, configs, rows, target.model)
    result["rounds"] = rounds
    if checkpoint is not None:
        result["sessions"] = state.sessions  # more than one: the run was stopped and resumed
    result["per_round"] = per_round_block(prompts, names, runs)
    result["paired"] = paired_report(result["per_round"])
    result["positions"] = position_counts(result["per_round"])
    return result


def per_round_block(prompts: list[Prompt], names: list[str], runs: dict[tuple[str, int], list[dict]]) -> dict:
    """Every round's figures, [prompt][round] per config: enough to recompute any statistic. A
    run equals plain when its tokens are those of plain's first round on that prompt (so plain's
    own later rounds are checked too)."""
    reference = [runs[("plain", i)][0]["token_ids"] for i in range(len(prompts))]
    configs = {}
    for name in names:
        rows = [runs[(name, i)] for i in range(len(prompts))]
        configs[name] = {
            "seconds": [[r["seconds"] for r in per_prompt] for per_prompt in rows],
            "new_tokens": [[r["new_tokens"] for r in per_prompt] for per_prompt in rows],
            "equals_plain": [[r["token_ids"] == ref for r in per_prompt] for per_prompt, ref in zip(rows, reference)],
            "position": [[r["position"] for r in per_prompt] for per_prompt in rows],
            # drafted tokens the verifier accepted (None for transformers' peers, which do not say)
            "accepted_tokens": [[r.get("accepted_tokens") for r in per_prompt] for per_prompt in rows],
        }
    return {"prompt_ids": [p.id for p in prompts], "kinds": [p.kind for p in prompts],
            "order": "configs rotated left by (round + prompt index) each prompt of each round", "configs": configs}


def _median_round(rounds: list[dict]) -> dict:
    """The round with the median seconds (the lower middle one for an even count), with every
    round's seconds and whether all rounds produced the same tokens."""
    if len(rounds) == 1:
        return rounds[0]
    row = dict(sorted(rounds, key=lambda r: r["seconds"])[(len(rounds) - 1) // 2])
    row["round_seconds"] = [r["seconds"] for r in rounds]
    row["rounds_agree"] = all(r["token_ids"] == rounds[0]["token_ids"] for r in rounds)
    return row


def _aggregate(rows: list[dict]) -> dict:
    tokens = sum(r["new_tokens"] for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    out = {"tokens_per_s": tokens / seconds if seconds else 0.0, "new_tokens": tokens, "seconds": seconds, "prompts": len(rows)}
    drafted = sum(r.get("draft_tokens") or 0 for r in rows)
    drafts = sum(r.get("drafts") or 0 for r in rows)
    if drafted:
        accepted = sum(r["accepted_tokens"] for r in rows)
        out["acceptance_rate"] = accepted / drafted
        out["mean_acceptance_length"] = 1 + accepted / drafts
    return out


def device_record(weight: torch.Tensor) -> dict:
    """The target's device (with the accelerator's name, if any) and dtype."""
    record = {"device": weight.device.type, "dtype": str(weight.dtype).removeprefix("torch.")}
    if weight.device.type == "cuda":
        record["accelerator"] = torch.cuda.get_device_name(weight.device)
    return record


def summarize(model: str, max_new_tokens: int, prompts: list[Prompt], configs: list[BenchConfig], rows: dict,
              module: torch.nn.Module | None = None) -> dict:
    plain = {r["id"]: r["token_ids"] for r in rows["plain"]}
    kinds = sorted({p.kind for p in prompts})
    result = {
        "model": model,
        "max_new_tokens": max_new_tokens,
        "greedy": True,
        "step_record_fields": ["drafter", "k", "proposed", "accepted", "emitted", "draft_s", "verify_s"],
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
                    "torch": torch.__version__, "transformers": transformers.__version__},
        "configs": {},
    }
    if module is not None:  # where the target ran: the speeds mean little without it
        result["machine"].update(device_record(next(module.parameters())))
    plain_agg = _aggregate(rows["plain"])
    plain_kind = {k: _aggregate([r for r in rows["plain"] if r["kind"] == k]) for k in kinds}
    for c in configs:
        for r in rows[c.name]:
            r["equals_plain"] = r["token_ids"] == plain[r["id"]] and r.get("rounds_agree", True)
        agg = _aggregate(rows[c.name])
        agg["speedup_vs_plain"] = agg["tokens_per_s"] / plain_agg["tokens_per_s"]
        agg["all_equal_plain"] = all(r["equals_plain"] for r in rows[c.name])
        agg["by_kind"] = {}
        for k in kinds:
            kind_agg = _aggregate([r for r in rows[c.name] if r["kind"] == k])
            kind_agg["speedup_vs_plain"] = kind_agg["tokens_per_s"] / plain_kind[k]["tokens_per_s"]
            agg["by_kind"][k] = kind_agg
        agg["prompts"] = rows[c.name]
        result["configs"][c.name] = agg
    return result


def render_table(result: dict):
    from rich.table import Table

    kinds = sorted(next(iter(result["configs"].values()))["by_kind"])
    table = Table(title=f"{result['model']} · greedy · {result['max_new_tokens']} new tokens · tokens/s (× plain)")
    table.add_column("config")
    table.add_column("all", justify="right")
    for k in kinds:
        table.add_column(k, justify="right")
    table.add_column("accept", justify="right")
    table.add_column("= plain", justify="center")
    for name, agg in result["configs"].items():
        table.add_row(name, *_cells(agg, kinds))
    return table


def _cells(agg: dict, kinds: list[str]) -> list[str]:
    cells = [f"{agg['tokens_per_s']:.1f} ({agg['speedup_vs_plain']:.2f}×)"]
    cells += [f"{agg['by_kind'][k]['tokens_per_s']:.1f} ({agg['by_kind'][k]['speedup_vs_plain']:.2f}×)" for k in kinds]
    acc = agg.get("acceptance_rate")
    cells.append(f"{acc:.2f}" if acc is not None else "-")
    cells.append(f"{sum(r['equals_plain'] for r in agg['prompts'])}/{len(agg['prompts'])}")
    return cells


def markdown_table(result: dict) -> str:
    kinds = sorted(next(iter(result["configs"].values()))["by_kind"])
    lines = ["| config | all | " + " | ".join(kinds) + " | acceptance | equal to plain |", "|---" * (len(kinds) + 4) + "|"]
    for name, agg in result["configs"].items():
        lines.append(f"| `{name}` | " + " | ".join(_cells(agg, kinds)) + " |")
    return "\n".join(lines)


def render_paired(result: dict):
    """The paired comparisons of ``result["paired"]`` as a rich table (one row per config and kind)."""
    from rich.table import Table

    table = Table(title=f"paired tokens/s ratios: {METHOD}", title_justify="left")
    for i, name in enumerate(REPORT_HEADER):
        table.add_column(name, justify="left" if i < 2 or i == 4 else "right")
    for row in report_rows(result["paired"]):
        table.add_row(*[cell.replace("`", "") for cell in row])
    return table


def markdown_paired(result: dict) -> str:
    lines = ["| " + " | ".join(REPORT_HEADER) + " |", "|---" * len(REPORT_HEADER) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in report_rows(result["paired"])]
    return "\n".join(lines)
