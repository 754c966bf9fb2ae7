"""Adding an extension method (docs/extending.md "Add an extension method"): a rope type in the
scaling registry and its `name@ARG` variant are all it takes for evaluation to run it."""

import numpy as np
import pytest

from lcx.config import defaults, variants
from lcx.model import positions
from lcx.model.positions import scaling


def _base_times(theta_R, d, base, sc, len_S, xp):
  """A larger base by `factor`: a toy of NTK (no d/(d-2) exponent)."""
  del theta_R, len_S, xp
  return scaling.theta(d, base * sc.factor), 1.0


@pytest.fixture
def base_times(monkeypatch):
  monkeypatch.setitem(
    scaling.ROPE_TYPES, "base_times", scaling.RopeType(_base_times, ("factor",), None, False)
  )
  monkeypatch.setitem(variants.VARIANTS, "base_times", variants._scaling("base_times"))


def test_a_new_rope_type_is_one_function_and_one_variant(base_times):
  inv_freq, factor = scaling.rope_frequencies(
    16, 10000.0, {"rope_type": "base_times", "factor": 4.0}
  )
  np.testing.assert_allclose(inv_freq, 40000.0 ** (-np.arange(0, 16, 2) / 16))
  assert factor == 1.0
  config = defaults.get_config("pos=rope,size=tiny")
  evaluated = variants.apply(config, variants.overrides("base_times@4", {}))
  assert evaluated.model.position.scaling.to_dict()["rope_type"] == "base_times"
  positions.validate(evaluated.model.position, positions.Dims.of(evaluated.model))
  # The field it does not read keeps its default, and a bad value of one it reads is refused.
  with pytest.raises(ValueError, match="factor"):
    scaling.rope_frequencies(16, 10000.0, {"rope_type": "base_times", "factor": 0.5})
