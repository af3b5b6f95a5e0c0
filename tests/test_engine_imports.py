"""What a decoder imports while it loads, so that no request pays for it: the controllers' early
stop (scikit-learn, a second or more to import) where a model drafter can use it, and not where
none can (a lookup-only decoder stays light)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

PROBE = """
import json, sys
sys.path.insert(0, {tests!r})
from adaptive_spec.decoder import SpeculativeDecoder
from adaptive_spec.drafters.model import ModelDrafter
from adaptive_spec.drafters.ngram import NgramDrafter
from tiny import loaded, tiny_llama
drafters = [NgramDrafter()] + ([ModelDrafter(tiny_llama(seed=1), name="draft")] if {with_model} else [])
before = "sklearn" in sys.modules
SpeculativeDecoder(loaded(tiny_llama(seed=0)), drafters)
print(json.dumps({{"before": before, "after": "sklearn" in sys.modules}}))
"""


@pytest.mark.parametrize("with_model", [True, False])
def test_a_model_drafter_brings_the_early_stops_imports_at_load(with_model):
    # a fresh interpreter: this test session has long imported everything
    out = subprocess.run([sys.executable, "-c", PROBE.format(tests=str(TESTS), with_model=with_model)],
                         capture_output=True, text=True, timeout=300, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"before": False, "after": with_model}
