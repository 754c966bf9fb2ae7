"""Every entry point turns a bad value into one `error:` line on stderr, exit status 2, and
writes nothing: not in the workdir, the output directory or the data directory."""

import json
import os

import pytest

from lcx.config import checks as config_lib
from tests.helpers import DATA_DIR, TINY_FLAGS, refused_before_jax, run_lcx, tiny_config

BAD_BASE = "model.position.base=-10.0 is not allowed; allowed: > 1"
# (module, arguments ({tmp}: an empty directory, {run}: a run with only its config.json),
# the start of the error line)
CASES = {
  "train": (
    "lcx.main",
    [*TINY_FLAGS, "--workdir={tmp}/w", "--config.model.position.base=-10"],
    BAD_BASE,
  ),
  "train_text_files": (
    "lcx.main",
    [
      *TINY_FLAGS,
      "--workdir={tmp}/w",
      "--config.data.name=text_files",
      "--config.data.text_files=/nonexistent/dir",
    ],
    "data.text_files='/nonexistent/dir' matches no .txt or .jsonl file",
  ),
  "eval": (
    "lcx.main",
    ["--mode=eval", "--workdir={run}", "--config.eval.protocol=rolling"],
    "eval.protocol='rolling' is not allowed; allowed: windows, sliding, last_k",
  ),
  "quickstart": (
    "lcx.tools.quickstart",
    ["--workdir={tmp}/q", "--schemes=rope,spiral"],
    "model.position.name='spiral' is not allowed; allowed: alibi, ",
  ),
  "bench": (
    "lcx.tools.bench",
    ["--schemes=rope,spiral", "--out={tmp}/bench.json"],
    "--schemes='rope,spiral' is not allowed; allowed: comma lists of ",
  ),
  "data_build": (
    "lcx.data.build",
    [
      "--config=configs/base.py",
      "--config.data.data_dir={tmp}/data",
      "--config.data.name=text_files",
      "--config.data.text_files=/nonexistent/dir",
    ],
    "data.text_files='/nonexistent/dir' matches no .txt or .jsonl file",
  ),
  "data_stats": (
    "lcx.data.stats",
    ["--config=configs/base.py", "--config.data.name=wikipedia"],
    "data.name='wikipedia' is not allowed; allowed: stdlib, books, ",
  ),
  "report": (
    "lcx.tools.report",
    ["{tmp}/in/bad.json", "--out={tmp}/report"],
    "{tmp}/in/bad.json: kind='speed' is not allowed; allowed: lengths, tasks, ",
  ),
  "sweep": (
    "lcx.tools.sweep",
    ["experiments/alibi_table", "--shard=2/2", "--runs_dir={tmp}/runs"],
    "--shard='2/2' is not allowed; allowed: i/n with 0 <= i < n",
  ),
  "generate": (
    "lcx.tools.generate",
    ["--workdir={run}", "--prompt=hi", "--config.model.position.base=-10"],
    BAD_BASE,
  ),
  "generate_top_k": (
    "lcx.tools.generate",
    ["--workdir={run}", "--prompt=hi", "--top_k=100000"],
    "--top_k=100000 is not allowed; allowed: 0..259, the vocabulary size",
  ),
  "longrope": (
    "lcx.tools.longrope",
    [
      "--workdir={run}",
      "--config.eval.longrope.target_len=128",
      "--config.eval.longrope.population=2",
    ],
    "eval.longrope.population=2 is not allowed; allowed: >= 3",
  ),
  "export": (
    "lcx.tools.export",
    ["--workdir={tmp}/none"],
    "--workdir={tmp}/none: no config.json there (not an lcx run directory)",
  ),
}


def _files(root) -> dict[str, float]:
  """Every directory and file below `root`, with its modification time."""
  return {
    os.path.join(d, name): os.path.getmtime(os.path.join(d, name))
    for d, dirs, files in os.walk(root)
    for name in dirs + files
  }


def _inputs(tmp_path):
  """The cases' {run} (a run with only its config.json) and {tmp}/in/bad.json; returns run."""
  run = tmp_path / "run"
  config_lib.save(tiny_config(), str(run))  # a run that has not trained yet
  (tmp_path / "in").mkdir()
  (tmp_path / "in" / "bad.json").write_text(
    json.dumps(
      {
        "schema": "lcx.eval/1",
        "kind": "speed",
        "run": "r",
        "variant": "none",
        "step": 1,
        "train_len": 32,
      }
    )
  )
  return run


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_value_is_one_error_line_and_writes_nothing(tmp_path, case):
  module, args, message = CASES[case]
  run = _inputs(tmp_path)
  before = _files(tmp_path)
  proc = run_lcx(
    [a.format(tmp=tmp_path, run=run) for a in args],
    module=module,
    check=False,
    env={"LCX_DATA_DIR": DATA_DIR},
    timeout=180,
  )
  assert proc.returncode == 2, proc.stderr[-3000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: " + message.format(tmp=tmp_path)), (
    proc.stderr[-3000:]
  )
  assert _files(tmp_path) == before  # nothing new, nothing rewritten


# The cases above refused before jax is imported (a typo costs a fraction of a second, not
# jax's import): all but those whose check needs jax (the process count splitting the batch,
# the tokenizer's vocabulary, bench's package).
NEEDS_JAX = ("train_text_files", "generate_top_k", "bench")


@pytest.mark.parametrize("case", [c for c in CASES if c not in NEEDS_JAX])
def test_a_bad_value_is_refused_before_jax_is_imported(tmp_path, case):
  module, args, message = CASES[case]
  run = _inputs(tmp_path)
  args = [a.format(tmp=tmp_path, run=run) for a in args]
  error = refused_before_jax(args, module=module, env={"LCX_DATA_DIR": DATA_DIR})
  assert error.startswith("error: " + message.format(tmp=tmp_path)), error
