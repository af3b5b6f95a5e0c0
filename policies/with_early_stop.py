"""Any policy plus an early stop inside each draft: for measuring early stopping on its own.

``AdaptivePolicy`` has its early stop built in. To compare early-stop rules under a *fixed*
drafter and ``k`` (so the only difference between runs is where drafting stops), wrap a static
policy::

    WithEarlyStop(StaticPolicy("int8", 8), mode="learned")    # online logistic regression
    WithEarlyStop(StaticPolicy("int8", 8), mode="threshold")  # transformers' q >= 0.4 rule

The wrapper hands the early-stop object to the engine (``early_stop(drafter)``) and trains it
from every step's draft confidences, exactly as the adaptive policy does.
"""

from __future__ import annotations

import zlib

from policies.base import Policy, PolicyWrapper
from policies.outcome import StepOutcome

MODES = ("learned", "threshold")


class WithEarlyStop(PolicyWrapper):
    def __init__(self, inner: Policy, mode: str = "learned", threshold: float = 0.4, seed: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}")
        super().__init__(inner)
        self.mode = mode
        self.threshold = threshold
        self.seed = seed
        self.name = f"{inner.name}+early_stop={mode}"
        self._stoppers: dict = {}

    def observe(self, outcome: StepOutcome) -> None:
        self.inner.observe(outcome)
        stopper = self._stoppers.get(outcome.drafter)
        if stopper is not None and outcome.draft_confidences:
            stopper.learn_step(outcome.draft_confidences, outcome.num_accepted, outcome.draft_entropies)

    def early_stop(self, drafter: str):
        stopper = self._stoppers.get(drafter)
        if stopper is None:
            from policies import early_stop  # scikit-learn, imported only when used

            if self.mode == "threshold":
                stopper = early_stop.ConfidenceThreshold(self.threshold)
            else:
                config = early_stop.LearnedEarlyStopConfig(stop_below=self.threshold)
                stopper = early_stop.LearnedEarlyStop(config, seed=(self.seed + zlib.crc32(drafter.encode())) % 2**32)
            self._stoppers[drafter] = stopper
        return stopper

