"""What the notebooks in experiments/notebooks/ share: where their runs live, training the tiny
ones they need when missing, validation text to look at, and showing figures.

Environment:
  LCX_NOTEBOOK_RUNS         the runs directory, one run per scheme named by the scheme (default:
                            the quickstart's runs/quickstart; relative: from the repository)
  LCX_NOTEBOOK_STEPS        training steps of a run trained here (default 300, the quickstart's)
  LCX_NOTEBOOK_SIZE         model size of a run trained here (default small, the quickstart's;
                            the tests train tiny ones)
  LCX_NOTEBOOK_SEQ_LEN      training length L of a run trained here (default 64, the quickstart's)
  LCX_NOTEBOOK_EVAL_TOKENS  validation tokens an evaluation here scores (default: the
                            quickstart config's)
  LCX_NOTEBOOK_MULTIPLIERS  comma list: the evaluation lengths as multiples of L (default: the
                            quickstart config's 1,2,4,8)
  LCX_NOTEBOOK_SCHEMES      comma list: the schemes explore_results.ipynb trains when missing
  LCX_DATA_DIR              datasets, as everywhere in lcx
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib

import numpy as np

from lcx import errors

QUICKSTART_SCHEMES = ("nope", "rope", "alibi", "sinusoidal", "t5")


def repo_root() -> pathlib.Path:
  """The directory holding the lcx package (the repository for an editable install)."""
  import lcx

  return pathlib.Path(lcx.__file__).resolve().parents[1]


def runs_dir() -> pathlib.Path:
  """LCX_NOTEBOOK_RUNS (a relative one from the repository, not the notebook's directory),
  else the quickstart's runs/quickstart."""
  return repo_root() / os.environ.get("LCX_NOTEBOOK_RUNS", "runs/quickstart")


def shown(path) -> str:
  """`path` relative to the repository when inside it (outputs committed with the notebooks
  name no machine's directories)."""
  path = pathlib.Path(path).resolve()
  try:
    return str(path.relative_to(repo_root()))
  except ValueError:
    return str(path)


def _positive(name: str, default: str) -> int:
  value = os.environ.get(name, default)
  if not value.isdigit() or int(value) < 1:
    raise errors.not_allowed(name, value, "positive integers")
  return int(value)


def steps() -> int:
  return _positive("LCX_NOTEBOOK_STEPS", "300")


def size() -> str:
  """LCX_NOTEBOOK_SIZE, else the quickstart's small model."""
  from lcx.config import defaults

  value = os.environ.get("LCX_NOTEBOOK_SIZE", "small")
  if value not in defaults.SIZES:
    raise errors.not_allowed("LCX_NOTEBOOK_SIZE", value, defaults.SIZES)
  return value


def schemes() -> list[str]:
  """LCX_NOTEBOOK_SCHEMES, else the quickstart's five families."""
  value = os.environ.get("LCX_NOTEBOOK_SCHEMES", "")
  return [s.strip() for s in value.split(",") if s.strip()] or list(QUICKSTART_SCHEMES)


def quiet() -> None:
  """Library logs (Orbax, TFDS, absl) at ERROR only: the notebook shows lcx's own lines."""
  from absl import logging

  logging.set_verbosity(logging.ERROR)


def quickstart_config(scheme: str):
  """The quickstart's config for `scheme` with LCX_NOTEBOOK_STEPS, _SIZE, _SEQ_LEN (and the
  evaluation's)."""
  from lcx.config import defaults

  config = defaults.quickstart_config(f"pos={scheme},steps={steps()},size={size()}")
  config.data.seq_len = _positive("LCX_NOTEBOOK_SEQ_LEN", str(config.data.seq_len))
  _eval_settings(config)
  return config


def _eval_settings(config) -> None:
  """LCX_NOTEBOOK_EVAL_TOKENS and _MULTIPLIERS, where set, into `config.eval`."""
  tokens = os.environ.get("LCX_NOTEBOOK_EVAL_TOKENS")
  if tokens:
    config.eval.num_tokens = int(tokens)
  multipliers = os.environ.get("LCX_NOTEBOOK_MULTIPLIERS", "")
  if multipliers:
    items = multipliers.split(",")
    if not all(m.isdigit() and int(m) >= 1 for m in items):
      raise errors.not_allowed(
        "LCX_NOTEBOOK_MULTIPLIERS", multipliers, "comma lists of positive integers"
      )
    config.eval.multipliers = tuple(int(m) for m in items)


def has_checkpoint(workdir) -> bool:
  ckpt = pathlib.Path(workdir) / "checkpoints"
  return ckpt.is_dir() and any(p.name.isdigit() for p in ckpt.iterdir())


@contextlib.contextmanager
def _at_repo_root(workdir):
  """Yields `workdir` relative to the repository, with the working directory there, when it lies
  inside it (lcx's own messages then name runs/..., not this machine's directories)."""
  path, root = pathlib.Path(workdir).resolve(), repo_root()
  if not path.is_relative_to(root):
    yield str(path)
    return
  previous = os.getcwd()
  os.chdir(root)
  try:
    yield str(path.relative_to(root))
  finally:
    os.chdir(previous)


def ensure_run(scheme: str, *, variants: str | None = None) -> str:
  """RUNS/<scheme>: trained here (quickstart config, progress printed) when it has no
  checkpoint; an existing run is used as it is. With `variants` (an eval.variants list), also
  evaluated under them when a result file is missing (`lcx.tools.evaluate` reuses finished ones)."""
  from lcx.config import run_config, variants as variants_lib
  from lcx.run import train
  from lcx.tools import evaluate
  from lcx.tools.evaluate import during_train

  workdir = runs_dir() / scheme
  if not has_checkpoint(workdir):
    config = quickstart_config(scheme)
    print(
      f"[notebook] training {scheme}: {config.train.steps} steps at length "
      f"{config.data.seq_len} -> {shown(workdir)}",
      flush=True,
    )
    with _at_repo_root(workdir) as where:
      outcome = train.train(config, where, evaluate_during_train=during_train.DuringTrain)
    if outcome.interrupted:
      raise RuntimeError(f"training {scheme} was interrupted; run the cell again to resume")
  missing = [
    v
    for v in variants_lib.names(variants or "")
    if not (workdir / "eval" / variants_lib.file_name(v)).exists()
  ]
  if missing:
    config = run_config.run_config(str(workdir))
    config.eval.variants = variants
    _eval_settings(config)
    print(
      f"[notebook] evaluating {scheme} ({', '.join(missing)} missing) -> {shown(workdir / 'eval')}",
      flush=True,
    )
    with _at_repo_root(workdir) as where, contextlib.redirect_stdout(io.StringIO()):
      evaluate.evaluate(config, where)  # its progress goes to stderr; its tables are below
  return str(workdir)


def long_documents(config, length: int, count: int = 1, seed: int = 0) -> np.ndarray:
  """count x length tokens: the first `length` tokens of validation documents at least that
  long (the evaluation's `documents=long` draw), one document per row."""
  from lcx import data
  from lcx.tools.evaluate import samples

  chosen = samples.select(
    data.validation_documents(config.data), "long", length, count * length, seed
  )
  return np.stack([s.inputs_N for s in chosen[:count]])


def show(fig) -> None:
  """Displays a matplotlib figure as PNG and closes it (whatever backend is active: the report
  module switches to Agg)."""
  import matplotlib.pyplot as plt
  from IPython.display import Image, display

  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
  plt.close(fig)
  display(Image(data=buffer.getvalue()))


def show_file(path) -> None:
  """Displays a PNG written by the report module's plot functions (nothing for None)."""
  if path:
    from IPython.display import Image, display

    display(Image(filename=str(path)))


def markdown(text: str) -> None:
  from IPython.display import Markdown, display

  display(Markdown(text))
