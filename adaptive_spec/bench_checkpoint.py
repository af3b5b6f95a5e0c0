"""A long ``bench`` run that survives being stopped: its state, saved after every prompt.

A run over a public corpus with every config and several rounds takes hours on a small CPU, more
than one sitting of a shared machine. ``bench --checkpoint FILE`` saves, after each prompt of each
round, everything the rest of the run depends on: the figures measured so far, the long-lived
controllers (what they have learned is part of what the later rounds measure), the suffix
drafters' histories, and where to go on. Run the same command again and it resumes there; only
the prompt in progress when it stopped is lost (and redone).

Pairing is unaffected: a paired unit is one prompt of one round, all of whose configs run back to
back within one process. The machine's speed between sittings may differ, as it does within one;
``sessions`` records when each sitting started and where, so the result says it was resumed.

The file is a gzipped pickle (controllers are plain Python objects): load only files you wrote. It is
refused unless its signature (model, prompts, configs, token budget, rounds, step records) is the
command's, so a changed command never continues another run's figures.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import platform
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from adaptive_spec.errors import InvalidParameterError

FORMAT = "adaptive-spec-bench-checkpoint/1"


def signature(model: str, prompts: list, configs: list[str], max_new_tokens: int, rounds: int,
              record_steps: bool) -> dict:
    """What must match for a checkpoint to continue this run (prompts by a digest of id, kind, text)."""
    text = json.dumps([[p.id, p.kind, p.prompt] for p in prompts], ensure_ascii=False)
    return {"model": model, "prompts_sha256": hashlib.sha256(text.encode()).hexdigest(), "prompts": len(prompts),
            "configs": list(configs), "max_new_tokens": max_new_tokens, "rounds": rounds, "record_steps": record_steps}


@dataclass
class BenchState:
    signature: dict
    next_round: int = 0
    next_prompt: int = 0
    runs: dict = field(default_factory=dict)  # (config, prompt index) -> one row per round so far
    policies: dict = field(default_factory=dict)  # config -> its long-lived controller
    histories: dict = field(default_factory=dict)  # config -> its suffix HistoryStore
    sessions: list = field(default_factory=list)  # one entry per sitting: started, host, resumed at

    @property
    def done(self) -> bool:
        return self.next_round >= self.signature["rounds"]

    def begin_session(self) -> None:
        self.sessions.append({"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "host": platform.node(), "from_round": self.next_round, "from_prompt": self.next_prompt})

    def advance(self, round_: int, prompt_index: int, prompts: int) -> None:
        """Prompt ``prompt_index`` of ``round_`` is complete."""
        if prompt_index + 1 < prompts:
            self.next_round, self.next_prompt = round_, prompt_index + 1
        else:
            self.next_round, self.next_prompt = round_ + 1, 0


def load(path: str | Path, expected: dict) -> BenchState | None:
    """The state saved at ``path`` (None when there is no file yet); refused, naming ``checkpoint``,
    when it is not a checkpoint or another command's."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        with gzip.open(path, "rb") as f:
            saved = pickle.load(f)
    except Exception as exc:  # a truncated or foreign file: any unpickling error means "not ours"
        raise InvalidParameterError("checkpoint", str(path), f"is not a bench checkpoint ({type(exc).__name__})") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT or not isinstance(saved.get("state"), BenchState):
        raise InvalidParameterError("checkpoint", str(path), f"is not a bench checkpoint ({FORMAT})")
    state = saved["state"]
    differ = sorted(k for k in expected.keys() | state.signature.keys() if expected.get(k) != state.signature.get(k))
    if differ:
        raise InvalidParameterError("checkpoint", str(path), "was written by another command (it differs in "
                                    f"{', '.join(differ)}); delete it or name another file")
    return state


def save(path: str | Path, state: BenchState) -> None:
    """Write ``state`` through a temporary file and a rename: a run stopped mid-write leaves the
    previous checkpoint whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            pickle.dump({"format": FORMAT, "state": state}, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
