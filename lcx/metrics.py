"""Training metrics to a JSON-lines file, TensorBoard event files and a progress display.

A tqdm bar in a terminal; plain log lines when stdout is not a TTY (CI, SLURM, nohup).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import jax
from tensorboardX import SummaryWriter
from tqdm import tqdm


class MetricWriter:
  """Writes on process 0 only; every process keeps time so throughput is per step."""

  def __init__(self, workdir: str, *, total: int, initial: int = 0, tokens_per_step: int = 0):
    self.main = jax.process_index() == 0
    self.tokens_per_step = tokens_per_step
    self._last_time, self._steps_since = time.perf_counter(), 0
    self.jsonl = self.tb = self.bar = None
    if not self.main:
      return
    os.makedirs(workdir, exist_ok=True)
    self.jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a")
    self.tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
    if sys.stdout.isatty():
      self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

  def step_done(self, step: int, values: dict, *, log: bool) -> dict:
    """Counts a finished step; when `log`, adds throughput and writes everything."""
    self._steps_since += 1
    if self.bar is not None:
      self.bar.update(1)
    if not log:
      return {}
    now = time.perf_counter()
    step_time = (now - self._last_time) / self._steps_since
    self._last_time, self._steps_since = now, 0
    values = dict(values, perplexity=math.exp(min(values["loss"], 50.0)), step_time=step_time,
                  tokens_per_sec=self.tokens_per_step / step_time)
    self.write(step, values)
    return values

  def write(self, step: int, values: dict) -> None:
    if not self.main:
      return
    self.jsonl.write(json.dumps({"step": step, **values}) + "\n")
    self.jsonl.flush()
    for k, v in values.items():
      self.tb.add_scalar(k, v, step)
    line = (f"step {step}: loss {values['loss']:.4f} ppl {values['perplexity']:.2f} "
            f"grad_norm {values['grad_norm']:.3f} lr {values['lr']:.2e} "
            f"{values['tokens_per_sec']:.0f} tok/s {values['step_time'] * 1e3:.0f} ms/step")
    if self.bar is not None:
      self.bar.set_postfix_str(line.split(": ", 1)[1])
    else:
      print(line, flush=True)

  def close(self) -> None:
    for handle in (self.bar, self.tb, self.jsonl):
      if handle is not None:
        handle.close()
