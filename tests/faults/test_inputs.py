"""Bad inputs (issue 30): each is one `error:` line naming the field or file, exit status 2, no
traceback and nothing written; NaN and inf never pass a check; nothing a user gave is dropped
without a word. The entry points run as subprocesses where the issue is what the user sees, all
on one tiny trained run (`run`), copied where a test changes it."""

import json
import os
import shutil

import pytest

from lcx import cli, errors
from lcx.config import checks as config_lib, variants
from lcx.run import train
from lcx.tools import evaluate, report, sweep
from tests.helpers import TINY_FLAGS, refused_before_jax, run_lcx, tiny_config
from tests.tools.test_sweep import _experiment


@pytest.fixture(scope="module")
def run(tiny_run):
  """conftest's rope run trained for 2 steps, shared: tests must not change it."""
  return tiny_run


def _files(directory) -> dict[str, int]:
  """Every file below `directory` with its size: a snapshot to show nothing was written."""
  out = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      out[os.path.relpath(path, directory)] = os.path.getsize(path)
  return out


def _error_line(proc) -> str:
  """The one `error:` line of a refused command (exit status 2, no traceback)."""
  assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert len(lines) == 1, proc.stderr[-3000:]
  return lines[0]


def _eval(workdir, *flags, **kwargs):
  return run_lcx(["--mode=eval", f"--workdir={workdir}", *flags], check=False, **kwargs)


# --- NaN and inf (item 4): one check over every float field and variant argument. ---


@pytest.mark.parametrize(
  "field, value",
  [
    ("train.lr", float("inf")),
    ("model.position.scaling.factor", float("nan")),
    ("model.attention.beta_c", float("inf")),
    ("eval.multipliers", (1, float("inf"))),
    ("eval.passkey.depths", (0.0, float("nan"))),
  ],
)
def test_every_float_field_refuses_nan_and_inf(field, value):
  config = tiny_config("rope")
  *parents, leaf = field.split(".")
  node = config
  for key in parents:
    node = node[key]
  node[leaf] = value
  with pytest.raises(ValueError, match=r"is not allowed; allowed: a finite number$") as error:
    config_lib.check_fields(config)
  assert str(error.value).startswith(field)


def test_a_named_variant_with_a_non_finite_value_is_refused_naming_its_field():
  config = tiny_config("rope")
  config.eval.named_variants = {"far": {"model": {"attention": {"beta_c": float("nan")}}}}
  with pytest.raises(ValueError, match=r"^eval.named_variants.far.model.attention.beta_c=nan"):
    config_lib.check_fields(config)


@pytest.mark.parametrize("spec", ["yarn@nan", "yarn@inf", "linear@-inf", "ntk@NaN", "beta@inf"])
def test_variant_arguments_refuse_nan_and_inf(spec):
  with pytest.raises(ValueError, match=rf"^eval.variants: '{spec}' needs a finite number after"):
    variants.overrides(spec, {})


def test_eval_with_yarn_at_nan_is_refused_and_writes_no_result(run):
  before = _files(run)
  line = _error_line(_eval(run, "--config.eval.variants=none,yarn@nan"))
  assert line == "error: eval.variants: 'yarn@nan' needs a finite number after '@'"
  assert _files(run) == before


def test_train_with_an_infinite_learning_rate_is_refused_before_anything_is_written(tmp_path):
  line = _error_line(
    run_lcx([*TINY_FLAGS, f"--workdir={tmp_path}/w", "--config.train.lr=inf"], check=False)
  )
  assert "train.lr=inf is not allowed; allowed: a finite number" in line
  assert not os.path.exists(tmp_path / "w")


# --- Results: never dropped, never half-copied (item 5). ---


def _truncated_result(run, path):
  with open(os.path.join(run, "eval", "none.json")) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write(text[: len(text) // 3])


@pytest.fixture(scope="module")
def evaluated(run, tmp_path_factory):
  """A copy of `run` with its eval/none.json (2 lengths, no intervals)."""
  workdir = str(tmp_path_factory.mktemp("evaluated") / "run")
  shutil.copytree(run, workdir)
  config = tiny_config("rope", steps=2, warmup_steps=1, checkpoint_every=2)
  config.eval.update(multipliers=(1, 2), bootstrap=0, num_tokens=256, batch_tokens=256)
  evaluate.evaluate(config, workdir)
  return workdir


def test_report_refuses_a_directory_holding_a_truncated_result(evaluated, tmp_path):
  results = tmp_path / "results"
  shutil.copytree(os.path.join(evaluated, "eval"), results / "a")
  shutil.copytree(os.path.join(evaluated, "eval"), results / "b")
  _truncated_result(evaluated, results / "b" / "none.json")
  proc = run_lcx([str(results), f"--out={tmp_path}/out"], check=False, module="lcx.tools.report")
  line = _error_line(proc)
  assert f"{results / 'b' / 'none.json'}: not an lcx result: not JSON" in line
  assert "truncated" in line
  assert not os.path.exists(tmp_path / "out")
  os.remove(results / "b" / "none.json")
  (results / "b" / "config.json").write_text("{}")  # other JSON: still skipped
  assert [r["variant"] for r in report.load(str(results))] == ["none"]


def test_sweep_copies_results_atomically(evaluated, tmp_path, monkeypatch):
  """A copy that dies halfway (a kill, a full disk) leaves no truncated result behind."""
  out = tmp_path / "exp"
  spec = sweep.Sweep("exp", "", {"run": sweep.Run("configs/base.py")}, str(tmp_path), str(out))
  shutil.copytree(evaluated, tmp_path / "run")

  def dies_halfway(source, target):
    target.write(source.read()[:100])
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(shutil, "copyfileobj", dies_halfway)
  with pytest.raises(errors.RunFault, match="no space left .* while writing .*none.json"):
    sweep.collect(spec)
  assert os.listdir(out / "results" / "run") == []  # no result, no .tmp
  monkeypatch.undo()
  assert sweep.collect(spec) == [str(out / "results" / "run" / "none.json")]
  assert report.load(str(out / "results"))[0]["lengths"].keys() == {"32", "64"}


# --- Evaluation samples smaller than asked (item 8). ---


@pytest.fixture(scope="module")
def one_document_run(tmp_path_factory):
  """A run on a text_files corpus of 3 documents, of which 1 is held out for validation."""
  root = tmp_path_factory.mktemp("one_document")
  for i in range(3):
    (root / "text" / f"{i}.txt").parent.mkdir(exist_ok=True)
    (root / "text" / f"{i}.txt").write_text(f"document {i}: " + "lorem ipsum dolor " * 150)
  config = tiny_config("rope", steps=2, warmup_steps=1, checkpoint_every=2)
  config.data.update(name="text_files", text_files=str(root / "text"), data_dir=str(root / "d"))
  config.eval.update(multipliers=(1, 2), num_tokens=2048, batch_tokens=256)
  train.train(config, str(root / "run"))
  return config, str(root / "run")


def test_an_interval_over_one_validation_document_is_refused(one_document_run):
  config, workdir = one_document_run
  with pytest.raises(ValueError, match=r"^eval.bootstrap=1000: the sample holds 1 validation "):
    evaluate.evaluate(config, workdir)
  assert not os.path.exists(os.path.join(workdir, "eval", "none.json"))


def test_a_sample_short_of_eval_num_tokens_is_said_with_both_counts(one_document_run, capsys):
  config, workdir = one_document_run
  config = config.copy_and_resolve_references()
  config.eval.bootstrap = 0
  config.eval.num_tokens = 65536  # more than the one held-out document holds (it gives it all)
  result = evaluate.evaluate(config, workdir)["none"]
  tokens = result["lengths"]["32"]["tokens"]
  assert 2048 <= tokens < 65536
  assert (
    f"[lcx] warning: eval.num_tokens=65536, but the sample holds only {tokens} tokens per length "
    "(1 validation document" in capsys.readouterr().err
  )


# --- text_files (item 9): skipped files said, an unusable directory one line. ---


def _build(data_dir, text_files):
  return run_lcx(
    [
      "--config=configs/base.py",
      f"--config.data.data_dir={data_dir}",
      "--config.data.name=text_files",
      f"--config.data.text_files={text_files}",
    ],
    check=False,
    module="lcx.data.build",
  )


def test_text_files_warnings_reach_the_user(tmp_path):
  (tmp_path / "in").mkdir()
  for i in range(3):
    (tmp_path / "in" / f"{i}.txt").write_text(f"document {i}")
  (tmp_path / "in" / "empty.txt").write_text("")
  (tmp_path / "in" / "binary.txt").write_bytes(bytes(range(128, 256)))
  proc = _build(tmp_path / "data", tmp_path / "in")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert f"[lcx] warning: text_files: skipping {tmp_path / 'in' / 'empty.txt'}, empty" in (
    proc.stderr
  )
  assert f"skipping {tmp_path / 'in' / 'binary.txt'}, not UTF-8" in proc.stderr


def test_a_directory_of_only_undecodable_files_is_one_line_and_leaves_no_corpus(tmp_path):
  (tmp_path / "in").mkdir()
  for i in range(3):
    (tmp_path / "in" / f"{i}.txt").write_bytes(bytes([0xFF, 0xFE, i]) * 10)
  line = _error_line(_build(tmp_path / "data", tmp_path / "in"))
  assert line.startswith(f"error: data.text_files='{tmp_path / 'in'}': 0 usable document(s)")
  assert "not UTF-8" in line
  assert not os.path.exists(tmp_path / "data" / "lcx_corpus")
  assert not [p for p in os.listdir(tmp_path / "data") if not p.startswith(".")]


# --- Errors that were not one line. ---


def test_hf_variant_of_a_binary_file_names_the_field_and_the_file(run, tmp_path):
  path = tmp_path / "scaling.json"
  path.write_bytes(b'{"rope_type": "yarn", \xff\xfe}')
  before = _files(run)
  line = _error_line(_eval(run, f"--config.eval.variants=hf@{path}"))
  assert line.startswith(f"error: eval.variants: 'hf@{path}': {path}: not a JSON text file")
  assert _files(run) == before


def test_longrope_variant_of_a_json_array_names_the_field_and_the_file(run, tmp_path):
  path = tmp_path / "factors.json"
  path.write_text("[1.0, 2.0]")
  line = _error_line(_eval(run, f"--config.eval.variants=longrope@{path}"))
  assert line == (
    f"error: eval.variants: 'longrope@{path}': {path} holds no rope_type 'longrope' dict"
  )


@pytest.mark.parametrize(
  "value, item", [("(1,inf)", "[1]=inf"), ("(inf,)", "[0]=inf"), ("(2,-Inf,nan)", "[1]=-inf")]
)
def test_infinite_multipliers_name_the_field(run, value, item):
  """Trust, round 2, item 5: `(inf,)` was shown as `('(inf,)',)`, a string no one typed."""
  line = _error_line(_eval(run, f"--config.eval.multipliers={value}"))
  assert line == f"error: eval.multipliers{item} is not allowed; allowed: a finite number"


def test_last_k_over_the_stream_names_eval_documents(run):
  line = _error_line(_eval(run, "--config.eval.protocol=last_k"))
  assert "it needs eval.documents='long', not 'stream'" in line


def test_a_non_utf8_prompt_is_one_line(run):
  proc = run_lcx(
    [f"--workdir={run}", "--prompt=caf\udce9"],  # surrogateescape: the byte 0xe9
    check=False,
    module="lcx.tools.generate",
  )
  assert _error_line(proc) == (
    "error: --prompt is not UTF-8 text: byte 0xe9 at character 3; pass UTF-8 text"
  )


def test_a_syntax_error_in_a_sweep_file_is_one_line(tmp_path):
  (tmp_path / "exp").mkdir()
  (tmp_path / "exp" / "sweep.py").write_text("def get_runs(arg):\n  return {\n")
  proc = run_lcx([str(tmp_path / "exp"), "--dry_run"], check=False, module="lcx.tools.sweep")
  assert _error_line(proc).startswith(f"error: {tmp_path / 'exp' / 'sweep.py'}:2: ")


@pytest.mark.parametrize(
  "source, where",
  [
    ("def get_config(:\n  pass\n", ":1: invalid syntax: def get_config(:"),
    ("def get_config():\n  return {}[0]\n", ":2: KeyError: 0"),
    ("import no_such_module\n", ":1: ModuleNotFoundError: No module named 'no_such_module'"),
  ],
)
def test_a_config_file_that_raises_is_one_line(tmp_path, source, where):
  """Trust, round 2, item 4: a syntax error was a 60-line traceback."""
  path = tmp_path / "mine.py"
  path.write_text(source)
  line = refused_before_jax([f"--config={path}", f"--workdir={tmp_path}/w"])
  assert line == f"error: --config={path}: {path}{where}"
  assert not os.path.exists(tmp_path / "w")


def test_a_directory_flag_naming_a_file_is_one_line(tmp_path):
  """Trust, round 2, item 4: --workdir, data.data_dir and sweep --runs_dir naming a file
  (or a folder under one) were tracebacks from os.makedirs."""
  file = tmp_path / "file"
  file.write_text("mine")
  allowed = "is a file, not a directory; allowed: a directory, or a path that does not exist yet"
  line = refused_before_jax([*TINY_FLAGS, f"--workdir={file}"])
  assert line == f"error: --workdir={file} {allowed}"
  line = refused_before_jax(
    [*TINY_FLAGS, f"--workdir={tmp_path}/w", f"--config.data.data_dir={file}/data"]
  )
  assert line == f"error: data.data_dir={file}/data: {file} {allowed}"
  experiment = _experiment(tmp_path, "{'a': Run(CONFIG, TINY)}")
  proc = run_lcx(
    [str(experiment), f"--runs_dir={file}", "--dry_run"], check=False, module="lcx.tools.sweep"
  )
  assert _error_line(proc) == f"error: --runs_dir={file} {allowed}"
  assert file.read_text() == "mine" and sorted(os.listdir(tmp_path)) == ["experiments", "file"]


def test_an_override_before_config_says_to_reorder(tmp_path):
  """Trust, round 2, item 5: absl's message alone did not say what to do."""
  line = refused_before_jax(
    [f"--workdir={tmp_path}/w", "--config.train.steps=3", "--config=configs/base.py:size=tiny"]
  )
  assert line == (
    "error: Found --config.train.steps=3 in argv before a value for --config was specified; "
    "give --config=configs/base.py:size=tiny first, then the --config.FIELD=VALUE overrides"
  )


def test_two_config_flags_are_one_line(tmp_path):
  proc = run_lcx(
    [
      *TINY_FLAGS,
      f"--workdir={tmp_path}/w",
      "--config=configs/base.py:size=tiny",
      "--config.train.steps=1",
    ],
    check=False,
  )
  assert _error_line(proc) == (
    "error: --config is given 2 times (configs/base.py:size=tiny, configs/base.py:size=tiny); "
    "give it once"
  )
  assert not os.path.exists(tmp_path / "w")


def test_a_flag_given_twice_takes_its_last_value_a_tuple_too():
  """Trust, round 2, item 1: one rule for every flag (ml_collections joined a tuple's)."""
  proc = run_lcx(
    [
      "--config=configs/base.py:size=tiny",
      "--config.eval.multipliers=(1,2)",
      "--config.eval.multipliers=(4,)",
      "--config.eval.lengths",
      "(64,)",
      "--config.eval.lengths=(8,16)",
      "--config.train.steps=5",
      "--config.train.steps=7",
    ],
    module="lcx.config.listing",
  )
  values = dict(line.split("  ")[0].split(" = ", 1) for line in proc.stdout.splitlines())
  assert values["eval.multipliers"] == "(4,)"
  assert values["eval.lengths"] == "(8, 16)"
  assert values["train.steps"] == "7"


def test_a_truncated_result_is_named_and_kept(evaluated, tmp_path):
  workdir = str(tmp_path / "run")
  shutil.copytree(evaluated, workdir)
  path = os.path.join(workdir, "eval", "none.json")
  _truncated_result(evaluated, path)
  before = _files(workdir)
  line = _error_line(_eval(workdir, "--config.eval.multipliers=(1,2)", "--config.eval.bootstrap=0"))
  assert line.startswith(f"error: {path}: not JSON, truncated or corrupt (")
  assert line.endswith("delete it, or pass --force to evaluate again")
  assert _files(workdir) == before


def test_a_truncated_longrope_state_is_named(run, tmp_path):
  workdir = str(tmp_path / "run")
  shutil.copytree(run, workdir)
  os.makedirs(os.path.join(workdir, "longrope"))
  path = os.path.join(workdir, "longrope", "state.json")
  with open(path, "w") as f:
    f.write('{"settings": {"target_len": 6')
  proc = run_lcx(
    [
      f"--workdir={workdir}",
      "--config.eval.longrope.target_len=64",
      "--config.eval.longrope.documents=1",
      "--config.eval.longrope.population=3",
      "--config.eval.longrope.parents=1",
      "--config.eval.longrope.generations=0",
    ],
    check=False,
    module="lcx.tools.longrope",
  )
  line = _error_line(proc)
  assert line.startswith(f"error: {path}: not JSON, truncated or corrupt (")
  assert line.endswith(f"delete {os.path.join(workdir, 'longrope')} to start the search over")


def test_errors_load_json_names_the_file(tmp_path):
  path = tmp_path / "x.json"
  path.write_bytes(b'{"a": \xff')
  with pytest.raises(ValueError, match=rf"^{path}: not JSON, truncated or corrupt \(.*\); fix$"):
    errors.load_json(str(path), "fix")


# --- A remap through flags, as docs/commands.md shows (train, eval, generate). ---


def test_a_remap_given_by_flags_trains(tmp_path):
  workdir = tmp_path / "w"
  run_lcx(
    [
      *TINY_FLAGS,
      f"--workdir={workdir}",
      "--config.train.steps=1",
      "--config.model.remap.name=self_extend",
      "--config.model.remap.window=16",
    ]
  )
  with open(workdir / "config.json") as f:
    assert json.load(f)["model"]["remap"] == {"name": "self_extend", "window": 16, "group": 4}


def test_a_remap_given_by_flags_evaluates(run, tmp_path):
  workdir = str(tmp_path / "run")
  shutil.copytree(run, workdir)
  run_lcx(
    [
      "--mode=eval",
      f"--workdir={workdir}",
      "--config.model.remap.name=rerope",
      "--config.model.remap.window=8",
      "--config.model.remap.log_n_scaling=False",
      "--config.eval.multipliers=(2,)",
      "--config.eval.bootstrap=0",
      "--config.eval.num_tokens=128",
    ]
  )
  # the remap is in the variant's name and file (trust round 2, item 9): `none` is the run
  # as trained
  (written,) = os.listdir(os.path.join(workdir, "eval"))
  assert written.startswith("none+rerope")
  with open(os.path.join(workdir, "eval", written)) as f:
    result = json.load(f)
  assert result["remap"] == "rerope"
  assert result["config"]["model"]["remap"] == {
    "name": "rerope",
    "window": 8,
    "log_n_scaling": False,
  }


@pytest.mark.parametrize("remap", ["self_extend", "rerope"])
def test_a_remap_named_by_flag_alone_generates_with_its_defaults(run, remap):
  proc = run_lcx(
    [
      f"--workdir={run}",
      "--prompt=def ",
      "--max_new_tokens=2",
      f"--config.model.remap.name={remap}",
    ],
    module="lcx.tools.generate",
  )
  assert proc.stdout.startswith("def ")


def test_dual_chunk_with_its_own_fields_by_flags_generates(run):
  """Issue 32's report: dual_chunk's own fields as flags after naming it (--config.model.remap.
  local_window was "not a known field")."""
  proc = run_lcx(
    [
      f"--workdir={run}",
      "--prompt=def ",
      "--max_new_tokens=2",
      "--config.model.remap.name=dual_chunk",
      "--config.model.remap.chunk_size=8",
      "--config.model.remap.local_window=2",
    ],
    module="lcx.tools.generate",
  )
  assert proc.stdout.startswith("def ")


def test_a_remap_field_of_another_remap_is_refused_naming_it(run):
  line = _error_line(_eval(run, "--config.model.remap.name=rerope", "--config.model.remap.group=2"))
  assert line.startswith(
    "error: model.remap.group is not a known field; allowed: log_n_scaling, name, window"
  )


def test_non_finite_float_flags_are_refused(run):
  proc = run_lcx(
    [f"--workdir={run}", "--prompt=x", "--temperature=nan"],
    check=False,
    module="lcx.tools.generate",
  )
  assert _error_line(proc) == "error: --temperature=nan is not allowed; allowed: a finite number"


def test_a_scaling_field_the_rope_type_does_not_read_is_refused(tmp_path):
  """Trust, round 2, item 3: it was warned about twice and ignored."""
  proc = run_lcx(
    [*TINY_FLAGS, f"--workdir={tmp_path}/w", "--config.model.position.scaling.factor=0.5"],
    check=False,
  )
  assert _error_line(proc) == (
    "error: model.position.scaling.factor=0.5 is not used by rope_type='default'; leave it at "
    "its default None. Fields read by 'default': []; rope types that read factor: linear, ntk, "
    "dynamic, yarn, llama3, longrope"
  )
  assert proc.stderr.splitlines() == [_error_line(proc)]  # no warnings before it
  assert not os.path.exists(tmp_path / "w")


# --- Finding a field (issue 31 item 6). ---


def test_an_unknown_flag_named_like_a_field_suggests_it(tmp_path):
  proc = run_lcx([*TINY_FLAGS, f"--workdir={tmp_path}/w", "--steps=100"], check=False)
  assert _error_line(proc).startswith(
    "error: Unknown command line flag 'steps'; did you mean --config.train.steps"
  )
  assert not os.path.exists(tmp_path / "w")


def test_an_unknown_field_suggests_the_close_ones():
  assert str(errors.unknown_field("train.stepz", ["lr", "steps", "stop_after"])) == (
    "train.stepz is not a known field; allowed: lr, steps, stop_after; did you mean steps?"
  )
  assert errors.did_you_mean("varaints", ["eval.variants", "seed"], "--config.") == (
    "; did you mean --config.eval.variants?"
  )
  assert errors.did_you_mean("xyz", ["eval.variants", "seed"]) == ""


def test_config_command_lists_every_field_with_default_allowed_and_description():
  proc = run_lcx(
    [
      "--config=configs/base.py:pos=alibi,size=tiny",
      "--config.model.attention.pattern.name=sliding_window",
      "--config.model.attention.pattern.window=16",
    ],
    module="lcx.config.listing",
  )
  lines = proc.stdout.splitlines()
  config = tiny_config("alibi")  # the same shape; only data_dir and the train fields differ
  config.model.attention.pattern = {"name": "sliding_window", "window": 16}
  fields = [field for field, _ in cli.leaves(config)]
  assert [line.split(" = ")[0] for line in lines] == fields
  assert "train.lr = 0.001  (allowed: > 0)  # peak learning rate (AdamW)" in lines
  assert "model.attention.pattern.window = 16" in "\n".join(lines)
  described = [line for line in lines if "  # " in line]
  assert len(described) == len(lines)  # every field has its line of description
