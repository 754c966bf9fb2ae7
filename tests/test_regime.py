"""The regime-matched RoPE base: the reference's count, the formula's values, what it matches."""

import math

import pytest

from lcx import regime


def test_llama2_at_4k_has_18_of_64_pairs_under_one_turn_and_21_unscaled_by_yarn():
  counts = regime.pair_counts(10_000.0, 128, 4096)
  assert counts["pairs"] == 64 and counts["under_one_turn"] == 18
  assert counts["yarn_unscaled"] == 21  # wavelengths 2 pi 10^(i/16) < 128: i = 0..20
  assert counts["p_rope_dropped_angle"] == pytest.approx(4096 * 1e-3, rel=1e-9)  # pair 48


@pytest.mark.parametrize(
  "length, base", [(64, 27.09), (128, 72.55), (256, 194.31), (4096, 10_000.0)]
)
def test_matched_base_values(length, base):
  assert regime.matched_base(length) == pytest.approx(base, abs=0.005)
  # The formula: the boundary ln(L / 2 pi) / ln(base) sits at the reference's fraction.
  boundary = math.log(length / (2 * math.pi)) / math.log(regime.matched_base(length))
  assert boundary == pytest.approx(math.log(4096 / (2 * math.pi)) / math.log(1e4))


@pytest.mark.parametrize("length", [64, 128, 256, 1024])
def test_the_matched_base_matches_the_pairs_under_one_turn_but_not_yarn_below_l_201(length):
  base = regime.matched_base(length)
  assert regime.pair_counts(base, 128, length)["under_one_turn"] == 18
  assert regime.pair_counts(base, 32, length)["under_one_turn"] == 4  # 28% of 16 is 4.5
  assert regime.pair_counts(1e4, 32, length)["under_one_turn"] > 4  # base 10^4 is slower
  unscaled = regime.pair_counts(base, 32, length)["yarn_unscaled"]
  assert unscaled == {64: 0, 128: 0, 256: 1, 1024: 4}[length]
  angle = regime.pair_counts(base, 32, length)["p_rope_dropped_angle"]
  assert 4.4 < angle < 5.5  # p-RoPE's dropped pairs turn as Llama-2's (4.1) do
  assert regime.pair_counts(1e4, 32, 64)["p_rope_dropped_angle"] == pytest.approx(0.064)


def test_bad_arguments_name_the_field():
  with pytest.raises(ValueError, match=r"^reference='gpt2' is not allowed; allowed: llama2_4k$"):
    regime.matched_base(64, "gpt2")
  with pytest.raises(ValueError, match=r"^length=4 is not allowed"):
    regime.matched_base(4)


def test_the_extrapolation_config_selects_the_matched_regime():
  from configs import extrapolation
  from lcx.config import checks as config_lib

  old = extrapolation.get_config("pos=rope")
  assert (old.data.seq_len, old.data.tokenizer, old.model.position.base) == (64, "byte", 1e4)
  new = extrapolation.get_config("pos=rope,regime=matched")
  assert (new.data.seq_len, new.data.tokenizer, new.data.vocab_size) == (256, "sentencepiece", 4096)
  assert new.model.position.base == pytest.approx(194.31, abs=0.005)
  assert regime.pair_counts(new.model.position.base, new.model.head_dim, 256)[
    "under_one_turn"
  ] == round(18 / 64 * new.model.head_dim / 2)
  config_lib.check_fields(new)
  # A fine-tune at 4L keeps the base its source was matched at; a scheme without a base none.
  longer = extrapolation.get_config("pos=p_rope,regime=matched,seq_len=1024,base_len=256")
  assert longer.data.seq_len == 1024 and longer.model.position.base == new.model.position.base
  assert "base" not in extrapolation.get_config("pos=alibi,regime=matched").model.position
  allowed = "bytes, matched, context"
  with pytest.raises(
    ValueError, match=rf"^config argument regime='big' is not allowed; allowed: {allowed}$"
  ):
    extrapolation.get_config("regime=big")


@pytest.mark.parametrize("pos", ["rope", "p_rope", "sinusoidal", "alibi", "t5"])
def test_the_context_regime_is_the_one_the_probe_measured(pos):
  """experiments/context_probe's 1024-piece 2000-step row, where RoPE rose +0.364 at 16x: books,
  L = 128, 16 rows, base 10^4 wherever the scheme has one, 100 windows at 16x."""
  from configs import extrapolation
  from lcx.config import checks as config_lib

  config = extrapolation.get_config(f"pos={pos},regime=context")
  assert (config.data.name, config.data.seq_len, config.data.batch_size) == ("books", 128, 16)
  assert (config.data.tokenizer, config.data.vocab_size) == ("sentencepiece", 1024)
  assert config.model.position.get("base", None) == (None if pos in ("alibi", "t5") else 1e4)
  assert config.train.steps == 2000
  assert config.eval.multipliers == (1, 2, 4, 8, 16)
  assert config.eval.num_tokens == 100 * 16 * 128
  config_lib.check_fields(config)
  # `steps` still overrides; the base stays 10^4 at another L (not matched to it).
  other = extrapolation.get_config(f"pos={pos},regime=context,steps=3,seq_len=64")
  assert other.train.steps == 3 and other.eval.num_tokens == 100 * 16 * 64
  assert other.model.position.get("base", None) == config.model.position.get("base", None)
  # The other regimes keep their 600 steps and 32768 tokens a length.
  assert extrapolation.get_config(f"pos={pos},regime=matched").train.steps == 600
  assert extrapolation.get_config(f"pos={pos}").eval.num_tokens == 32768
