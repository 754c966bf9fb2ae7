"""Evaluation of a checkpoint past its training length, under every variant in one process.

`evaluate(config, workdir)` restores the parameters once (no optimizer state) and, for each
variant in `eval.variants` (`lcx/config/variants.py`: none, yarn@4, self_extend@64/4, ...), runs the
run's evaluator and writes `WORKDIR/eval/<variant>.json`:
  text runs   the length sweep (`lengths.py`) over the protocol's windows (`samples.py`):
              loss, perplexity and bits per byte with bootstrap intervals, loss by position
  task runs   exact match per task-size bucket (`tasks.py`)
and, for a text run with `eval.passkey.lengths`, the passkey probe through generation
(`passkey.py`) once per variant: `WORKDIR/eval/passkey@<variant>.json`, named by the variant's
own result name behind `passkey@`, so each file holds one variant.
Each of these is one record in `kinds.py` (which runs get it, its results, its settings, its
body); evaluation iterates those records.
A result for the same checkpoint (its fingerprint, `checkpoint.fingerprint`) and settings is
reused unless `force`; a result it replaces that came from another checkpoint or other settings
is kept in `WORKDIR/eval/history/` (`report` reads the newest, `eval/<name>.json`). The
checkpoint is always evaluated with its trained fields (scheme, its learned fields, model shape,
training length): a config that changes one is refused naming the field
(`variants.check_trained`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import time
from importlib import metadata

import jax
import ml_collections

from lcx import data, errors, files
from lcx.config import checks as config_lib, variants
from lcx.data import pipeline
from lcx.run import checkpoint, metrics, prepare as prepare_lib, provenance
from lcx.run.metrics import say
from lcx.tools import report
from lcx.tools.evaluate import (
  beta_fit,
  checks,
  kinds,
  memory,
  samples,
)
from lcx.tools.evaluate.runner import Runner

SCHEMA = "lcx.eval/1"


def versions() -> dict:
  out = {"python": platform.python_version()}
  for package in ("lcx", "jax", "flax"):
    try:
      out[package] = metadata.version(package)
    except metadata.PackageNotFoundError:
      out[package] = "unknown"
  return out


def _init_from(trained: dict) -> dict | None:
  """The run a fine-tune started from, as its checkpoint recorded it (resolved config)."""
  source = trained.get("train", {}).get("init_from", "")
  if not source:
    return None
  workdir, step = prepare_lib.parse_init_from(source)
  return {"workdir": workdir, "step": step}


def _settings(
  kind: str, cfg, spec: str, changes: dict, lengths: list[int], scored: str | None = None
) -> str:
  """What makes two results of the same step interchangeable, as a hash: of eval.*, what the
  kind's `settings` keeps (`kinds.Kind`); `scored`, a length sweep's `samples.fingerprint` of
  the tokens it scores."""
  ev = kinds.KINDS[kind].settings(cfg.eval.to_dict())
  what = {
    "kind": kind,
    "variant": spec,
    "overrides": changes,
    "lengths": lengths,
    "eval": ev,
    "data": cfg.data.to_dict(),
    "model": cfg.model.to_dict(),
  }
  if scored is not None:
    what["scored"] = scored
  text = json.dumps(what, sort_keys=True, default=list)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan(prepared) -> list[tuple[str, str, dict, ml_collections.ConfigDict]]:
  """(result name, variant, overrides, config) for each of eval.variants x (for text runs)
  eval.protocol x eval.documents, all checked before any runs (memory too: `memory.check`).
  The variant is as `variants.result_variant` names it (`none+rerope` with a remap the config
  sets), the result name its file name (`yarn@4`), with `.PROTOCOL-DOCUMENTS` unless
  that is windows over the stream, and `.randomM` (M recorded in the overrides too) with
  eval.random_positions=M.
  `prepare` checked the run's own fields; a variant's changed ones are checked here."""
  cfg, out = prepared.config, []
  combos = [("windows", "stream")] if cfg.data.name == "task" else config_lib.eval_combos(cfg.eval)
  if cfg.data.name != "task":  # the combinations as asked: one eval_combos drops is named here
    checks.check(cfg)
  for asked in variants.names(cfg.eval.variants):
    changes = variants.overrides(asked, cfg.eval.named_variants)
    variant_cfg = variants.apply(cfg, changes)
    if changes:
      config_lib.check_fields(variant_cfg)
    spec = variants.result_variant(asked, changes, variant_cfg)  # `none+rerope`: a remap given
    for protocol, documents in combos:
      combo_cfg = ml_collections.ConfigDict(variant_cfg.to_dict())
      combo_cfg.eval.update(protocol=protocol, documents=documents)
      checks.check(combo_cfg)
      name = variants.file_name(spec)[: -len(".json")]
      if (protocol, documents) != ("windows", "stream"):
        name += f".{protocol}-{documents}"
      sampled = combo_cfg.eval.random_positions
      if sampled:  # scored at other positions: its own file, and said in the overrides
        name += f".random{sampled}"
        changes = {**changes, "eval.random_positions": sampled}
      out.append((name, spec, changes, combo_cfg))
  if not out:
    raise ValueError("eval.variants is empty; give at least one, e.g. 'none'")
  for kind in kinds.KINDS.values():
    kind.check(cfg, prepared.tokenizer)
  if cfg.data.name != "task":
    for _, _, _, combo_cfg in out:  # before anything compiles: a length that cannot fit
      memory.check(combo_cfg, config_lib.eval_lengths(combo_cfg), prepared.mesh)
  return out


def _write(path: str, result: dict) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  files.write_json(path, result, indent=1, default=list)


def record(
  kind: str,
  body: dict,
  *,
  workdir: str,
  spec: str,
  changes: dict,
  step: int,
  variant_cfg,
  train_len: int,
  meta: dict,
  settings: str,
  seconds: float,
  checkpoint_id: str,
) -> dict:
  """A result JSON: the keys every kind has (SPEC.md: schema, run, variant, step, config,
  versions, source: commit and dirty, ...) around `body`, the kind's own."""
  return {
    "schema": SCHEMA,
    "kind": kind,
    "run": os.path.basename(os.path.normpath(workdir)),
    "workdir": os.path.abspath(workdir),
    "variant": spec,
    "overrides": changes,
    "step": step,
    "checkpoint": checkpoint_id,
    "scheme": variant_cfg.model.position.name,
    "remap": variant_cfg.model.remap.name,
    "train_len": train_len,
    "corpus": None if variant_cfg.data.name == "task" else pipeline.corpus_name(variant_cfg.data),
    "init_from": _init_from(meta["config"]),
    **body,
    "settings": settings,
    "config": variant_cfg.to_dict(),
    "versions": versions(),
    "source": provenance.source(),
    "device": f"{jax.default_backend()} x{jax.device_count()}",
    "wall_seconds": round(seconds, 2),
    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
  }


def _identity(result: dict) -> tuple:
  """What a result was computed from: its checkpoint (step and fingerprint) and settings."""
  return result.get("step"), result.get("checkpoint"), result.get("settings")


def _reusable(path: str, step: int, settings: str, checkpoint_id: str) -> dict | None:
  """The result at `path` if it is of the same checkpoint and settings."""
  if not os.path.exists(path):
    return None
  old = errors.load_json(path, "delete it, or pass --force to evaluate again")
  return old if _identity(old) == (step, checkpoint_id, settings) else None


def _keep_replaced(path: str, result: dict) -> str | None:
  """Moves the result at `path` to eval/history/ unless `result` is of the same checkpoint
  and settings (a recomputation); returns where it went. Unreadable files are kept too."""
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      old = json.load(f)
  except (OSError, ValueError):
    old = {}
  if isinstance(old, dict) and _identity(old) == _identity(result):
    return None
  step, ckpt, settings = _identity(old) if isinstance(old, dict) else (None, None, None)
  name = os.path.basename(path)[: -len(".json")]
  target = os.path.join(
    os.path.dirname(path),
    report.HISTORY,
    f"{name}.step{step}.{str(ckpt)[-8:]}.{settings}.json",
  )
  os.makedirs(os.path.dirname(target), exist_ok=True)
  os.replace(path, target)
  return target


def evaluate(
  config,
  workdir: str,
  step: int | None = None,
  *,
  force: bool = False,
  prepared=None,
  todo=None,
  trained=None,
  print_tables: bool = True,
) -> dict[str, dict]:
  """Evaluates every variant; writes WORKDIR/eval/<name>.json (and passkey@<variant>.json);
  prints the tables (unless print_tables=False: the quickstart prints all runs' once).
  Returns the results by name: the file name without .json, the variant as written
  (`yarn@4`, `yarn@4.sliding-long`, `passkey@yarn@4`). `prepared` and `todo`
  (`plan(prepared)`): if made already. `trained`: `train.Outcome.trained` of the run just
  trained in `workdir` with `config` (its parameters are evaluated without a restore)."""
  prepared = prepared or prepare_lib.prepare(config)
  cfg = prepared.config
  todo = todo or plan(prepared)
  step, params, meta = prepare_lib.restore(prepared, workdir, step, trained)
  checkpoint_id = checkpoint.fingerprint(workdir, step, meta)
  train_len = cfg.model.max_len
  eval_lengths = config_lib.eval_lengths(cfg)
  sequences, byte_lengths = {}, prepared.tokenizer.byte_lengths()

  def drawn(ev) -> list[samples.Sequence]:
    """The sample of eval.documents, drawn once: every variant and length scores it."""
    if ev.documents not in sequences:
      sequences[ev.documents] = samples.select(
        data.validation_documents(cfg.data, prepared.tokenizer),
        ev.documents,
        max(eval_lengths),
        ev.num_tokens,
        ev.sample_seed,
        "evaluation",  # never the documents a search fitted on
      )
      short = samples.shortfall(sequences[ev.documents], ev.num_tokens, max(eval_lengths))
      if short:
        say(f"warning: {short}")
    return sequences[ev.documents]

  context = kinds.Context(prepared, eval_lengths, train_len, drawn, byte_lengths)
  jobs = [
    (*planned, kind)
    for kind in kinds.KINDS.values()
    if kind.runs(cfg)
    for planned in kind.results(todo)
  ]
  results, trackers = {}, []  # the run's trackers, opened at the first new result
  fits = {}  # beta@fit: spec -> (C, the fit's record), fitted once per variant
  try:
    for name, spec, changes, variant_cfg, kind in jobs:
      path = os.path.join(workdir, "eval", name + ".json")
      # a length sweep's key holds the tokens it scores: edited validation files are new ones
      scored = samples.fingerprint(drawn(variant_cfg.eval)) if kind.scored else None
      key = _settings(kind.name, variant_cfg, spec, changes, kind.lengths(cfg), scored)
      old = None if force else _reusable(path, step, key, checkpoint_id)
      if old is not None:
        say(f"{name}: reusing {path} (same checkpoint and settings; --force recomputes)")
        results[_key(name, spec)] = old
        continue
      start = time.perf_counter()
      say(f"{name}: evaluating step {step} -> {path}")
      fit = None
      if variant_cfg.eval.beta_fit.fitted:
        if spec not in fits:
          fits[spec] = beta_fit.fit(prepared, params, variant_cfg, eval_lengths, Runner)
        c, fit = fits[spec]
        variant_cfg = beta_fit.with_c(variant_cfg, c)
      runner = Runner(prepare_lib.for_variant(prepared, variant_cfg), params)
      body_result = kind.body(context, runner)
      if fit is not None:
        body_result = {**body_result, "beta_fit": fit}
      result = record(
        kind.name,
        body_result,
        workdir=workdir,
        spec=spec,
        changes=changes,
        step=step,
        variant_cfg=variant_cfg,
        train_len=train_len,
        meta=meta,
        settings=key,
        seconds=time.perf_counter() - start,
        checkpoint_id=checkpoint_id,
      )
      if jax.process_index() == 0:
        kept = _keep_replaced(path, result)
        try:
          _write(path, result)
        except errors.RunFault:  # a full disk: the earlier result back where it was
          if kept:
            os.replace(kept, path)
          raise
        if kept:
          say(f"{name}: the earlier result (another checkpoint or other settings) kept as {kept}")
        if not trackers:
          trackers = metrics.open_trackers(workdir, cfg.train.trackers, cfg.to_dict())
        _to_trackers(trackers, name, result)
      results[_key(name, spec)] = result
  finally:
    for tracker in trackers:
      tracker.close()
  if print_tables and jax.process_index() == 0:
    print(table(results), flush=True)
  return results


def _to_trackers(trackers: list, name: str, result: dict) -> None:
  """A length result's perplexity and loss per length at its step, beside training's curves
  in each of the run's trackers (train.trackers): `eval_final/<result name>/ppl_<length>` (and
  `loss_`; TensorBoard shows a name's @ as _)."""
  if not kinds.KINDS[result["kind"]].tracked:
    return
  values = {}
  for n, entry in result["lengths"].items():
    values[f"eval_final/{name}/ppl_{n}"] = entry["perplexity"]
    values[f"eval_final/{name}/loss_{n}"] = entry["loss"]
  for tracker in trackers:
    tracker.scalars(result["step"], values)


def _key(name: str, spec: str) -> str:
  """A result's key in evaluate's return: its file name with the variant as written
  (`longrope@runs/x/factors.json.sliding-long`, not the file-safe form)."""
  return name.replace(variants.file_name(spec)[: -len(".json")], spec, 1)


def table(results: dict[str, dict]) -> str:
  """The printed summary: the report module's tables but the wide loss-by-position one (it is
  in the result files, `./launch.sh report` and its plot)."""
  return "\n\n".join(
    f"## {heading}\n\n{body}"
    for heading, body, _ in report.sections(list(results.values()))
    if heading != "Loss by position"
  )
