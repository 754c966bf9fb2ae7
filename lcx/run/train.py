"""The train loop: one linear function in commented sections.

Model and optimizer state are split once into pure pytrees; the jitted step takes and donates
them with explicit shardings over the ("data", "fsdp", "tensor") mesh. Metrics of step s are
fetched after step s+1 is dispatched, so the host never stalls the accelerator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import signal
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from lcx import data, errors
from lcx.config import checks as config_lib
from lcx.model import positions
from lcx.model.decoder import Decoder
from lcx.run import checkpoint, prepare as prepare_lib, resume, sharding
from lcx.run.metrics import MetricWriter, say
from lcx.run.prepare import abstract_sharded


class NonFiniteLossError(errors.RunFault):
  """Raised when a step's loss, gradient norm or updated-parameter norm is NaN or Inf;
  checkpoints stay untouched."""


@dataclasses.dataclass(frozen=True)
class Outcome:
  """How a train() call ended. `interrupted`: a SIGTERM, SIGINT or preemption stopped it
  before train.steps, so a caller should not evaluate the unfinished model; `signal`: the
  signal's name, if one did."""

  metrics: dict
  interrupted: bool
  signal: str = ""
  trained: "Trained | None" = None  # the finished run's last checkpoint, held in memory


@dataclasses.dataclass(frozen=True)
class Trained:
  """The parameters of checkpoint `step`, as saved (`meta`: its metadata and fingerprint), still
  on the mesh: `train_and_eval` evaluates them without reading them back."""

  step: int
  params: Any
  meta: dict


def learning_rate(train_cfg) -> optax.Schedule:
  """Linear warmup to `lr`, then cosine/linear decay to `min_lr` at `steps` (or constant)."""
  c = train_cfg
  warmup = optax.linear_schedule(0.0, c.lr, max(c.warmup_steps, 1))
  decay_steps = max(c.steps - c.warmup_steps, 1)
  decays = {
    "cosine": optax.cosine_decay_schedule(c.lr, decay_steps, alpha=c.min_lr / c.lr),
    "linear": optax.linear_schedule(c.lr, c.min_lr, decay_steps),
    "constant": optax.constant_schedule(c.lr),
  }
  return optax.join_schedules([warmup, decays[c.decay]], [c.warmup_steps])


def optimizer(train_cfg) -> optax.GradientTransformation:
  """AdamW with weight decay on matrices only (not norms, not biases), after clipping."""

  def decay_mask(params):
    return jax.tree.map(lambda p: p.ndim >= 2, params)

  tx = optax.adamw(
    learning_rate(train_cfg),
    b1=train_cfg.b1,
    b2=train_cfg.b2,
    weight_decay=train_cfg.weight_decay,
    mask=decay_mask,
  )
  if train_cfg.clip_norm > 0:
    tx = optax.chain(optax.clip_by_global_norm(train_cfg.clip_norm), tx)
  return tx


def loss_fn(model, batch, pos_BxL, distances_L=None):
  """Mean next-token cross entropy over tokens with loss_mask > 0."""
  logits_BxLxV = model(batch["inputs"], pos_BxL, batch["segment_ids"], distances_L=distances_L)
  nll_BxL = optax.softmax_cross_entropy_with_integer_labels(logits_BxLxV, batch["targets"])
  mask_BxL = batch["loss_mask"].astype(jnp.float32)
  return (nll_BxL * mask_BxL).sum() / jnp.maximum(mask_BxL.sum(), 1.0)


def position_sampler(config):
  """(batch, step) -> (pos_BxL, distances_L or None): the positions a train step feeds the
  model (randomized, PoSE or the batch's own), a pure function of the seed and the step."""
  key = jax.random.key(config.seed)
  random_max, pose_target = config.train.random_positions, config.train.pose_target
  # Ruoss et al.: a distance-only bias samples sorted distances, every other scheme positions.
  distances = (
    random_max
    and config.train.random_bias == "distances"
    and positions.spec(config.model.position.name).cls.bias_of_distance
  )

  def sample(batch, step):
    pos_BxL, distances_L = batch["positions"], None
    if distances:
      length = pos_BxL.shape[1]
      distances_L = positions.random_distances(jax.random.fold_in(key, step), length, random_max)
    elif random_max:
      pos_BxL = positions.randomized_positions(
        jax.random.fold_in(key, step), pos_BxL, random_max, batch["segment_ids"]
      )
    if pose_target:  # config.validate: never with random_max
      pos_BxL = positions.pose_positions(
        jax.random.fold_in(key, step), pos_BxL, pose_target, batch["segment_ids"]
      )
    return pos_BxL, distances_L

  return sample


def make_step(graphdef, tx, config):
  """The pure train step: (params, opt_state, batch, step) -> (params, opt_state, metrics)."""
  schedule = learning_rate(config.train)
  sample = position_sampler(config)

  def step_fn(params, opt_state, batch, step):
    pos_BxL, distances_L = sample(batch, step)
    loss, grads = jax.value_and_grad(
      lambda p: loss_fn(nnx.merge(graphdef, p), batch, pos_BxL, distances_L)
    )(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    # loss and grad_norm describe the input parameters; param_norm guards the ones saved.
    metrics = {
      "loss": loss,
      "grad_norm": optax.tree.norm(grads),
      "param_norm": optax.tree.norm(params),
      "lr": schedule(step),
    }
    return params, opt_state, metrics

  return step_fn


# XLA:CPU: elementwise fusions through YNNPACK, dots through Eigen, which reads transposed
# operands in place. By default dots go through YNNPACK, and XLA first copies every weight
# gradient's operand into a transposed layout (~18% of the default model's step in a profile);
# this choice made the step 11-14% faster (experiments/bench/README.md). Same HLO math.
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_ELTWISE"}


def compiler_options() -> dict | None:
  """Per-program XLA options for the current backend (None: XLA's defaults)."""
  return CPU_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None


class Trainer:
  """The optimizer, sharded state and jitted step for a prepared config (`lcx.run.prepare`)."""

  def __init__(self, prepared):
    config, mesh = prepared.config, prepared.mesh
    self.config, self.mesh, self.rules = config, mesh, prepared.rules
    self.tx = optimizer(config.train)
    self.graphdef = prepared.graphdef
    abstract_opt = jax.eval_shape(self.tx.init, prepared.abstract_params)
    self.abstract_state = {
      "params": prepared.abstract_params,
      "opt_state": abstract_sharded(abstract_opt, mesh, self.rules),
    }
    self.shardings = jax.tree.map(lambda a: a.sharding, self.abstract_state)
    replicated = jax.sharding.NamedSharding(mesh, jax.P())
    self.step = jax.jit(
      make_step(self.graphdef, self.tx, config),
      in_shardings=(
        self.shardings["params"],
        self.shardings["opt_state"],
        sharding.batch_sharding(mesh, self.rules),
        replicated,
      ),
      out_shardings=(self.shardings["params"], self.shardings["opt_state"], replicated),
      donate_argnums=(0, 1),
      compiler_options=compiler_options(),
    )

  def init_state(self, params=None) -> dict:
    """Fresh parameters from config.seed, or `params` (fine-tuning), with a fresh optimizer."""
    if params is not None:
      opt_state = jax.jit(self.tx.init, out_shardings=self.shardings["opt_state"])(params)
      return {"params": params, "opt_state": opt_state}

    def init():
      model = Decoder(self.config.model, rngs=nnx.Rngs(self.config.seed))
      params = nnx.state(model, nnx.Param)
      return {"params": params, "opt_state": self.tx.init(params)}

    return jax.jit(init, out_shardings=self.shardings)()

  def num_params(self) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(self.abstract_state["params"]))


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _install_stop_flag() -> dict:
  """SIGTERM or SIGINT (Ctrl-C) sets a flag, the signal's name, checked before the first step
  and after each: save, exit cleanly. A second one is said and changes nothing: raised in the
  middle of a save, it would leave that checkpoint half-written and print a traceback."""
  flag = {"stop": "", "previous": {s: signal.getsignal(s) for s in STOP_SIGNALS}}

  def handler(signum, frame):
    del frame
    name = signal.Signals(signum).name
    if flag["stop"]:
      say(
        f"{name} again: still stopping after the current step and its checkpoint; SIGKILL "
        "stops at once, losing the steps since the last checkpoint"
      )
      return
    say(f"{name} received: finishing the current step (or setup), then saving and exiting")
    flag["stop"] = name

  for s in STOP_SIGNALS:
    signal.signal(s, handler)
  return flag


def _check_finite(step: int, metrics: dict) -> None:
  bad = {name: float(value) for name, value in metrics.items() if not np.isfinite(value)}
  if bad:
    raise NonFiniteLossError(
      f"non-finite {bad} at step {step}; stopping. The last good "
      "checkpoint is intact; lower train.lr or check the data."
    )


LOCK = "train.lock"  # in the workdir: flock'ed by the training process, which writes its PID


@contextlib.contextmanager
def workdir_lock(workdir: str):
  """One training per workdir (process 0 of a run holds it): two would delete each other's
  temporary checkpoints. A held lock is a RunFault naming the holder's PID; the kernel releases
  it when the holder dies, however it dies."""
  if jax.process_index() != 0:
    yield
    return
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, LOCK)
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
      raise errors.RunFault(
        f"--workdir={workdir} is in use: process {holder} is training in it (it holds "
        f"{path}); wait for it to finish or stop it, or train in another --workdir"
      ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    yield
  finally:
    os.close(fd)  # releases the lock


# Builds the evaluation during training (train.eval_every) from the prepared run, before
# anything is written: `evaluator(params) -> {metric: value}`, logged with the step's metrics.
MakeEvaluator = Callable[[Any], Callable[[Any], dict[str, float]]]


def train(
  config, workdir: str, prepared=None, *, evaluate_during_train: MakeEvaluator | None = None
) -> Outcome:
  """Trains to config.train.steps, resuming from workdir if a checkpoint is there.

  Returns the metrics of the last logged step and whether a SIGTERM, SIGINT or preemption cut
  it short. The handlers come first, so a signal during setup also ends the call cleanly.
  `prepared`: `prepare(config, workdir)` (which resolves train.init_from), if already built.
  `evaluate_during_train`: what train.eval_every runs, given by the command that trains
  (lcx.tools.evaluate.during_train.DuringTrain), so that run/ imports nothing of tools/;
  ValueError when train.eval_every asks for it and there is none.
  Raises errors.RunFault for a workdir another process trains in, or a non-finite step.
  """
  if config.train.eval_every and evaluate_during_train is None:
    raise ValueError(
      f"train.eval_every={config.train.eval_every}: this caller of lcx.run.train.train gives "
      "no evaluate_during_train (lcx.tools.evaluate.during_train.DuringTrain)"
    )
  stop = _install_stop_flag()
  try:
    prepared = prepared or prepare_lib.prepare(config, workdir)
    with workdir_lock(workdir):
      outcome = _train(prepared, workdir, stop, evaluate_during_train)
    return dataclasses.replace(outcome, signal=stop["stop"] if outcome.interrupted else "")
  finally:
    for s, handler in stop["previous"].items():
      signal.signal(s, handler)


def _train(prepared, workdir: str, stop: dict, make_evaluator: MakeEvaluator | None) -> Outcome:
  # --- Setup: the prepared config (validated, tokenizer, mesh, abstract model), state. ---
  config, tokenizer, mesh = prepared.config, prepared.tokenizer, prepared.mesh
  # The validation sample of evaluation during training, drawn before anything is written.
  evaluator = make_evaluator(prepared) if config.train.eval_every else None
  if jax.process_index() == 0:
    _record_changes(prepared.changed, workdir)  # before config.json claims them
    config_lib.save(config, workdir)
  trainer = Trainer(prepared)
  iterator = data.make_train_iterator(
    config.data,
    process_index=jax.process_index(),
    process_count=jax.process_count(),
    tokenizer=tokenizer,
  )
  ckpt = checkpoint.Checkpointer(
    workdir, every=config.train.checkpoint_every, keep=config.train.keep_checkpoints
  )
  ckpt = _resume_step(ckpt, config, workdir)
  meta = {"tokenizer": tokenizer.metadata(), "config": config.to_dict(), "init_from": None}
  if config.train.init_from:  # the source run (resolved "ABS_DIR@STEP" by prepare)
    source_dir, source_step = prepare_lib.parse_init_from(config.train.init_from)
    meta["init_from"] = {"workdir": source_dir, "step": source_step}
  start = ckpt.latest_step()
  if start is None:
    start, saved = 0, None
    state = trainer.init_state(_source_params(prepared, workdir))
  else:
    state, meta_of_start = ckpt.restore(start, trainer.abstract_state, iterator)
    saved = (start, meta_of_start)  # the checkpoint the state in hand is
    say(f"resumed from step {start} in {ckpt.directory}")
  if stop["stop"]:  # nothing trained since the last checkpoint (or init): nothing to save
    ckpt.close()
    say(f"{stop['stop']} during setup: exiting before step {start + 1}; nothing new to save")
    return Outcome({}, interrupted=True)
  say(
    f"model: {trainer.num_params() / 1e6:.2f}M parameters; mesh {dict(mesh.shape)}; "
    f"training steps {start}..{config.train.steps} -> {workdir}"
  )

  # --- Loop. ---
  writer = MetricWriter(
    workdir,
    total=config.train.steps,
    initial=start,
    tokens_per_step=config.data.batch_size * config.data.seq_len,
    trackers=config.train.trackers,
    config=config.to_dict(),
  )
  pending, last, interrupted = None, {}, False
  try:
    for step in range(start, config.train.steps):
      batch = sharding.global_batch(next(iterator), mesh, trainer.rules)
      params, opt_state, metrics = trainer.step(
        state["params"], state["opt_state"], batch, jnp.asarray(step, jnp.int32)
      )
      state = {"params": params, "opt_state": opt_state}
      if pending is not None:  # fetch the previous step's metrics after dispatching this one
        last = _fetch(writer, *pending) or last
      done = step + 1
      interrupted = (
        bool(stop["stop"] or ckpt.reached_preemption(done)) and done < config.train.steps
      )
      stop_now = interrupted or done == config.train.stop_after
      if ckpt.should_save(done) or done == config.train.steps or stop_now:
        _check_finite(done, jax.device_get(metrics))  # never save weights of a bad step
        ckpt.save(done, state, iterator, meta, force=True)
        saved = (done, ckpt.saved_meta)
      # Scored before the next step donates these parameters; written with this step's metrics.
      evals = {}
      if evaluator and not interrupted and done % config.train.eval_every == 0:
        started = time.perf_counter()
        evals = evaluator(state["params"])
        writer.exclude_time(time.perf_counter() - started)
      pending = (done, metrics, done % config.train.log_every == 0, evals)
      if stop_now:
        say(f"stopped at step {done} after saving a checkpoint")
        break
    if pending is not None:
      last = _fetch(writer, *pending[:2], True, pending[3]) or last
  finally:
    ckpt.close()
    writer.close()
  # Every way out of the loop saves the last state first: it is the latest checkpoint.
  trained = None if interrupted or saved is None else Trained(saved[0], state["params"], saved[1])
  return Outcome(last, interrupted, trained=trained)


def _resume_step(ckpt, config, workdir: str):
  """With train.resume_step=N (checked by prepare): the steps after N are set aside, so the
  run resumes from N; unless the latest checkpoint was saved by a run that resumed from N
  already (`prepare.resumed_from`), whose later steps are its own."""
  step, latest = config.train.resume_step, ckpt.latest_step()
  if not step or latest is None or latest <= step:
    return ckpt
  if prepare_lib.resumed_from(workdir, latest, step):
    return ckpt
  moved = ckpt.set_aside_after(step)
  ckpt.close()
  aside = os.path.join(workdir, checkpoint.SET_ASIDE)
  names = ", ".join(moved.values())
  say(f"train.resume_step={step}: steps {list(moved)} moved to {aside} as {names}")
  return checkpoint.Checkpointer(
    workdir, every=config.train.checkpoint_every, keep=config.train.keep_checkpoints
  )


def _record_changes(changed: dict | None, workdir: str) -> None:
  """A resume's accepted schedule changes (train.allow_changes), said and recorded with the step
  they apply from in WORKDIR/config_history.jsonl, which keeps the config they replaced."""
  if changed is None:
    return
  path = os.path.join(workdir, resume.HISTORY)
  said = "recorded in" if resume.record(workdir, changed) else "already recorded in"
  say(f"train.allow_changes: {resume.describe(changed)} ({said} {path})")


def _fetch(writer, step, metrics, log_now, evals):
  """Checks a step's metrics for NaN/Inf; at log steps writes them with throughput, and the
  step's evaluation (train.eval_every) with them or on its own."""
  values = {name: float(value) for name, value in jax.device_get(metrics).items()}
  _check_finite(step, values)
  return writer.step_done(step, values, log=log_now, extra=evals)


def _source_params(prepared, workdir: str):
  """A fresh run's starting parameters: the source's for a fine-tune, else None (init)."""
  source = prepared.init_from
  if source is None:
    if prepared.config.train.init_from:
      raise ValueError(
        f"train.init_from={prepared.config.train.init_from!r} was not resolved "
        f"for {workdir}: build the run with lcx.run.prepare.prepare(config, workdir)"
      )
    return None
  say(
    f"starting from {source.workdir} step {source.step} (train.init_from; parameters only: "
    "fresh optimizer and schedule)"
  )
  params, added = prepare_lib.restore_source_params(prepared)
  if added:
    say(f"not in the source, from their initial values: {', '.join(added)}")
  return params
