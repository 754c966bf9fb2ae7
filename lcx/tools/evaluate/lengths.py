"""The length sweep: one checkpoint scored at many eval lengths on the same validation tokens.

`samples` decides which tokens are scored with what context (the protocol); this module runs
the model over those windows and summarizes: the mean loss with a bootstrap interval over
documents, perplexity, bits per byte, the loss by position (log-spaced buckets of the
position each target is predicted from) and each document's mean loss and tokens, per length,
and with `eval.longppl` LongPPL.
"""

from __future__ import annotations

import math

import numpy as np

from lcx.config import protocols
from lcx.run import timing
from lcx.run.metrics import say
from lcx.tools.evaluate import samples, stats


def protocol(ev, train_len: int) -> dict:
  """The protocol settings as recorded beside the numbers, defaults resolved."""
  return {
    "protocol": ev.protocol,
    "documents": ev.documents,
    **protocols.settings(ev, train_len),
    "num_tokens": ev.num_tokens,
    "seed": ev.sample_seed,
    "bootstrap": ev.bootstrap,
    "confidence": stats.CONFIDENCE,
  }


def summarize(
  nll_NxT: np.ndarray,
  windows: samples.Windows,
  doc_index: dict,
  weights_RxD,
  byte_lengths_V: np.ndarray,
  per_octave: int,
) -> dict:
  """Loss, perplexity, bits per byte (with intervals) and loss by position of one length."""
  scored = windows.scored_NxT
  loss_N, pos_N = nll_NxT[scored].astype(np.float64), windows.positions_NxT[scored]
  doc_N = np.vectorize(doc_index.get, otypes=[np.int64])(windows.doc_NxT[scored])
  num_docs = len(doc_index)
  loss, loss_ci = stats.mean_with_ci(loss_N, doc_N, num_docs, weights_RxD)
  bytes_N = byte_lengths_V[windows.targets_NxT[scored]].astype(np.float64)
  bpb = bpb_ci = None
  if bytes_N.sum() > 0:
    bpb = float(loss_N.sum() / math.log(2) / bytes_N.sum())
    ci = stats.ratio_ci(
      stats.per_doc_sums(loss_N, doc_N, num_docs) / math.log(2),
      stats.per_doc_sums(bytes_N, doc_N, num_docs),
      weights_RxD,
    )
    bpb_ci = ci
  length = windows.inputs_NxT.shape[1]
  by_position = []
  edges = stats.position_edges(length, per_octave)
  for lo, hi in zip(edges[:-1], edges[1:]):
    inside = (pos_N >= lo) & (pos_N < hi)
    if inside.any():
      b_loss, b_ci = stats.mean_with_ci(loss_N[inside], doc_N[inside], num_docs, weights_RxD)
      by_position.append(
        {"start": lo, "end": hi, "loss": b_loss, "loss_ci": b_ci, "tokens": int(inside.sum())}
      )
  return {
    "loss": loss,
    "loss_ci": loss_ci,
    "perplexity": stats.perplexity(loss),
    "perplexity_ci": None if loss_ci is None else [stats.perplexity(x) for x in loss_ci],
    "bits_per_byte": bpb,
    "bits_per_byte_ci": bpb_ci,
    "tokens": int(scored.sum()),
    "documents": int(len(np.unique(doc_N))),
    "windows": int(len(scored)),
    "loss_by_position": by_position,
    "per_document": per_document(loss_N, doc_N, doc_index),
  }


# LongPPL (Fang et al. 2025, "What is Wrong with Perplexity for Long-context Language
# Modeling?"): a token is key when its long-short difference (log-prob with the whole window
# minus with a short context) exceeds ALPHA and its long-context log-prob exceeds BETA.
LONGPPL_ALPHA, LONGPPL_BETA = 2.0, -2.0


def short_nll(runner, windows: samples.Windows, short: int, long_nll_NxT: np.ndarray):
  """Each target's loss with `short` tokens of context or fewer, as the paper's code does it:
  targets in chunks of short / 4, each chunk scored in a window of `short` tokens ending with
  it (so 3/4 short to short tokens of context). Targets whose whole context fits in `short`
  keep their long-window loss: their context is the same."""
  n, t = windows.inputs_NxT.shape
  hop = max(1, short // 4)
  out_NxT = long_nll_NxT.astype(np.float32).copy()
  ends = [end for end in range(hop, t + hop, hop) if min(end, t) > short]
  if not ends:
    return out_NxT
  cut = {k: [] for k in ("inputs", "targets", "positions", "segments")}
  offset_S = np.arange(short)
  for end in (min(e, t) for e in ends):
    sl = slice(end - short, end)
    cut["inputs"].append(windows.inputs_NxT[:, sl])
    cut["targets"].append(windows.targets_NxT[:, sl])
    # Positions restart where the short window starts, unless a document starts inside it.
    cut["positions"].append(np.minimum(windows.positions_NxT[:, sl], offset_S))
    cut["segments"].append(windows.segments_NxT[:, sl])
  nll_CNxS = runner.nll(*(np.concatenate(cut[k]) for k in cut)).reshape(len(ends), n, short)
  for c, end in enumerate(ends):
    start = max(end - hop, short)  # targets before `short` already hold their loss
    end = min(end, t)
    out_NxT[:, start:end] = nll_CNxS[c, :, short - (end - start) :]
  return out_NxT


def longppl(long_nll_NxT, short_nll_NxT, windows, doc_index, weights_RxD, short) -> dict:
  """exp(mean long-window loss over the key tokens) with its interval over documents."""
  scored = windows.scored_NxT
  long_N, short_N = long_nll_NxT[scored], short_nll_NxT[scored]
  key_N = (short_N - long_N > LONGPPL_ALPHA) & (-long_N > LONGPPL_BETA)
  record = {"short": short, "alpha": LONGPPL_ALPHA, "beta": LONGPPL_BETA}
  if not key_N.any():
    return {"longppl": None, "longppl_ci": None, "key_tokens": 0, **record}
  doc_N = np.vectorize(doc_index.get, otypes=[np.int64])(windows.doc_NxT[scored])
  loss, ci = stats.mean_with_ci(
    long_N[key_N].astype(np.float64), doc_N[key_N], len(doc_index), weights_RxD
  )
  return {
    "longppl": stats.perplexity(loss),
    "longppl_ci": None if ci is None else [stats.perplexity(x) for x in ci],
    "key_tokens": int(key_N.sum()),
    **record,
  }


def per_document(loss_N: np.ndarray, doc_N: np.ndarray, doc_index: dict) -> dict:
  """Each scored document's mean loss and token count (ids: validation split indices), so a
  report can pair two results, or two lengths, on the same documents (`lcx.tools.bootstrap`)."""
  count_D = stats.per_doc_sums(np.ones_like(loss_N), doc_N, len(doc_index))
  sum_D = stats.per_doc_sums(loss_N, doc_N, len(doc_index))
  ids = sorted(doc_index, key=doc_index.get)
  kept = [i for i in range(len(ids)) if count_D[i] > 0]
  return {
    "ids": [int(ids[i]) for i in kept],
    "loss": [float(sum_D[i] / count_D[i]) for i in kept],
    "tokens": [int(count_D[i]) for i in kept],
  }


def sweep(
  runner, sequences: list[samples.Sequence], lengths: list[int], byte_lengths_V, train_len: int
) -> dict:
  """{"protocol", "lengths": {T: summary}, "skipped": {T: why}} over `sequences`."""
  ev = runner.config.eval
  settings = protocol(ev, train_len)
  docs = np.unique(np.concatenate([s.doc_N for s in sequences]))
  if ev.bootstrap and len(docs) < 2:  # every resample is that one document: zero width
    raise ValueError(
      f"eval.bootstrap={ev.bootstrap}: the sample holds {len(docs)} validation document, and an "
      "interval resamples documents, so over one it would have zero width; add validation "
      "documents or set eval.bootstrap=0"
    )
  doc_index = {int(d): i for i, d in enumerate(docs)}
  weights_RxD = stats.resample_weights(len(docs), ev.bootstrap, ev.sample_seed)
  results, skipped = {}, {}
  for length in lengths:
    try:
      runner.check_length(length)
    except ValueError as error:
      skipped[str(length)] = str(error)
      say(f"eval length {length}: skipped: {error}")
      continue
    with timing.span() as took:
      windows = samples.cut(
        sequences, length, ev.protocol, stride=settings["stride"], last_k=settings["last_k"]
      )
      nll_NxT = runner.nll(
        windows.inputs_NxT,
        windows.targets_NxT,
        windows.positions_NxT,
        windows.segments_NxT,
        progress=f"eval length {length}",
      )
      r = summarize(nll_NxT, windows, doc_index, weights_RxD, byte_lengths_V, ev.buckets_per_octave)
      r["kernel"] = runner.kernel(length)
      if ev.longppl:
        short_NxT = short_nll(runner, windows, train_len, nll_NxT)
        r["longppl"] = longppl(nll_NxT, short_NxT, windows, doc_index, weights_RxD, train_len)
    results[str(length)] = r
    ci = (
      ""
      if r["perplexity_ci"] is None
      else (f" [{r['perplexity_ci'][0]:.3f}, {r['perplexity_ci'][1]:.3f}]")
    )
    say(
      f"eval length {length}: perplexity {r['perplexity']:.3f}{ci} over {r['tokens']} tokens "
      f"of {r['documents']} documents ({r['windows']} windows, {r['kernel']} kernel, {took})"
    )
  return {"protocol": settings, "lengths": results, "skipped": skipped}
