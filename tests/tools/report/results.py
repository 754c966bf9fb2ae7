"""Result JSON that follows the lcx.eval/1 schema exactly, built by hand (no model, no jax):
what the report tests, test_experiments and test_sweep feed the report."""

import json
import math

import numpy as np

PNG = b"\x89PNG\r\n\x1a\n"


def common_fields(kind, run, variant, train_len, step=600):
  return {
    "schema": "lcx.eval/1",
    "kind": kind,
    "run": run,
    "workdir": f"/runs/{run}",
    "variant": variant,
    "overrides": {} if variant == "none" else {"x.y": 1},
    "step": step,
    "scheme": "rope",
    "remap": "none",
    "train_len": train_len,
    "init_from": None,
    "config": {"data": {"seq_len": train_len}},
    "versions": {"lcx": "0.1.0", "jax": "0.10.2", "flax": "0.12.8", "python": "3.11"},
    "device": "cpu x1",
    "wall_seconds": 1.5,
    "created": "2025-01-01T00:00:00Z",
  }


def lengths_result(
  run="rope", variant="none", train_len=64, losses=None, bpb=True, skipped=None, documents="stream"
):
  """A "lengths" result at 1x, 2x, 4x: loss, perplexity (and bits per byte) with CIs, and
  loss by position buckets [0, L), [L, 2L), [2L, 4L) clipped to each length."""
  losses = losses or {1: 2.0, 2: 2.1, 4: 2.3}
  lengths = {}
  for mult, loss in losses.items():
    n = mult * train_len
    edges = [0, train_len] + [train_len * 2**i for i in range(1, 3) if train_len * 2**i <= n]
    buckets = [
      {
        "start": a,
        "end": b,
        "loss": loss + 0.01 * i,
        "loss_ci": [loss - 0.05, loss + 0.05],
        "tokens": 100 * (b - a),
      }
      for i, (a, b) in enumerate(zip(edges, edges[1:]))
    ]
    lengths[str(n)] = {
      "loss": loss,
      "loss_ci": [loss - 0.02, loss + 0.02],
      "perplexity": math.exp(loss),
      "perplexity_ci": [math.exp(loss - 0.02), math.exp(loss + 0.02)],
      "bits_per_byte": loss / math.log(2) if bpb else None,
      "bits_per_byte_ci": [(loss - 0.02) / math.log(2), (loss + 0.02) / math.log(2)]
      if bpb
      else None,
      "tokens": 4096,
      "documents": 12,
      "windows": 4096 // n,
      "kernel": "dense",
      "loss_by_position": buckets,
    }
  return {
    **common_fields("lengths", run, variant, train_len),
    "protocol": {
      "protocol": "windows",
      "documents": documents,
      "stride": 0,
      "last_k": 0,
      "num_tokens": 4096,
      "seed": 0,
      "bootstrap": 1000,
      "confidence": 0.95,
    },
    "lengths": lengths,
    "skipped": skipped or {},
  }


def tasks_result(run="copy", variant="none"):
  """A "tasks" result: 1-16 trained, 17-32 and 33-64 beyond, the last one skipped."""
  buckets = {
    "1-16": {
      "accuracy": 0.953,
      "accuracy_ci": [0.931, 0.972],
      "token_accuracy": 0.99,
      "examples": 100,
    },
    "17-32": {
      "accuracy": 0.41,
      "accuracy_ci": [0.31, 0.51],
      "token_accuracy": 0.8,
      "examples": 100,
    },
    "33-64": {
      "accuracy": None,
      "accuracy_ci": None,
      "token_accuracy": None,
      "examples": 100,
      "skipped": "model.max_len=32 < 64",
    },
  }
  return {
    **common_fields("tasks", run, variant, 16),
    "task": "copy",
    "train_sizes": [1, 16],
    "buckets": buckets,
    "depths": {},
  }


def passkey_result(run="rope", variant="none"):
  cells = [
    {"length": n, "depth": d, "accuracy": 1.0 if n == 64 else 0.25, "examples": 8}
    for n in (64, 128)
    for d in (0.0, 0.5, 1.0)
  ]
  return {
    **common_fields("passkey", run, variant, 64),
    "lengths": [64, 128],
    "depths": [0.0, 0.5, 1.0],
    "cells": cells,
  }


def save(path, result):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(result))
  return path


def with_documents(result, shift=0.0, seed=0, docs=20):
  """`result` with per-document losses at each length: document d's mean loss is its
  difficulty + 0.1 per doubling of the length + `shift`, noise seeded by `seed`."""
  rng = np.random.default_rng(seed)
  hard = np.random.default_rng(99).normal(2.0, 0.5, docs)
  tokens = [int(t) for t in np.random.default_rng(98).integers(50, 300, docs)]
  for i, entry in enumerate(result["lengths"].values()):
    loss = hard + 0.1 * i + shift + rng.normal(0, 0.02, docs)
    entry["per_document"] = {
      "ids": list(range(3, 3 + docs)),
      "loss": list(loss),
      "tokens": list(tokens),
    }
  return result


def row_cells(row: str) -> list[str]:
  """A markdown table row's cells, stripped: `| a | b |` -> ["a", "b"]."""
  return [c.strip() for c in row.strip("|").split("|")]
