"""Evaluation of a checkpoint past its training length: a length sweep, or task accuracy.

Text corpora get the length sweep. Protocol (ALiBi paper): the validation stream is cut into
non-overlapping windows of the eval length; each token is scored with the context from its
window's start, positions 0..T-1. The mean therefore mixes context lengths, so the loss is also
reported per position bucket ([0, L), [L, 2L), [2L, 4L), ... for training length L).

Synthetic tasks (`data.name=task`) have no text to score: exact-match accuracy is reported per
task-size bucket over the task's evaluation sizes (`lcx.data.tasks.eval_buckets`).

Extension methods are eval-time config: the same checkpoint evaluated with
`model.position.scaling` changed, no retraining.
"""

from __future__ import annotations

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from lcx import checkpoint, config as config_lib, data, positions, sharding
from lcx.data import tasks, tokenizers
from lcx.metrics import say
from lcx.train import Trainer

# Model fields that must match the checkpoint; everything else may change at evaluation.
ARCHITECTURE = ("vocab_size", "d_model", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                "mlp", "mlp_dim", "tie_embeddings", "max_len")


def position_buckets(train_len: int, length: int) -> list[tuple[int, int]]:
  """[0, L), [L, 2L), [2L, 4L), ... clipped to the eval length."""
  edges = [0, train_len]
  while edges[-1] < length:
    edges.append(edges[-1] * 2)
  return [(a, min(b, length)) for a, b in zip(edges[:-1], edges[1:]) if a < length]


def windows(stream: np.ndarray, length: int, num_windows: int):
  """Non-overlapping (inputs, targets) windows of `length` from a token stream."""
  need = num_windows * length + 1
  if stream.size < need:
    raise ValueError(f"eval: {need} validation tokens needed for {num_windows} windows of "
                     f"{length}, only {stream.size} available; lower eval.num_tokens")
  inputs = stream[:num_windows * length].reshape(num_windows, length)
  targets = stream[1:num_windows * length + 1].reshape(num_windows, length)
  return inputs, targets


def _check_architecture(config, saved: dict) -> None:
  for field in ARCHITECTURE:
    if saved["model"][field] != config.model[field]:
      raise ValueError(f"model.{field}={config.model[field]!r} differs from the checkpoint's "
                       f"{saved['model'][field]!r}; only position scaling, remaps, attention "
                       "patterns and eval settings may change at evaluation")


class Evaluator:
  """Restores a checkpoint once; scores any length with one compiled program per shape."""

  def __init__(self, config, workdir: str, step: int | None = None):
    tokenizer = data.get_tokenizer(config.data)
    config = config_lib.resolve(config, tokenizer.vocab_size)
    self.config, self.workdir = config, workdir
    self.mesh = sharding.make_mesh(config.mesh)
    trainer = Trainer(config, self.mesh)
    ckpt = checkpoint.Checkpointer(workdir, every=1, keep=config.train.keep_checkpoints)
    self.step = ckpt.latest_step() if step is None else step
    if self.step is None:
      raise FileNotFoundError(f"no checkpoint in {ckpt.directory}; train first (--mode=train)")
    meta = ckpt.meta(self.step)
    trained, given = tokenizers.identity(meta["tokenizer"]), tokenizers.identity(
        tokenizer.metadata())
    if trained != given:
      ckpt.close()
      raise ValueError(f"the checkpoint was trained with tokenizer {trained}, data.* gives "
                       f"{given}: set data.tokenizer, data.vocab_size, data.seed and the "
                       "corpus (data.name and its fields) as in training")
    _check_architecture(config, meta["config"])
    state, _ = ckpt.restore(self.step, trainer.abstract_state)
    ckpt.close()
    self.graphdef, self.params = trainer.graphdef, state["params"]
    self.rules = trainer.rules
    self._programs = {}

  def _scorer(self, kernel: str):
    if kernel not in self._programs:
      graphdef = self.graphdef

      def nll(params, inputs_BxT, targets_BxT):
        b, t = inputs_BxT.shape
        pos_BxT = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        logits = nnx.merge(graphdef, params)(inputs_BxT, pos_BxT, jnp.ones_like(inputs_BxT),
                                             kernel=kernel)
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets_BxT)

      self._programs[kernel] = jax.jit(nll)
    return self._programs[kernel]

  def task_hits(self, examples: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Exact match of each (prompt_ids, answer_ids) pair, all padded to one width.

    Scored by teacher forcing in one forward pass: the argmax answer equals the greedy decode
    exactly when every argmax along the true answer is right, so exact match is the same.
    """
    cfg = self.config
    width = max(len(p) + len(a) for p, a in examples) - 1
    positions.check_eval_length(cfg.model.position, _dims(cfg), width)
    inputs_NxT = np.zeros((len(examples), width), np.int32)
    segments_NxT = np.zeros((len(examples), width), np.int32)
    for row, (prompt, answer) in enumerate(examples):
      sequence = np.concatenate([prompt, answer])[:-1]
      inputs_NxT[row, :len(sequence)], segments_NxT[row, :len(sequence)] = sequence, 1
    pred_NxT = self._map_rows(self._predictor(_kernel(cfg, width)), width, inputs_NxT,
                              segments_NxT)
    return np.array([tasks.exact_match(pred_NxT[row, len(p) - 1:len(p) - 1 + len(a)], a)
                     for row, (p, a) in enumerate(examples)])

  def task_accuracy(self, task: str, length: int, num: int, seed: int = 0) -> float:
    """Exact-match accuracy on `num` examples of a synthetic task at `length`."""
    examples = tasks.eval_examples(task, length, num, seed, data.get_tokenizer(self.config.data))
    return float(self.task_hits(examples).mean())

  def task_sweep(self) -> dict:
    """Exact match per size bucket over `data.task_eval_examples` sizes drawn uniformly up to
    task_eval_factor x task_max_len; per needle depth too when data.task_eval_depths is set."""
    d = self.config.data
    tokenizer = data.get_tokenizer(d)
    sizes, counts = np.unique(tasks.eval_lengths(d, d.task_eval_examples, d.seed),
                              return_counts=True)
    buckets = tasks.eval_buckets(d)
    depths = tuple(d.task_eval_depths) or (None,)
    examples, bucket_N, depth_N = [], [], []
    for depth in depths:
      for size, count in zip(sizes.tolist(), counts.tolist()):
        examples += tasks.eval_examples(d.task, size, count, d.seed, tokenizer, depth)
        bucket_N += [next(i for i, (lo, hi) in enumerate(buckets) if lo <= size <= hi)] * count
        depth_N += [depth] * count
    bucket_N, depth_N = np.array(bucket_N), np.array(depth_N)
    # Each bucket at its own width: short sizes do not pay for the longest, and a bucket the
    # scheme cannot score (a learned table too short) is reported as skipped, not fatal.
    hits_N, skipped = np.zeros(len(examples)), {}
    for i, (lo, hi) in enumerate(buckets):
      rows = np.flatnonzero(bucket_N == i)
      if not rows.size:
        continue
      chosen = [examples[r] for r in rows]
      try:
        positions.check_eval_length(self.config.model.position, _dims(self.config),
                                    max(len(p) + len(a) for p, a in chosen) - 1)
      except ValueError as error:
        skipped[i] = str(error)
        say(f"task {d.task}: sizes {lo}-{hi} skipped: {error}")
        continue
      hits_N[rows] = self.task_hits(chosen)
    say(f"task {d.task}: {len(examples)} examples, {len(skipped)} size buckets skipped")

    def by_bucket(rows_N):
      return {f"{lo}-{hi}": ({"accuracy": None, "examples": int((rows_N & (bucket_N == i)).sum()),
                              "skipped": skipped[i]} if i in skipped else
                             _accuracy(hits_N[rows_N & (bucket_N == i)]))
              for i, (lo, hi) in enumerate(buckets)}

    everything = np.ones(len(examples), bool)
    return {"step": self.step, "task": d.task, "train_sizes": [d.task_min_len, d.task_max_len],
            "position": self.config.model.position.to_dict(),
            "remap": self.config.model.remap.to_dict(),
            "buckets": by_bucket(everything),
            "depths": {f"{x:g}": by_bucket(depth_N == x) for x in d.task_eval_depths}}

  def _predictor(self, kernel: str):
    if ("predict", kernel) not in self._programs:
      graphdef = self.graphdef

      def predict(params, inputs_BxT, seg_BxT):
        b, t = inputs_BxT.shape
        pos_BxT = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        return nnx.merge(graphdef, params)(inputs_BxT, pos_BxT, seg_BxT,
                                           kernel=kernel).argmax(-1)

      self._programs["predict", kernel] = jax.jit(predict)
    return self._programs["predict", kernel]

  def _map_rows(self, program, length: int, *arrays_NxT: np.ndarray) -> np.ndarray:
    """`program(params, *rows)` over fixed-size batches of rows of `length` tokens, padded so
    each length compiles once, sharded over the batch axes; per-row outputs concatenated."""
    cfg = self.config
    shards = self.mesh.shape["data"] * self.mesh.shape["fsdp"]
    rows = max(1, cfg.eval.batch_tokens // length)
    rows = -(-rows // shards) * shards
    out = []
    for start in range(0, len(arrays_NxT[0]), rows):
      chunk = [a[start:start + rows] for a in arrays_NxT]
      pad = rows - len(chunk[0])  # fixed shapes: one compiled program per length
      padded = {str(i): np.pad(a, [(0, pad), (0, 0)]) for i, a in enumerate(chunk)}
      batch = sharding.global_batch(_process_slice(padded), self.mesh, self.rules)
      result = np.asarray(jax.device_get(program(self.params, *batch.values())))
      out.append(result[:rows - pad])
    return np.concatenate(out)

  def length(self, stream: np.ndarray, length: int) -> dict:
    """Mean loss at one eval length, overall and per position bucket."""
    cfg = self.config
    positions.check_eval_length(cfg.model.position, _dims(cfg), length)
    num_windows = max(1, cfg.eval.num_tokens // length)
    inputs, targets = windows(stream, length, num_windows)
    kernel = _kernel(cfg, length)
    nll_NxT = self._map_rows(self._scorer(kernel), length, inputs, targets)
    buckets = {f"{a}-{b}": float(nll_NxT[:, a:b].mean())
               for a, b in position_buckets(cfg.data.seq_len, length)}
    loss = float(nll_NxT.mean())
    return {"loss": loss, "perplexity": math.exp(loss), "bits_per_token": loss / math.log(2),
            "windows": num_windows, "tokens": int(nll_NxT.size), "kernel": kernel,
            "loss_by_position": buckets}

  def sweep(self, lengths: list[int]) -> dict:
    cfg = self.config
    need = max(max(1, cfg.eval.num_tokens // n) * n + 1 for n in lengths)
    stream = data.validation_tokens(cfg.data, need)
    results = {}
    for n in lengths:
      results[str(n)] = self.length(stream, n)
      say(f"eval length {n}: loss {results[str(n)]['loss']:.4f} "
          f"({results[str(n)]['windows']} windows, {results[str(n)]['kernel']} kernel)")
    return {"step": self.step, "train_len": cfg.data.seq_len,
            "position": cfg.model.position.to_dict(), "remap": cfg.model.remap.to_dict(),
            "lengths": results}


def _kernel(cfg, length: int) -> str:
  return "chunked" if length >= cfg.eval.chunked_from else "dense"


def _accuracy(hits_N: np.ndarray) -> dict:
  """Share of hits and how many examples it is over (None: no example fell here)."""
  return {"accuracy": float(hits_N.mean()) if hits_N.size else None, "examples": int(hits_N.size)}


def _dims(cfg):
  m = cfg.model
  return positions.Dims(m.d_model, m.num_heads, m.head_dim, m.max_len)


def _process_slice(batch: dict) -> dict:
  """This process's contiguous share of the rows (every process holds the whole batch)."""
  n, i = jax.process_count(), jax.process_index()
  return {k: v[i * len(v) // n:(i + 1) * len(v) // n] for k, v in batch.items()}


def format_table(results_by_name: dict[str, dict]) -> str:
  """Perplexity per eval length, one row per run: the 'train short, test long' table."""
  lengths = sorted({int(n) for r in results_by_name.values() for n in r["lengths"]})
  train_len = next(iter(results_by_name.values()))["train_len"]
  head = ["run"] + [f"{n} ({n / train_len:g}x)" for n in lengths]
  rows = [head]
  for name, r in results_by_name.items():
    rows.append([name] + [f"{r['lengths'][str(n)]['perplexity']:.3f}"
                          if str(n) in r["lengths"] else "-" for n in lengths])
  widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
  lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
  lines.insert(1, "  ".join("-" * w for w in widths))
  return "perplexity (per token) by eval length; train length " + str(train_len) + "\n" + \
      "\n".join(lines)


def format_task_table(name: str, results: dict) -> str:
  """Exact match per task-size bucket (and per needle depth when evaluated at depths)."""
  depths = list(results["depths"])
  head = ["sizes", "accuracy", "examples"] + [f"depth {x}" for x in depths]

  def cell(r):
    return "-" if r["accuracy"] is None else f"{r['accuracy']:.3f}"

  rows = [head] + [[bucket, cell(r), str(r["examples"])] +
                   [cell(results["depths"][x][bucket]) for x in depths]
                   for bucket, r in results["buckets"].items()]
  widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
  lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
  lines.insert(1, "  ".join("-" * w for w in widths))
  low, high = results["train_sizes"]
  lines += [f"sizes {bucket} skipped: {r['skipped']}" for bucket, r in results["buckets"].items()
            if "skipped" in r]
  return (f"{name}: {results['task']} exact match by task size; trained on sizes {low}-{high}\n"
          + "\n".join(lines))


def _length_sweep(config, workdir: str, step: int | None) -> tuple[dict, str]:
  config_lib.validate_eval(config)
  results = Evaluator(config, workdir, step).sweep(config_lib.eval_lengths(config))
  return results, format_table({_run_name(workdir): results})


def _task_accuracy(config, workdir: str, step: int | None) -> tuple[dict, str]:
  config_lib.validate(config)  # eval lengths are task sizes here; task_hits checks them
  results = Evaluator(config, workdir, step).task_sweep()
  return results, format_task_table(_run_name(workdir), results)


# How a run is evaluated, by data.name; every text source gets the length sweep.
EVALUATIONS = {"task": _task_accuracy}


def _run_name(workdir: str) -> str:
  return os.path.basename(os.path.normpath(workdir))


def evaluate(config, workdir: str, step: int | None = None) -> dict:
  """Evaluates the checkpoint, writes workdir/eval/results.json and prints the table."""
  results, table = EVALUATIONS.get(config.data.name, _length_sweep)(config, workdir, step)
  if jax.process_index() == 0:
    out_dir = os.path.join(workdir, "eval")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "results.json")
    with open(path + ".tmp", "w") as f:
      json.dump(results, f, indent=2)
    os.replace(path + ".tmp", path)
    print(table, flush=True)
  return results
