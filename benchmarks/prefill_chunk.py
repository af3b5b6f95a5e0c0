"""Chunked prefill: what a long prompt joining a batch costs the rows already decoding, and itself.

Short requests decode together in ``BatchedDecoder`` (plain decoding, so every step is one token a
row); a few steps in, a long prompt arrives. Without chunks its whole prefill runs inside one step,
and every decoding row waits for it; with ``prefill_chunk`` N a step prefills at most N of its
tokens, so the rows wait less a step but the newcomer waits more steps for its first token. Two
ways for a chunk to go in (``--ways``): ``rides``, in the step's decode forward (the engine's
default), and ``alone``, a prefill forward of its own before it (the engine's ``padded`` layout,
which cannot carry riders; with plain rows, every row one token wide, its decode forward is the
same). Per setting: the longest step the decoding rows saw while the prompt joined (their worst inter-token
gap), the median such step, and the newcomer's time to first token (to the end of the step that
gave it, whose decode forward over every row is included alike for every setting). Rounds interleave the
settings, their order rotating; every request's tokens are checked against the same request
served alone (greedy).

    python -m benchmarks.prefill_chunk --chunks none,512,256,128,64 --rounds 3 \\
        --out benchmarks/results/prefill_chunk.json
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers
from rich.console import Console
from rich.table import Table

from adaptive_spec.batching import BatchedDecoder
from adaptive_spec.bench import load_prompts
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.models import load_model
from adaptive_spec.outputs import check_writable, write_json_atomic
from benchmarks.server_overhead import bootstrap_median
from policies.registry import make_policy

ROOT = Path(__file__).resolve().parents[1]
WHOLE = "none"


def long_prompt(tokenizer, tokens: int) -> list[int]:
    """``tokens`` tokens of the public corpus's RAG and summarization prompts, one after another."""
    rows = [r for r in load_prompts(ROOT / "benchmarks" / "corpus" / "corpus.jsonl") if r.kind in ("rag", "summarization")]
    ids: list[int] = []
    for row in rows:
        ids += tokenizer(row.prompt)["input_ids"]
        if len(ids) >= tokens:
            return ids[:tokens]
    raise SystemExit(f"long_tokens={tokens}: the corpus's RAG and summarization prompts hold only {len(ids)} tokens")


WAYS = {"rides": "auto", "alone": "padded"}  # how a chunk goes in -> the engine layout that does it


def join_while_decoding(decoder, short: list[list[int]], long: list[int], chunk: int | None, max_tokens: int,
                        lead_steps: int, way: str = "rides") -> dict:
    engine = BatchedDecoder(decoder, max_batch=len(short) + 1, prefill_chunk=chunk, layout=WAYS[way])
    ids = [engine.submit(p, policy=make_policy("plain", []), max_new_tokens=max_tokens) for p in short]
    for _ in range(lead_steps):  # the short rows are decoding when the long prompt arrives
        engine.step()
    arrived = time.perf_counter()
    late = engine.submit(long, policy=make_policy("plain", []), max_new_tokens=max_tokens)
    steps = []
    while engine.prefilling is not None or engine.waiting:
        start = time.perf_counter()
        engine.step()
        steps.append(time.perf_counter() - start)
    ttft = time.perf_counter() - arrived
    results = engine.run()
    return {"join_steps_s": steps, "ttft_s": ttft, "tokens": [results[i].token_ids for i in [*ids, late]]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="none,512,256,128,64", help="prefill_chunk settings; none: whole prompts")
    parser.add_argument("--ways", default="rides,alone", help=f"how chunks go in: {', '.join(WAYS)}")
    parser.add_argument("--long-tokens", type=int, default=1536, help="the joining prompt's length")
    parser.add_argument("--rows", type=int, default=4, help="short requests decoding when it arrives")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    for name in ("long_tokens", "rows", "max_tokens", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"{name}={getattr(args, name)}: must be >= 1")
    try:
        chunks = [None if c == WHOLE else int(c) for c in args.chunks.split(",") if c]
    except ValueError:
        parser.error(f"chunks={args.chunks!r}: must be comma-separated integers or {WHOLE}")
    if not chunks or any(c is not None and c < 1 for c in chunks):
        parser.error(f"chunks={args.chunks!r}: each chunk must be >= 1")
    ways = [w for w in args.ways.split(",") if w]
    if not ways or any(w not in WAYS for w in ways):
        parser.error(f"ways={args.ways!r}: must be comma-separated, each one of {', '.join(WAYS)}")
    check_writable(args.out, "out")
    console = Console()
    target = load_model("smollm2")
    decoder = SpeculativeDecoder(target, [])
    long = long_prompt(target.tokenizer, args.long_tokens)
    short = [decoder.encode_prompt(r.prompt) for r in load_prompts(ROOT / "benchmarks" / "shift.jsonl")][: args.rows]
    alone = [decoder.generate(p, policy=make_policy("plain", []), max_new_tokens=args.max_tokens).token_ids
             for p in [*short, long]]
    with console.status("warming up ..."):
        for way in ways:
            join_while_decoding(decoder, short, long[:256], 64, 4, 2, way)
    names = [WHOLE if c is None else str(c) for c in chunks]
    settings = [(way, chunk, name) for way in ways for chunk, name in zip(chunks, names)]
    runs = []
    for round_index in range(args.rounds):
        shift = round_index % len(settings)
        for way, chunk, name in settings[shift:] + settings[:shift]:
            console.print(f"round {round_index + 1}/{args.rounds} · prefill_chunk {name}, {way} ...")
            run = join_while_decoding(decoder, short, long, chunk, args.max_tokens, lead_steps=4, way=way)
            runs.append({"round": round_index, "way": way, "chunk": name, "join_steps_s": run["join_steps_s"],
                         "ttft_s": run["ttft_s"], "identical_to_alone": run["tokens"] == alone})
    summary = []
    for way, _, name in settings:
        mine = [r for r in runs if r["chunk"] == name and r["way"] == way]
        worst = [max(r["join_steps_s"]) for r in mine]
        summary.append({"way": way, "chunk": name, "join_steps": statistics.median(len(r["join_steps_s"]) for r in mine),
                        "worst_step_s": statistics.median(worst), "worst_step_ci": bootstrap_median(worst),
                        "median_step_s": statistics.median(s for r in mine for s in r["join_steps_s"]),
                        "ttft_s": statistics.median(r["ttft_s"] for r in mine),
                        "ttft_ci": bootstrap_median([r["ttft_s"] for r in mine]),
                        "identical": all(r["identical_to_alone"] for r in mine)})
    table = Table(title=f"a {len(long)}-token prompt joining {len(short)} decoding rows (median of {args.rounds} rounds)")
    for column in ("prompt", "prefill_chunk", "steps to join", "longest step s (95% CI)", "median step s", "newcomer TTFT s (95% CI)",
                   "same tokens"):
        table.add_column(column, justify="right")
    for row in summary:
        table.add_row(row["way"], row["chunk"], f"{row['join_steps']:.0f}",
                      f"{row['worst_step_s']:.3f} ({row['worst_step_ci'][0]:.3f}-{row['worst_step_ci'][1]:.3f})",
                      f"{row['median_step_s']:.3f}",
                      f"{row['ttft_s']:.2f} ({row['ttft_ci'][0]:.2f}-{row['ttft_ci'][1]:.2f})",
                      "yes" if row["identical"] else "NO")
    console.print(table)
    write_json_atomic(args.out, {
        "benchmark": "prefill_chunk", "long_tokens": len(long), "rows": len(short), "max_tokens": args.max_tokens,
        "rounds": args.rounds, "chunks": names, "ways": ways,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "platform": platform.platform()},
        "summary": summary, "runs": runs}, "out")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
