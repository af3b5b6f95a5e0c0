"""Tiny random-init models and a trivial tokenizer, so engine tests run in seconds on CPU.

``ADAPTIVE_SPEC_TEST_DEVICE=cuda`` builds them on a GPU instead, so the engine's lossless tests
(greedy equality, the sampling distribution, batched rows, cache rollback) run there unchanged.
"""

from __future__ import annotations

import contextlib
import os

import torch
from transformers import Gemma3TextConfig, Gemma3ForCausalLM, LlamaConfig, LlamaForCausalLM

from adaptive_spec.models import LoadedModel


TEST_DEVICE = torch.device(os.environ.get("ADAPTIVE_SPEC_TEST_DEVICE", "cpu"))
ON_CPU = TEST_DEVICE.type == "cpu"  # the int8 drafter (dynamic quantization) runs on CPU only


class NumberTokenizer:
    """Token i is the text ``<i>``; enough for the decoder's encode/decode/EOS needs."""

    chat_template = None

    def __init__(self, vocab_size: int, eos_token_id: int | None = None) -> None:
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id

    def __call__(self, text: str) -> dict:
        return {"input_ids": [int(t) % self.vocab_size for t in text.replace("<", " ").replace(">", " ").split()]}

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(f"<{i}>" for i in ids if not (skip_special_tokens and i == self.eos_token_id))

    def get_vocab(self) -> dict:
        return {f"<{i}>": i for i in range(self.vocab_size)}

    def __len__(self) -> int:
        return self.vocab_size


def tiny_llama(seed: int = 0, vocab: int = 64, dtype=torch.float64, layers: int = 2, hidden: int = 32, init: float = 0.2):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        initializer_range=init,  # larger than the default 0.02 so argmaxes are far from ties
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    return LlamaForCausalLM(config).to(TEST_DEVICE, dtype).eval()


def tiny_gemma3(seed: int = 0, vocab: int = 64, sliding_window: int = 4, dtype=torch.float64):
    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, sliding_window=sliding_window,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], initializer_range=0.2,
        bos_token_id=None, eos_token_id=None, pad_token_id=0,
    )
    return Gemma3ForCausalLM(config).to(TEST_DEVICE, dtype).eval()


def loaded(model, eos: int | None = None, name: str = "tiny") -> LoadedModel:
    return LoadedModel(name=name, model=model, tokenizer=NumberTokenizer(model.config.vocab_size, eos))


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread, then restore the count.

    These models are too small for a second thread to help, and on a loaded 2-core machine two
    threads contending with other work made each forward 10-30x slower (a 5 s test took 170 s).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
