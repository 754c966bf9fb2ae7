"""The LongRoPE search (Ding 2024, 2402.13753): RoPE rescale factors for one target length,
found by evolutionary search on a trained run, without fine-tuning.

`python -m lcx.tools.longrope --workdir=DIR --config.eval.longrope.target_len=N` (`./launch.sh
longrope`) starts from the run's own config (DIR/config.json, as `lcx.main --mode=eval`), so
only eval-time fields may change (`lcx.run.prepare.restore` refuses a trained one).

A candidate is a `longrope` scaling for the scale s = N / L: a factor lambda_i per rotary pair
(inv_freq_i = theta_i / lambda_i), non-decreasing in i (pair 0 has the highest frequency) and in
[1, max_factor] (default 1.25 s), and n_hat (positions < n_hat keep theta; one of the paper's
Table 4 candidates 0, 1, 2, 4, 8, 12, ..., 28, 32, 64, 128, 256 up to L). Its fitness is the
perplexity at length N on `documents` validation documents of at least N tokens from the search
split (`samples.split_ids`: a fixed quarter of the validation documents that no evaluation
scores, so the factors are not fitted to the table's documents; `samples.select(..., "long", N,
..., "search")`, one window each, every token scored) with LongRoPE's attention factor, as
`eval.documents=long` evaluation of `longrope@factors.json` at N scores the evaluation split. The
state records the split and its document ids. The first generation is PI (every lambda = s),
NTK-aware (lambda_i = s^(2i/(d-2)), from its larger base) and YaRN (theta_i / YaRN's inv_freq_i),
then mutations of them; each later generation keeps the `parents` best (elitism, so the best never
gets worse) and adds `mutations` children (each pair resampled with mutation_rate from the grid
between its neighbours, so the order holds; n_hat moves one choice) and `crossovers` children (pairs
from the second parent with crossover_rate, kept only when non-decreasing). A candidate is scored
once (the history caches it) and children are drawn new where possible.

One compiled program scores every candidate: the factors and n_hat are inputs, one candidate
per batch row (`scaling.with_row_factors`), not constants of a program per candidate. Resumable:
DIR/longrope/state.json (population with fitness, best, the seeds' fitness, a per-generation
log, the history) is written atomically after each generation, and generation g draws from
the seed (seed, g), so an interrupted search continues exactly. A finished one prints its result;
raising eval.longrope.generations continues it. The best goes to DIR/longrope/factors.json,
a Hugging Face `longrope` dict for `--config.eval.variants=longrope@DIR/longrope/factors.json`.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: its flags and fields are checked before jax loads
  from lcx.tools import longrope_cli

  def _run(*args, **kwargs):
    """Once they pass: this file again, as the module lcx.tools.longrope (jax), runs the search."""
    from lcx.tools import longrope

    longrope.main(*args, **kwargs)

  longrope_cli.run(_run)  # exits

import dataclasses
import json
import math
import os
import time

import jax
import numpy as np
import optax
from flax import nnx

from lcx import cli, data, errors, files
from lcx.config import checks as config_lib, variants
from lcx.model.positions import scaling
from lcx.run import prepare as prepare_lib, progress, provenance
from lcx.run.metrics import say
from lcx.tools import longrope_cli
from lcx.tools.evaluate import samples
from lcx.tools.evaluate.runner import Runner

SCHEMA = "lcx.longrope/1"
MAX_TRIES = 50  # draws a mutation or crossover makes to find a candidate not scored before
SEEDS = ("pi", "ntk", "yarn")


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One point of the search space, with its perplexity once scored."""

  long_factor: tuple[float, ...]
  n_hat: int
  origin: str  # pi | ntk | yarn | mutation | crossover
  perplexity: float | None = None

  @property
  def key(self) -> tuple:
    return tuple(round(x, 6) for x in self.long_factor), self.n_hat

  def to_json(self) -> dict:
    return {
      "long_factor": list(self.long_factor),
      "n_hat": self.n_hat,
      "origin": self.origin,
      "perplexity": self.perplexity,
    }


def _candidate(d: dict) -> Candidate:
  return Candidate(tuple(d["long_factor"]), d["n_hat"], d["origin"], d["perplexity"])


def _fitness(c: Candidate) -> float:
  """Lower is better; a non-finite perplexity ranks last."""
  return c.perplexity if c.perplexity is not None and math.isfinite(c.perplexity) else math.inf


@dataclasses.dataclass(frozen=True)
class Space:
  """The search space and the evolution's settings (eval.longrope resolved)."""

  num_pairs: int
  max_factor: float
  step: float
  n_hats: tuple[int, ...]
  mutation_rate: float
  crossover_rate: float

  def draw(self, rng, lo: float, hi: float, current: float) -> float:
    """A grid value in [lo, hi], uniformly; `current` when the grid has none there."""
    first, last = math.ceil(lo / self.step - 1e-9), math.floor(hi / self.step + 1e-9)
    if last < first:
      return current
    return min(max(round(int(rng.integers(first, last + 1)) * self.step, 10), lo), hi)


# The paper's n_hat candidates (Ding 2024, Table 4): every 4 from 4 to 32, then powers of two.
N_HAT_CANDIDATES = (0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 64, 128, 256)


def n_hat_choices(train_len: int) -> tuple[int, ...]:
  """The paper's n_hat candidates up to the training length L."""
  return tuple(n for n in N_HAT_CANDIDATES if n <= train_len)


def seed_factors(rotary_dim: int, base: float, scale: float, train_len: int) -> dict:
  """lambda_R of PI, NTK-aware and YaRN: theta_i / the method's inv_freq_i (scaling.py)."""
  theta_R = scaling.theta(rotary_dim, base)
  out = {}
  for name, rope_type in zip(SEEDS, ("linear", "ntk", "yarn")):
    sc = scaling.resolve(
      {"rope_type": rope_type, "factor": scale}, rotary_dim, default_length=train_len, base=base
    )
    inv_freq_R, _ = scaling.frequencies(rotary_dim, base, sc, None)
    out[name] = tuple(float(x) for x in theta_R / inv_freq_R)
  return out


def is_valid(long_factor, space: Space) -> bool:
  """Non-decreasing in the pair index, within [1, max_factor] (a float's width of slack)."""
  lam = np.asarray(long_factor)
  return bool(
    np.all(np.diff(lam) >= 0) and lam.min() >= 1 - 1e-9 and lam.max() <= space.max_factor + 1e-9
  )


def mutate(rng, parent: Candidate, space: Space, seen: set) -> Candidate:
  """Each pair resampled (with mutation_rate) from the grid between its new left neighbour and
  its old right one, so the factors stay non-decreasing; n_hat moves to a neighbouring choice
  with the same rate. Up to MAX_TRIES draws for a candidate not in `seen`."""
  for _ in range(MAX_TRIES):
    lam = list(parent.long_factor)
    for i in range(len(lam)):
      if rng.random() < space.mutation_rate:
        lo = lam[i - 1] if i else 1.0
        hi = lam[i + 1] if i + 1 < len(lam) else space.max_factor
        lam[i] = space.draw(rng, lo, hi, lam[i])
    n_hat = parent.n_hat
    if len(space.n_hats) > 1 and rng.random() < space.mutation_rate:
      j = space.n_hats.index(n_hat) + (1 if rng.random() < 0.5 else -1)
      n_hat = space.n_hats[min(max(j, 0), len(space.n_hats) - 1)]
    child = Candidate(tuple(lam), n_hat, "mutation")
    if child.key not in seen:
      break
  return child


def crossover(
  rng, first: Candidate, second: Candidate, space: Space, seen: set
) -> Candidate | None:
  """`first` with each pair (and n_hat) taken from `second` with crossover_rate; None when
  MAX_TRIES draws give no new non-decreasing candidate."""
  a, b = np.asarray(first.long_factor), np.asarray(second.long_factor)
  for _ in range(MAX_TRIES):
    lam = np.where(rng.random(len(a)) < space.crossover_rate, b, a)
    n_hat = second.n_hat if rng.random() < space.crossover_rate else first.n_hat
    child = Candidate(tuple(float(x) for x in lam), n_hat, "crossover")
    if is_valid(lam, space) and child.key not in seen:
      return child
  return None


def first_generation(
  rng, seeds: list[Candidate], size: int, space: Space, seen: set
) -> list[Candidate]:
  """The seeds, then mutations of randomly chosen seeds up to `size` candidates."""
  out = []
  for c in seeds:
    if c.key not in seen:
      out.append(c)
      seen.add(c.key)
  while len(out) < size:
    child = mutate(rng, seeds[int(rng.integers(len(seeds)))], space, seen)
    out.append(child)
    seen.add(child.key)
  return out


def children(
  rng, parents: list[Candidate], mutations: int, crossovers: int, space: Space, seen: set
) -> list[Candidate]:
  """A generation's new candidates from `parents` (best first)."""
  out = []
  for _ in range(mutations):
    out.append(mutate(rng, parents[int(rng.integers(len(parents)))], space, seen))
    seen.add(out[-1].key)
  for _ in range(crossovers):
    if len(parents) < 2:
      child = mutate(rng, parents[0], space, seen)
    else:
      i, j = sorted(rng.choice(len(parents), 2, replace=False))
      child = crossover(rng, parents[i], parents[j], space, seen)
      if child is None:  # as the paper's code: mutate the fitter parent instead
        child = mutate(rng, parents[i], space, seen)
    out.append(child)
    seen.add(child.key)
  return out


def rng_for(seed: int, generation: int) -> np.random.Generator:
  """Generation g's random choices depend on (seed, g) only, so a resumed search continues
  exactly as an uninterrupted one."""
  return np.random.default_rng([seed, generation])


class Scorer:
  """Perplexity of many candidates at the target length through one compiled program.

  Every candidate scores the same windows (one per document); the candidates' factors and
  n_hat ride along as per-row inputs, so a batch of rows holds several candidates and the
  program never changes.
  """

  def __init__(self, runner: Runner, windows: samples.Windows):
    self.runner, self.windows = runner, windows
    graphdef = runner.prepared.graphdef
    kernel = runner.kernel(windows.inputs_NxT.shape[1])

    def nll(params, inputs_BxT, targets_BxT, pos_BxT, seg_BxT, long_factor_BxR, n_hat_Bx1):
      model = nnx.merge(graphdef, params)
      model.position.scaling = scaling.with_row_factors(
        model.position.scaling, long_factor_BxR, n_hat_Bx1[:, 0]
      )
      logits = model(inputs_BxT, pos_BxT, seg_BxT, kernel=kernel)
      return optax.softmax_cross_entropy_with_integer_labels(logits, targets_BxT)

    self.program = jax.jit(nll)

  def perplexities(self, candidates: list[Candidate]) -> list[float]:
    if not candidates:
      return []
    w, n = self.windows, len(candidates)

    def rows(a_DxT):  # every window once per candidate
      return np.tile(a_DxT, (n, 1))

    def per_row(values, dtype):  # each candidate's value on each of its windows
      return np.repeat(np.asarray(values, dtype), len(w.inputs_NxT), 0)

    nll_NxT = self.runner.map_rows(
      self.program,
      rows(w.inputs_NxT),
      rows(w.targets_NxT),
      rows(w.positions_NxT),
      rows(w.segments_NxT),
      per_row([c.long_factor for c in candidates], np.float32),
      per_row([[c.n_hat] for c in candidates], np.int32),
    )
    loss_C = nll_NxT.astype(np.float64).reshape(n, -1).mean(axis=1)  # every token is scored
    return [float(x) for x in np.exp(loss_C)]


def factors_dict(best: Candidate, scale: float, train_len: int) -> dict:
  """The Hugging Face `longrope` dict of a candidate (short factors 1: unchanged up to L)."""
  return {
    "rope_type": "longrope",
    "factor": scale,
    "original_max_position_embeddings": train_len,
    "short_factor": [1.0] * len(best.long_factor),
    "long_factor": list(best.long_factor),
    "n_hat": best.n_hat,
  }


def _write_json(path: str, value: dict) -> None:
  """Atomically: a reader (or a resumed search) sees the old file or the new one."""
  if jax.process_index() != 0:
    return
  os.makedirs(os.path.dirname(path), exist_ok=True)
  files.write_json(path, value, indent=1)


def _settings(cfg, step: int) -> dict:
  """What a resumed search must share with the saved one (generations may grow)."""
  model = cfg.model.to_dict()
  model["position"].pop("scaling", None)  # the search sets it
  return {
    "checkpoint_step": step,
    "split": SPLIT,
    "eval.longrope": {k: v for k, v in cfg.eval.longrope.to_dict().items() if k != "generations"},
    "model": json.loads(json.dumps(model, default=list)),
  }


def _first_difference(saved, now, where=""):
  if isinstance(saved, dict) and isinstance(now, dict):
    for key in sorted(set(saved) | set(now)):
      found = _first_difference(saved.get(key), now.get(key), f"{where}{key}.")
      if found:
        return found
    return None
  return None if saved == now else (where.rstrip("."), saved, now)


SPLIT = "search"  # the fitness's documents: never scored by an evaluation (samples.split_ids)


def _long_documents(cfg, target_len: int, tokenizer) -> list[samples.Sequence]:
  docs = data.validation_documents(cfg.data, tokenizer)
  ids = samples.split_ids(len(docs), SPLIT)
  longest = max((len(docs[d]) - 1 for d in ids), default=0)
  if longest < target_len:
    raise ValueError(
      f"eval.longrope.target_len={target_len}: no document of the validation split's "
      f"{SPLIT!r} part ({len(ids)} of {len(docs)} documents, held out of every evaluation) "
      f"has that many tokens (the longest has {longest}), so no window of it can be "
      "scored; choose a shorter target or a corpus with longer documents"
    )
  lr = cfg.eval.longrope
  return samples.select(docs, "long", target_len, lr.documents * target_len, lr.seed, SPLIT)


def validate(config, *, declared_checked: bool = False) -> None:
  """The fields' checks (only the code's part where the caller ran check_declared), then the
  LongRoPE search's own (`longrope_cli.check_search`, jax-free so that the command line runs
  them before jax loads; the mesh is prepare's check)."""
  (config_lib.check_code if declared_checked else config_lib.check_fields)(config)
  longrope_cli.check_search(config)


def search(config, workdir: str, *, declared_checked: bool = False) -> dict:
  """Runs (or continues) the search; returns the state, as written to DIR/longrope/state.json.
  `declared_checked`: the caller ran check_declared already (the command line, before jax).

  ValueError (a bad field, a trained field changed, a state with other settings) and
  FileNotFoundError (no checkpoint) come before anything is written.
  """
  validate(config, declared_checked=declared_checked)
  prepared = prepare_lib.prepare(config, checked=True)  # validate completed the field checks
  cfg = prepared.config
  lr, train_len = cfg.eval.longrope, cfg.model.max_len
  scale = lr.target_len / train_len
  step, params, _ = prepare_lib.restore(prepared, workdir)
  position = cfg.model.position
  rotary_dim = scaling.check_rotary_dim(cfg.model.head_dim, position.rotary_dim)
  seeds = seed_factors(rotary_dim, float(position.base), scale, train_len)
  space = Space(
    rotary_dim // 2,
    lr.max_factor or 1.25 * scale,
    lr.step,
    n_hat_choices(train_len) if lr.search_n_hat else (0,),
    lr.mutation_rate,
    lr.crossover_rate,
  )
  out_dir = os.path.join(workdir, "longrope")
  state_path = os.path.join(out_dir, "state.json")
  settings = _settings(cfg, step)
  state = None
  if os.path.exists(state_path):
    state = errors.load_json(state_path, f"delete {out_dir} to start the search over")
    diff = _first_difference(state["settings"], settings)
    if diff:
      field, saved, now = diff
      raise ValueError(
        f"{state_path} holds a search with {field}={saved!r}, now {now!r}: set it "
        f"back to continue that search, or delete {out_dir} to start a new one"
      )

  sequences = _long_documents(cfg, lr.target_len, prepared.tokenizer)
  windows = samples.cut(sequences, lr.target_len, "windows")
  seed_dict = factors_dict(Candidate(seeds["pi"], 0, "pi"), scale, train_len)
  variant_cfg = variants.apply(cfg, {variants.SCALING: seed_dict})
  config_lib.check_fields(variant_cfg)
  scorer = Scorer(Runner(prepare_lib.for_variant(prepared, variant_cfg), params), windows)
  say(
    f"LongRoPE search: L={train_len} -> {lr.target_len} (s={scale:g}), {space.num_pairs} "
    f"pairs, lambda in [1, {space.max_factor:g}] step {space.step:g}, n_hat in "
    f"{list(space.n_hats)}; fitness: perplexity on {len(sequences)} documents of the "
    f"{SPLIT!r} split x {lr.target_len} tokens (seed {lr.seed}); checkpoint step {step}; "
    f"-> {out_dir}"
  )

  def score(todo: list[Candidate], cache: dict) -> int:
    """Scores the candidates not in `cache` (once each); returns how many were scored."""
    new = list({c.key: c for c in todo if c.key not in cache}.values())
    for c, ppl in zip(new, scorer.perplexities(new)):
      cache[c.key] = ppl
    return len(new)

  def scored(todo, cache):
    return [dataclasses.replace(c, perplexity=cache[c.key]) for c in todo]

  if state is None:
    start = time.perf_counter()
    cache, seen = {}, set()
    seed_list = [Candidate(seeds[name], 0, name) for name in SEEDS]
    population = first_generation(rng_for(lr.seed, 0), seed_list, lr.population, space, seen)
    count = score(population, cache)
    population = scored(population, cache)
    seconds = time.perf_counter() - start
    state = {
      "schema": SCHEMA,
      "settings": settings,
      "workdir": os.path.abspath(workdir),
      "train_len": train_len,
      "target_len": lr.target_len,
      "scale": scale,
      "source": provenance.source(),  # the code that started the search
      "fitness_documents": {
        "split": SPLIT,
        "ids": sorted({int(d) for seq in sequences for d in seq.doc_N}),
      },
      "generation": 0,
      "evaluated": count,
      "elapsed_seconds": seconds,
      "seeds": {c.origin: c.to_json() for c in population if c.origin in SEEDS},
      "log": [],
      "population": [],
      "best": None,
      "history": [],
    }
    _record(state, population, cache, count, seconds, lr.generations)
    _write_json(state_path, state)
  else:
    cache = {(tuple(round(x, 6) for x in lam), n): ppl for lam, n, ppl in state["history"]}
    say(f"resuming {state_path} at generation {state['generation']}/{lr.generations}")

  run_start, done_here = time.perf_counter(), 0
  while state["generation"] < lr.generations:
    g = state["generation"] + 1
    start = time.perf_counter()
    population = [_candidate(c) for c in state["population"]]
    parents = sorted(population, key=_fitness)[: lr.parents]
    seen = set(cache)
    kids = children(rng_for(lr.seed, g), parents, lr.mutations, lr.crossovers, space, seen)
    count = score(kids, cache)
    seconds = time.perf_counter() - start
    state["generation"] = g
    state["evaluated"] += count
    state["elapsed_seconds"] += seconds
    done_here += 1
    per_generation = (time.perf_counter() - run_start) / done_here
    _record(
      state,
      parents + scored(kids, cache),
      cache,
      count,
      seconds,
      lr.generations,
      eta=per_generation * (lr.generations - g),
    )
    _write_json(state_path, state)

  best = _candidate(state["best"])
  state["finished"] = True
  _write_json(os.path.join(out_dir, "factors.json"), factors_dict(best, scale, train_len))
  _write_json(state_path, state)
  if jax.process_index() == 0:
    print(summary(state, workdir), flush=True)
  return state


def _record(
  state: dict,
  population: list[Candidate],
  cache: dict,
  count: int,
  seconds: float,
  generations: int,
  eta: float | None = None,
) -> None:
  """The generation's population, best so far, log line and history, into `state`; says it."""
  fitness = [_fitness(c) for c in population]
  best = min(population, key=_fitness)
  if state["best"] is None or _fitness(best) < state["best"]["perplexity"]:
    state["best"] = best.to_json()
  state["population"] = [c.to_json() for c in population]
  state["history"] = [[list(lam), n, ppl] for (lam, n), ppl in cache.items()]
  median = float(np.median(fitness))
  state["log"].append(
    {
      "generation": state["generation"],
      "best": min(fitness),
      "median": median,
      "evaluated": count,
      "seconds": round(seconds, 3),
    }
  )
  eta_text = "" if eta is None else ", " + progress.eta_text(eta)
  say(
    f"longrope generation {state['generation']}/{generations}: best perplexity "
    f"{state['best']['perplexity']:.4f} (n_hat {state['best']['n_hat']}), median "
    f"{median:.4f}, {count} new candidates in {seconds:.1f} s (elapsed "
    f"{state['elapsed_seconds']:.0f} s{eta_text})"
  )


def summary(state: dict, workdir: str) -> str:
  """The printed result: the seeds' and the best candidate's perplexity and factors."""
  path = os.path.join(workdir, "longrope", "factors.json")
  s = state["scale"]
  rows = [(name, state["seeds"][name]) for name in SEEDS if name in state["seeds"]]
  rows.append(("searched", state["best"]))
  lines = [
    f"LongRoPE search {workdir}: L={state['train_len']} -> {state['target_len']} "
    f"(s={s:g}), generation {state['generation']}, {state['evaluated']} candidates "
    f"scored in {state['elapsed_seconds']:.0f} s",
    "",
    "| candidate | perplexity | n_hat | long_factor (pair 0 ..) |",
    "|---|---|---|---|",
  ]
  for name, c in rows:
    factors = " ".join(f"{x:.2f}" for x in c["long_factor"])
    label = name if name == c["origin"] else f"{name} ({c['origin']})"
    lines.append(f"| {label} | {c['perplexity']:.4f} | {c['n_hat']} | {factors} |")
  lines += [
    "",
    f"wrote {path}; evaluate it with: ./launch.sh eval --workdir={workdir} "
    f"--config.eval.variants=none,linear@{s:g},yarn@{s:g},longrope@{path}",
  ]
  return "\n".join(lines)


# --- Command line: `python -m lcx.tools.longrope` parses and checks its flags in
# lcx.tools.longrope_cli, before jax is imported, which then calls `main` ---


def main(config, workdir: str) -> None:
  """Runs the search; a bad value, a missing or unreadable checkpoint exits via `cli.fail`."""
  try:
    search(config, workdir, declared_checked=True)  # longrope_cli checked the fields
  except (ValueError, FileNotFoundError, errors.RunFault) as error:  # RunFault: unreadable ckpt
    cli.fail(str(error))
