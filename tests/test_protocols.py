"""The protocol records (lcx/config/protocols.py): properties every protocol keeps, iterated over
the registry, and adding a protocol by adding one record (docs/extending.md "Add a protocol")."""

import dataclasses

import numpy as np
import pytest

from lcx.config import checks as config_lib, protocols
from lcx.tools import report
from lcx.tools.evaluate import checks as eval_checks, lengths, samples
from tests.helpers import tiny_config

BOS, EOS = 256, 257


def _sequences():
  docs = [np.array([BOS, *range(n), EOS], np.int32) for n in (70, 90)]
  return samples.select(docs, "long", longest=64, num_tokens=128, seed=0)


@pytest.mark.parametrize("name", sorted(protocols.PROTOCOLS))
def test_every_protocol_scores_each_token_at_most_once_inside_its_windows(name):
  ev = tiny_config().eval
  ev.protocol, ev.stride, ev.last_k = name, 4, 5
  settings = protocols.settings(ev, train_len=32)
  for length in (8, 16):
    w = samples.cut(_sequences(), length, name, **settings)
    assert w.scored_NxT.any(axis=1).all()  # no window scores nothing
    for seq, (first, last) in zip(_sequences(), _ranges(w)):
      # Scored targets are distinct tokens of the sequence: none counted twice.
      scored = w.targets_NxT[first:last][w.scored_NxT[first:last]]
      assert len(scored) == len(set(scored.tolist())), name
      assert set(scored.tolist()) <= set(seq.targets_N.tolist())


def _ranges(w):
  """(first, last) window rows of each sequence: a sequence's windows are consecutive rows,
  and each sequence's document index is distinct here."""
  docs = w.doc_NxT[:, 0]
  edges = [0, *(np.flatnonzero(np.diff(docs)) + 1), len(docs)]
  return list(zip(edges[:-1], edges[1:]))


@pytest.mark.parametrize("name", sorted(protocols.PROTOCOLS))
def test_every_protocol_records_the_same_keys_and_is_described(name):
  ev = tiny_config().eval
  ev.protocol = name
  recorded = lengths.protocol(ev, train_len=32)
  assert set(recorded) >= {"protocol", "documents", "stride", "last_k", "num_tokens"}
  assert report.describe_protocol(recorded).startswith(f"{name} protocol on ")


def test_adding_a_protocol_is_one_record(monkeypatch):
  """A new protocol, windows every half length, scoring each token once: cut, config check,
  evaluation plan and report description all take it from the record alone."""
  half = protocols.Protocol(
    "half",
    "windows of T every T/2 tokens, scoring the tokens no earlier window scored",
    starts=lambda n, length, settings: list(range(0, n - length + 1, length // 2)),
    scored=protocols.PROTOCOLS["sliding"].scored,
    describe=lambda settings: ", windows every half length",
  )
  monkeypatch.setitem(protocols.PROTOCOLS, "half", half)
  w = samples.cut(_sequences(), 8, "half")
  assert w.inputs_NxT.shape[0] > samples.cut(_sequences(), 8, "windows").inputs_NxT.shape[0]
  # Of each window's first half, only a sequence's first window scores (the rest overlap).
  assert w.scored_NxT[:, :4].sum() == 4 * len(_sequences())
  config = tiny_config()
  config.eval.protocol = "windows,half"
  config_lib.check_fields(config)
  assert config_lib.eval_combos(config.eval) == [("windows", "stream"), ("half", "stream")]
  recorded = lengths.protocol(dataclasses.replace(_Eval(), protocol="half"), 32)
  assert report.describe_protocol(recorded).startswith("half protocol on stream documents, wi")


def test_protocol_checks_name_the_field():
  config = tiny_config()
  config.eval.update(protocol="last_k", documents="stream")
  with pytest.raises(ValueError, match="eval.protocol='last_k' .* needs eval.documents='long'"):
    eval_checks.check(config)
  config.eval.update(protocol="sliding", documents="stream", stride=10**6)
  with pytest.raises(ValueError, match=r"^eval.stride=1000000 must be <= the shortest"):
    eval_checks.check(config)


@dataclasses.dataclass
class _Eval:
  """The eval fields `lengths.protocol` reads."""

  protocol: str = "windows"
  documents: str = "stream"
  stride: int = 0
  last_k: int = 0
  num_tokens: int = 1024
  sample_seed: int = 0
  bootstrap: int = 1000
