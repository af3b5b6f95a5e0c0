"""Text as tokens arrive, for streams: what could still change is held back.

Two things can still change the end of the text decoded so far: a stop string that the next
tokens may complete (its text must not have been sent), and a multi-byte character split across
tokens (decoded as U+FFFD until its last byte arrives).
"""

from __future__ import annotations


class TextPieces:
    def __init__(self, tokenizer, stop_strings: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.holdback = max((len(s) for s in stop_strings), default=1) - 1
        self.generated: list[int] = []
        self.sent = 0  # characters already handed out

    def add(self, tokens: list[int]) -> str:
        """The text that ``tokens`` make safe to send ("" if none yet)."""
        self.generated.extend(tokens)
        text = self.tokenizer.decode(self.generated, skip_special_tokens=True)
        safe = len(text) - self.holdback
        if text.endswith("\ufffd"):  # a multi-byte character split across tokens: wait for the rest
            safe = min(safe, len(text.rstrip("\ufffd")))
        if safe <= self.sent:
            return ""
        piece, self.sent = text[self.sent:safe], safe
        return piece

    def finish(self, text: str) -> str:
        """What is left of the request's final ``text`` (stop strings already cut from it)."""
        rest = text[self.sent:] if len(text) > self.sent else ""
        self.sent = max(self.sent, len(text))
        return rest
