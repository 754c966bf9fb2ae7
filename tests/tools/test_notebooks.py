"""The notebooks run top to bottom on a fresh runs directory (tiny checkpoints trained by the
notebooks themselves); `./launch.sh notebook` starts JupyterLab on them."""

import os

import pytest

from tests.helpers import DATA_DIR, ROOT
from tests.test_launch import _installs, _launch, checkout  # noqa: F401  (fixture)

NOTEBOOKS = ROOT / "experiments" / "notebooks"
# explore_results first: it trains and evaluates the runs the other two read.
ORDER = ["explore_results.ipynb", "attention_past_L.ipynb", "rope_frequencies.ipynb"]


def test_every_notebook_is_tested():
  assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(ORDER)


def test_launch_notebook_starts_jupyterlab_with_the_notebooks_extra(checkout):  # noqa: F811
  proc, calls = _launch(checkout, "notebook", "--no-browser")
  assert proc.returncode == 0, proc.stderr
  assert _installs(calls) == [".[notebooks]"]
  assert calls[-1].startswith("-m jupyterlab --notebook-dir=") and calls[-1].endswith(
    "experiments/notebooks" + (" --allow-root" if os.getuid() == 0 else "") + " --no-browser"
  )


def test_notebook_size_and_length_knobs_reach_the_config_and_bad_ones_name_the_variable(
  monkeypatch,
):
  from lcx.tools import notebook

  for name in ("SIZE", "SEQ_LEN", "MULTIPLIERS", "STEPS", "EVAL_TOKENS"):
    monkeypatch.delenv(f"LCX_NOTEBOOK_{name}", raising=False)  # notebook_env's, if it ran first
  config = notebook.quickstart_config("alibi")
  assert (config.model.d_model, config.model.num_layers, config.data.seq_len) == (128, 4, 64)
  monkeypatch.setenv("LCX_NOTEBOOK_SIZE", "tiny")
  monkeypatch.setenv("LCX_NOTEBOOK_SEQ_LEN", "16")
  config = notebook.quickstart_config("alibi")
  assert (config.model.d_model, config.model.num_layers, config.data.seq_len) == (64, 2, 16)
  assert config.model.position.name == "alibi" and config.model.max_len == 16
  assert config.eval.multipliers == (1, 2, 4, 8)
  monkeypatch.setenv("LCX_NOTEBOOK_MULTIPLIERS", "1,4")
  assert notebook.quickstart_config("alibi").eval.multipliers == (1, 4)
  monkeypatch.setenv("LCX_NOTEBOOK_MULTIPLIERS", "1,x")
  with pytest.raises(ValueError, match="LCX_NOTEBOOK_MULTIPLIERS='1,x' is not allowed"):
    notebook.quickstart_config("alibi")
  monkeypatch.delenv("LCX_NOTEBOOK_MULTIPLIERS")
  monkeypatch.setenv("LCX_NOTEBOOK_SIZE", "huge")
  with pytest.raises(ValueError, match="LCX_NOTEBOOK_SIZE='huge' is not allowed; allowed: tiny"):
    notebook.quickstart_config("alibi")
  monkeypatch.setenv("LCX_NOTEBOOK_SIZE", "tiny")
  monkeypatch.setenv("LCX_NOTEBOOK_SEQ_LEN", "0")
  with pytest.raises(ValueError, match="LCX_NOTEBOOK_SEQ_LEN='0' is not allowed"):
    notebook.quickstart_config("alibi")


@pytest.fixture(scope="module")
def notebook_env(tmp_path_factory):
  """Environment of the notebooks' kernel: a fresh runs dir, 2 training steps of the tiny model
  at L=16 (every cell still runs: 1x-16x L is 16-256 tokens), small evals at 1x and 4x L, the
  test dataset, and this checkout's lcx first on the path."""
  env = {
    "LCX_NOTEBOOK_RUNS": str(tmp_path_factory.mktemp("runs")),
    "LCX_NOTEBOOK_STEPS": "2",
    "LCX_NOTEBOOK_SIZE": "tiny",
    "LCX_NOTEBOOK_SEQ_LEN": "16",
    "LCX_NOTEBOOK_EVAL_TOKENS": "2048",
    "LCX_NOTEBOOK_MULTIPLIERS": "1,4",
    "LCX_NOTEBOOK_SCHEMES": "nope,rope,alibi",
    "LCX_DATA_DIR": DATA_DIR,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
  }
  saved = {k: os.environ.get(k) for k in env}
  os.environ.update(env)  # the kernel starts with this process's environment
  yield env
  for k, v in saved.items():
    if v is None:
      os.environ.pop(k, None)
    else:
      os.environ[k] = v


@pytest.mark.slow
@pytest.mark.parametrize("name", ORDER)
def test_notebook_runs_top_to_bottom(name, notebook_env):
  import nbclient
  import nbformat

  notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
  client = nbclient.NotebookClient(
    notebook, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
  )
  client.execute()  # raises CellExecutionError naming the cell on any error
  outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
  assert not [o for o in outputs if o.output_type == "error"]
  assert any("image/png" in o.get("data", {}) for o in outputs), "no plot was shown"
  trained = os.listdir(notebook_env["LCX_NOTEBOOK_RUNS"])
  assert {"rope"} <= set(trained), trained
