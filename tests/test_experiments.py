"""The committed experiments: every sweep loads in both sizes, and every README table is what
`./launch.sh report experiments/NAME/results` prints over the committed results, verbatim, or
what one of the report commands the README quotes prints (`--baseline`, a glob of some runs)."""

import importlib
import json
import math
import pathlib
import re
import shlex

import numpy as np
import pytest

from lcx.config import variants
from lcx.tools import report, sweep
from tests.helpers import ROOT
from tests.tools.report.results import lengths_result, with_documents

EXPERIMENTS = sorted(p.parent for p in (ROOT / "experiments").glob("*/sweep.py"))


def _tables(markdown: str) -> list[str]:
  """The pipe tables of a markdown text, each as its lines joined."""
  tables, current = [], []
  for line in [*markdown.splitlines(), ""]:
    if line.startswith("|"):
      current.append(line)
    elif current:
      tables.append("\n".join(current))
      current = []
  return tables


def test_tables_finds_each_pipe_table():
  text = "intro\n| a | b |\n|:--|--:|\n| 1 | 2 |\n\ntext\n| c |\n|:--|"
  assert _tables(text) == ["| a | b |\n|:--|--:|\n| 1 | 2 |", "| c |\n|:--|"]


REPORT_COMMAND = re.compile(r"`\./launch\.sh report ([^`]+)`")


def _quoted_reports(readme: str, root: pathlib.Path = ROOT) -> list[str]:
  """What each `./launch.sh report PATH... [--baseline=X] [--effective_tolerance=N]
  [--claims=experiments/NAME]` quoted in a README prints (paths relative to the repo root; --out
  and --title change no table)."""
  printed = []
  for command in dict.fromkeys(m[1] for m in REPORT_COMMAND.finditer(readme)):  # each once
    args = shlex.split(command)
    flags = dict(a[2:].partition("=")[::2] for a in args if a.startswith("--"))
    tolerance = flags.get("effective_tolerance")
    results = report.load([str(root / a) for a in args if not a.startswith("--")])
    claims = report.read_claims(str(root / flags["claims"])) if "claims" in flags else []
    printed.append(
      report.format_tables(
        results, flags.get("baseline", ""), None if tolerance is None else float(tolerance), claims
      )
    )
  return printed


def test_quoted_reports_follow_the_paths_and_flags(tmp_path):
  results = []
  for i, run in enumerate(["alibi-s0", "rope-s0", "rope-s1"]):
    result = with_documents(lengths_result(run), shift=0.1 * i, seed=i)
    (tmp_path / "results" / run).mkdir(parents=True)
    (tmp_path / "results" / run / "none.json").write_text(json.dumps(result))
    results.append(result)
  readme = (
    "text `./launch.sh report results/*-s0 --baseline=rope-s0/none --out=/tmp/x` text\n"
    "`./launch.sh report results --out=/tmp/y`"
  )
  seed0, every = _quoted_reports(readme, tmp_path)
  assert seed0 == report.format_tables(report.load(str(tmp_path / "results/*-s0")), "rope-s0/none")
  assert "Each result minus rope-s0/none" in seed0 and "rope-s1" not in seed0
  assert every == report.format_tables(report.load(str(tmp_path / "results")))
  assert "Each result minus alibi-s0/none" in every


def test_quoted_reports_judge_the_claims_a_command_names(tmp_path):
  for i, run in enumerate(["alibi-s0", "rope-s0", "alibi-s1", "rope-s1"]):
    result = with_documents(lengths_result(run), shift=0.1 * run.startswith("alibi"), seed=i)
    (tmp_path / "results" / run).mkdir(parents=True)
    (tmp_path / "results" / run / "none.json").write_text(json.dumps(result))
  (tmp_path / "exp").mkdir()
  (tmp_path / "exp" / "sweep.py").write_text(
    'CLAIMS = [Claim("a", "alibi", "rope", (4,), "above", 0.01)]\n'
  )
  (printed,) = _quoted_reports("`./launch.sh report results --claims=exp --out=/tmp/x`", tmp_path)
  claims = [report.Claim("a", "alibi", "rope", (4,), "above", 0.01)]
  assert printed == report.format_tables(report.load(str(tmp_path / "results")), claims=claims)
  assert "## Claims (pre-declared)" in printed


def test_every_reproduction_is_there():
  assert {p.name for p in EXPERIMENTS} >= {
    "alibi_table",
    "rope_extension",
    "nope_tasks",
    "prope",
    "drope",
    "flip_flop",
    "scale_invariant",
    "schemes",
  }


@pytest.mark.parametrize("arg", ["", "full"])
def test_flip_flop_has_every_row_of_path_table_1_with_three_seeds(arg):
  runs = sweep.load(str(ROOT / "experiments" / "flip_flop") + (f":{arg}" if arg else "")).runs
  labels = ("rope", "stick_breaking", "nope", "alibi", "fox", "path")
  assert set(runs) == {f"{label}-s{seed}" for label in labels for seed in (0, 1, 2)}
  for label in ("rope", "nope", "alibi", "fox", "path"):  # each row names its scheme
    assert runs[f"{label}-s2"].config.startswith(f"configs/flip_flop.py:pos={label},")
  assert runs["stick_breaking-s0"].config.startswith("configs/flip_flop.py:pos=nope,")
  assert runs["stick_breaking-s0"].overrides["model.attention.kind"] == "stick_breaking"
  assert {r.overrides["seed"] for r in runs.values()} == {0, 1, 2}


@pytest.mark.parametrize("arg", ["", "full"])
def test_nope_tasks_is_its_13_tasks_by_8_schemes_by_3_seeds(arg):
  """A task registered later (its own experiment) does not join the table unrun."""
  from lcx.data import tasks

  runs = sweep.load(str(ROOT / "experiments" / "nope_tasks") + (f":{arg}" if arg else "")).runs
  named = {name.split("-")[0] for name in runs}
  assert len(named) == 13 and named <= set(tasks.TASKS) and "flip_flop" not in named
  assert len(runs) == 13 * 8 * 3
  assert {r.overrides["seed"] for r in runs.values()} == {0, 1, 2}


def test_a_flip_flop_row_of_an_unregistered_scheme_fails_with_the_config_error():
  """What a FoX or PaTH row does before its scheme is merged: the config's one line, no skip."""
  from configs import flip_flop

  with pytest.raises(ValueError, match=r"^model.position.name='no_such' is not allowed; allowed:"):
    flip_flop.get_config("pos=no_such")


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda p: p.name)
@pytest.mark.parametrize("arg", ["", "full"])
def test_sweep_loads_with_runs_in_dependency_order(experiment, arg):
  loaded = sweep.load(str(experiment) + (f":{arg}" if arg else ""))
  assert loaded.runs
  seen = set()
  for name, run in loaded.runs.items():
    assert set(run.needs) <= seen, f"{name} runs before what it needs"
    seen.add(name)


@pytest.mark.parametrize(
  "experiment", [p for p in EXPERIMENTS if (p / "results").is_dir()], ids=lambda p: p.name
)
def test_readme_tables_are_the_report_of_the_committed_results(experiment: pathlib.Path):
  readme = (experiment / "README.md").read_text()
  # The effective context length (issue 32): every README reports it, with the tolerance its
  # command names, and its tables are that command's (or another report command it quotes).
  tolerances = re.findall(r"--effective_tolerance=([0-9.]+)", readme)
  assert tolerances, f"{experiment.name}/README.md reports no effective context length"
  printed = [
    report.format_tables(report.load([str(experiment / "results")]), tolerance=float(tolerances[0]))
  ]
  printed += _quoted_reports(readme)
  tables = _tables(readme)
  assert tables, f"{experiment.name}/README.md has no table"
  missing = [t.splitlines()[0] for t in tables if not any(t in p for p in printed)]
  assert not missing, f"{experiment.name}/README.md tables not in the report: {missing}"
  assert not list((experiment / "results").rglob("checkpoints")), "results hold checkpoints"


@pytest.mark.parametrize(
  "experiment", [p for p in EXPERIMENTS if (p / "report.md").is_file()], ids=lambda p: p.name
)
def test_committed_report_and_csv_regenerate_byte_identical(experiment: pathlib.Path):
  """report.md and results.csv are what the report writes over the committed results today
  (under the title the sweep gave, NAME or NAME:ARG), so a change to lcx.tools.report that moves a
  byte of any experiment's report fails here."""
  committed = (experiment / "report.md").read_text()
  title = committed.splitlines()[0].removeprefix("# ")
  results = report.load([str(experiment / "results")])
  plots = {
    plot.key: str(experiment / plot.file)
    for kind in report.KINDS.values()
    for plot in kind.plots
    if (experiment / plot.file).is_file()
  }
  assert report.format_report(results, title, plots) == committed
  assert report.format_csv(results) == (experiment / "results.csv").read_text()


def _schemes_sweep(arg=""):
  return sweep.load(str(ROOT / "experiments" / "schemes") + (f":{arg}" if arg else ""))


def _schemes_module():
  return importlib.import_module("experiments.schemes.sweep")


@pytest.mark.parametrize("arg", ["", "full", "context"])
def test_schemes_has_a_row_per_registered_scheme_and_option_with_three_seeds(arg):
  from lcx.model import positions

  runs = _schemes_sweep(arg).runs
  module = _schemes_module()
  rows = {name.rsplit("-s", 1)[0] for name in runs}
  shared = set(module.FROM_CONTEXT_TABLE) if arg == "context" else set()
  assert rows | shared == set(positions.SCHEMES) | set(module._options(64))
  assert not rows & shared  # read from context_table, not trained twice
  assert set(runs) == {f"{row}-s{seed}" for row in rows for seed in (0, 1, 2)}
  regime, seq_len = {"": ("bytes", 64), "full": ("matched", 256), "context": ("context", 128)}[arg]
  schedule = "" if arg == "context" else ",steps=600"  # context: the regime's own steps
  for scheme in set(positions.SCHEMES) - shared:  # each trains its own scheme, in the regime
    config = f"configs/extrapolation.py:pos={scheme},data=books,regime={regime}{schedule}"
    assert runs[f"{scheme}-s1"].config == config
  if not shared:
    assert runs["scale_invariant-s0"].config.startswith("configs/extrapolation.py:pos=p_rope,")
  assert runs["stick_breaking-s0"].overrides["model.attention.kind"] == "stick_breaking"
  assert runs["pose-s2"].overrides["train.pose_target"] == 16 * seq_len
  lengths = {r.overrides.get("eval.multipliers") for r in runs.values()}
  assert lengths == ({None} if arg == "context" else {(1, 4, 16)})  # context: the regime's own
  seeds = [r.overrides["seed"] for r in runs.values()]  # seed 0 of every row, then 1, then 2
  assert seeds == sorted(seeds)
  assert next(iter(runs)) == ("stick_breaking-s0" if arg == "context" else "rope-s0")


def test_schemes_context_reads_context_tables_runs_of_the_same_command():
  """:context's rows that experiments/context_table trains are that experiment's runs: the same
  config, seed and overrides (the regime's lengths, T5's buckets), so its results stand in for
  them; RoPE among them, the baseline every claim pairs with."""
  module = _schemes_module()
  context_table = sweep.load(str(ROOT / "experiments" / "context_table")).runs
  assert "rope" in module.FROM_CONTEXT_TABLE
  for row, theirs in module.FROM_CONTEXT_TABLE.items():
    pos, extra = module.rows(128)[row] if row != "t5" else ("t5", {})
    for seed in (0, 1, 2):
      run = context_table[f"{theirs}-s{seed}"]
      assert run.config == f"configs/extrapolation.py:pos={pos},data=books,regime=context", row
      t5 = {"model.position.max_distance": 64} if row == "t5" else {}
      assert run.overrides == {"seed": seed, **extra, **t5, "eval.variants": "none"}, row
  trained = next(iter(_schemes_sweep("context").runs.values()))
  assert trained.config.endswith(",data=books,regime=context")  # the same command's shape
  claims = {c.name: c for c in module.CLAIMS_CONTEXT}
  assert set(claims) == {c.name for c in module.CLAIMS}
  assert {c.baseline for c in claims.values()} == {"rope"}
  assert {c.min_effect for c in claims.values()} == {0.05}


def test_a_newly_registered_scheme_is_a_schemes_row(monkeypatch):
  from lcx.model import positions

  monkeypatch.setitem(positions.SCHEMES, "brand_new", positions.SCHEMES["nope"])
  runs = _schemes_sweep().runs
  assert runs["brand_new-s2"].config.startswith("configs/extrapolation.py:pos=brand_new,")


@pytest.mark.parametrize("arg", ["", "full", "context"])
def test_every_schemes_run_config_validates(arg):
  """Each run's config file with its overrides passes every check lcx.main makes before it
  compiles (the mesh's aside), so no row of a long sweep fails at its start."""
  from configs import extrapolation
  from lcx.config import checks as config_lib
  from tests.helpers import set_fields

  for name, run in _schemes_sweep(arg).runs.items():
    config = extrapolation.get_config(run.config.partition(":")[2])
    set_fields(config, run.overrides)
    config_lib.check_fields(config)


def test_schemes_full_shards_fit_the_lent_window_as_the_readme_says():
  loaded = _schemes_sweep("full")
  module = _schemes_module()
  shards = sweep.shards(loaded.runs, module.SHARDS)
  readme = (ROOT / "experiments" / "schemes" / "README.md").read_text()
  assert f"--shard=i/{module.SHARDS}" in readme
  assert f"{module.SHARDS} shards" in readme
  for shard in shards:
    rows = {name.rsplit("-s", 1)[0] for name in shard}
    assert set(shard) == {f"{row}-s{seed}" for row in rows for seed in (0, 1, 2)}
    estimate = module.SETUP_S + len(rows) * (module.RUN_S + 2 * module.CACHED_RUN_S)
    assert estimate <= module.SHARD_LIMIT_S == 8 * 60


# A run's time on one lent GPU, estimated from schemes:full on an H200 (experiments/schemes/
# README.md: a 600-step run 16-118 s with seven side by side, median 27 s, 11-12 ms a training
# step): setup once, then per run a fixed part (process start, compilation, checkpoints,
# evaluation) and each training step at 20 ms (the larger models and batches of other variants);
# a LongRoPE search a fixed 120 s. A shard may take 8 minutes from a fresh machine unless its
# sweep.py sets SHARD_LIMIT_S (its README then says why it is over the 8 minutes).
GPU_SETUP_S, GPU_RUN_S, GPU_STEP_S, GPU_SEARCH_S, GPU_LIMIT_S = 60, 45, 0.02, 120, 8 * 60


def _gpu_estimate_s(loaded: sweep.Sweep, name: str) -> float:
  run = loaded.runs[name]
  if run.mode == "longrope":
    return GPU_SEARCH_S
  steps = re.findall(r"[,.:]steps=([0-9]+)", " ".join(loaded.command(name)))  # the last holds
  return GPU_RUN_S + (GPU_STEP_S * int(steps[-1]) if steps and run.mode != "eval" else 0)


def test_schemes_context_shards_fit_a_lent_window_as_the_readme_says():
  """:context on lent GPUs: a row's three seeds a shard, each within the window by the estimate
  above at the regime's own steps (its commands name none)."""
  from configs import extrapolation

  loaded = _schemes_sweep("context")
  module = _schemes_module()
  steps = extrapolation.REGIMES["context"].steps
  shards = sweep.shards(loaded.runs, module.CONTEXT_SHARDS)
  assert sum(map(len, shards)) == len(loaded.runs)
  for shard in shards:
    rows = {name.rsplit("-s", 1)[0] for name in shard}
    assert set(shard) == {f"{row}-s{seed}" for row in rows for seed in (0, 1, 2)}
    estimate = GPU_SETUP_S + len(shard) * (GPU_RUN_S + GPU_STEP_S * steps)
    assert estimate <= GPU_LIMIT_S, (sorted(rows), estimate)
  readme = (ROOT / "experiments" / "schemes" / "README.md").read_text()
  assert f"experiments/schemes:context --shard=i/{module.CONTEXT_SHARDS}" in readme


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda p: p.name)
def test_an_unknown_arg_is_one_error_naming_the_allowed_ones(experiment: pathlib.Path):
  """experiments/NAME:typo used to run the whole CPU sweep into runs/NAME_typo for two of them."""
  with pytest.raises(
    ValueError,
    match=rf"^experiments/{experiment.name}:ARG='typo' is not allowed; allowed: \"\", .*full",
  ):
    sweep.load(f"{experiment}:typo")


def _shard_estimate_s(loaded: sweep.Sweep, shard: list[str], jobs: int) -> float:
  """Setup, then the shard's runs as `sweep --jobs` starts them (`sweep.ready`, at most `jobs`
  at once), each taking its estimate: when the last ends."""
  waiting, going, now = list(shard), {}, 0.0  # going: run -> its end
  while waiting or going:
    while len(going) < jobs and (startable := sweep.ready(loaded, waiting, going)):
      waiting.remove(startable[0])
      going[startable[0]] = now + _gpu_estimate_s(loaded, startable[0])
    now = min(going.values())
    going = {r: end for r, end in going.items() if end > now}
  return GPU_SETUP_S + now


def test_the_shard_estimate_follows_the_jobs_rule():
  loaded = sweep.load("experiments/rope_extension:full")
  (shard, *_) = sweep.shards(loaded.runs, 3)
  one_at_a_time = _shard_estimate_s(loaded, shard, jobs=1)
  assert one_at_a_time == GPU_SETUP_S + sum(_gpu_estimate_s(loaded, r) for r in shard)
  base, search = _gpu_estimate_s(loaded, "rope"), _gpu_estimate_s(loaded, "longrope_search")
  evaluation = _gpu_estimate_s(loaded, "training_free")
  fine_tune = _gpu_estimate_s(loaded, "longrope_finetuned")
  side_by_side = _shard_estimate_s(loaded, shard, jobs=len(shard))
  assert side_by_side == GPU_SETUP_S + base + search + max(evaluation, fine_tune)  # its chain


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda p: p.name)
def test_each_full_variant_splits_into_shards_that_fit_a_lent_window(experiment: pathlib.Path):
  """Issue 27 item 6: SHARDS in sweep.py (and SHARD_JOBS, runs at once, where a shard holds a
  chain), every shard within its window by the estimate above, and the README names the shard
  command."""
  module = importlib.import_module(f"experiments.{experiment.name}.sweep")
  loaded = sweep.load(f"{experiment}:full")
  limit = getattr(module, "SHARD_LIMIT_S", GPU_LIMIT_S)
  jobs = getattr(module, "SHARD_JOBS", 1)
  estimates = [
    _shard_estimate_s(loaded, shard, jobs) for shard in sweep.shards(loaded.runs, module.SHARDS)
  ]
  assert all(estimates) and max(estimates) <= limit, (experiment.name, max(estimates))
  readme = (experiment / "README.md").read_text()
  jobs_flag = f" --jobs={jobs}" if jobs > 1 else ""
  assert f"experiments/{experiment.name}:full --shard=i/{module.SHARDS}{jobs_flag}" in readme
  if limit > GPU_LIMIT_S:
    assert "over the 8 minutes" in readme


def _run_config(run: sweep.Run, file: str = "configs/extrapolation.py:"):
  """A run's config as lcx.main builds it before compiling: its config file's get_config with
  the run's overrides, checked."""
  from lcx.config import checks as config_lib
  from tests.helpers import set_fields

  assert run.config.startswith(file)
  module = importlib.import_module(file[: -len(".py:")].replace("/", "."))
  config = module.get_config(run.config.partition(":")[2])
  set_fields(config, run.overrides)
  config_lib.check_fields(config)
  return config


def _differing(a, b) -> set[str]:
  """The dotted fields whose values differ between two configs."""
  fa, fb = variants.flatten(a.to_dict()), variants.flatten(b.to_dict())
  return {k for k in fa.keys() | fb.keys() if fa.get(k, "<unset>") != fb.get(k, "<unset>")}


def _tokens(config) -> int:
  return config.train.steps * config.data.batch_size * config.data.seq_len


ROPE_CONTROLS = ("direct_finetuned", "ntk_finetuned", "continued", "long_trained")


@pytest.mark.parametrize("arg", ["", "matched", "full"])
def test_rope_extension_controls_are_the_pi_fine_tune_but_one_thing(arg):
  """Issue 27 item 5: each control differs from the row it controls in what it tests only, so a
  change to one side (the fine-tune's steps, its warmup, the base run's length) fails here."""
  runs = sweep.load(str(ROOT / "experiments" / "rope_extension") + (f":{arg}" if arg else "")).runs
  configs = {name: _run_config(runs[name]) for name in ("rope", "linear_finetuned", *ROPE_CONTROLS)}
  base, pi = configs["rope"], configs["linear_finetuned"]
  L = base.data.seq_len
  assert pi.data.seq_len == 4 * L and pi.model.position.scaling.rope_type == "linear"
  scaling = {"model.position.scaling.rope_type", "model.position.scaling.factor"}
  # Direct fine-tuning (PI Table 1) and NTK: PI's fine-tune with another rope_type.
  assert _differing(configs["direct_finetuned"], pi) == scaling
  assert configs["direct_finetuned"].model.position.scaling.rope_type == "default"
  assert _differing(configs["ntk_finetuned"], pi) == {"model.position.scaling.rope_type"}
  assert configs["ntk_finetuned"].model.position.scaling.rope_type == "ntk"
  # Continued training: PI's fine-tune at L, unscaled, for as many tokens.
  continued = configs["continued"]
  assert continued.data.seq_len == L and _tokens(continued) == _tokens(pi)
  assert _differing(continued, pi) == {"data.seq_len", "model.max_len", "train.steps"} | scaling
  for name in ("direct_finetuned", "ntk_finetuned", "continued"):
    assert runs[name].overrides["train.init_from"] == "{runs}/rope"
    assert runs[name].needs == ("rope",) and runs[name].mode == "train_and_eval"
  # The upper bound: the base run at 4 x L from scratch, on the base's tokens plus PI's.
  long = configs["long_trained"]
  assert not long.train.init_from and runs["long_trained"].needs == ()
  assert long.data.seq_len == 4 * L and _tokens(long) == _tokens(base) + _tokens(pi)
  assert _differing(long, base) == {"data.seq_len", "model.max_len", "train.steps"}
  # Every control is scored like the fine-tunes: the same lengths, documents and protocols.
  evaluation = {
    k: v for k, v in runs["linear_finetuned"].overrides.items() if k.startswith("eval.")
  }
  for name in ROPE_CONTROLS:
    assert {k: v for k, v in runs[name].overrides.items() if k.startswith("eval.")} == evaluation


def test_rope_extension_matched_keeps_the_matched_base_at_every_length_trained():
  """:matched: every run, fine-tunes at 4 x L included, has the rotary base matched at L = 256
  (a fine-tune changes the length, not the model), and the base run trains what
  scale_invariant:full's RoPE row trains, so the two experiments' RoPE rows are one model."""
  from lcx import regime

  runs = sweep.load(str(ROOT / "experiments" / "rope_extension") + ":matched").runs
  assert len(runs) == 30
  for name, run in runs.items():
    if run.config:
      config = _run_config(run)
      assert config.model.position.base == pytest.approx(regime.matched_base(256)), name
      assert config.data.tokenizer == "sentencepiece" and config.data.seq_len in (256, 1024)
  si = sweep.load(str(ROOT / "experiments" / "scale_invariant") + ":full").runs
  for seed, ours in ((0, "rope"), (1, "rope-s1"), (2, "rope-s2")):
    theirs = _run_config(si[f"rope-s{seed}"])
    assert not {
      k for k in _differing(_run_config(runs[ours]), theirs) if not k.startswith("eval.")
    }, ours


@pytest.mark.parametrize("arg", ["", "full"])
def test_alibi_table_training_length_sweep_keeps_the_tokens_and_the_lengths(arg):
  """ALiBi Table 5: books-alibi-s0 trained at L/2 and 2L too, as many tokens per step and
  steps, every row evaluated at the lengths books-alibi-s0 is (and L/2)."""
  runs = sweep.load(str(ROOT / "experiments" / "alibi_table") + (f":{arg}" if arg else "")).runs
  base = _run_config(runs["books-alibi-s0"])
  L = base.data.seq_len
  evaluated = {L * m for m in base.eval.multipliers}
  lengths = set()
  for n in (L // 2, 2 * L):
    config = _run_config(runs[f"books-alibi-L{n}-s0"])
    assert config.data.seq_len == n and config.train.steps == base.train.steps
    assert _tokens(config) == _tokens(base)
    changed = {"data.seq_len", "model.max_len", "data.batch_size", "eval.lengths"}
    assert _differing(config, base) == changed
    assert set(config.eval.lengths) == evaluated | {L // 2}
    lengths.add(tuple(config.eval.lengths))
  assert len(lengths) == 1


def test_alibi_table_claims_name_its_seeded_books_rows_at_lengths_they_score():
  """Each declared claim compares books rows trained in seeds 0-2, at multiples of L their
  windows evaluation scores."""
  from lcx.tools.report import claims

  runs = sweep.load(str(ROOT / "experiments" / "alibi_table")).runs
  declared = claims.read_claims("experiments/alibi_table")
  assert len(declared) == 8
  for claim in declared:
    for stem in claim.stems():
      assert all(f"{stem}-s{seed}" in runs for seed in (0, 1, 2)), claim.name
      scored = _run_config(runs[f"{stem}-s0"]).eval.multipliers
      assert set(claim.lengths) | {claim.minus_length or 1} <= set(scored), claim.name


def test_alibi_table_matched_trains_the_rows_scale_invariant_full_does_not_with_its_command():
  """:matched: sinusoidal and T5, seeds 0-2, with the command scale_invariant:full trains its
  RoPE, ALiBi and NoPE rows with (but for pos), so the report pairs them on the same documents."""
  at = importlib.import_module("experiments.alibi_table.sweep")
  runs = sweep.load(str(ROOT / "experiments" / "alibi_table") + ":matched").runs
  assert sorted(runs) == sorted(f"{r}-s{s}" for r in ("sinusoidal", "t5") for s in (0, 1, 2))
  si = sweep.load(str(ROOT / "experiments" / "scale_invariant") + ":full").runs
  for seed in (0, 1, 2):
    for row in at.FROM_SCALE_INVARIANT:
      assert f"{row}-s{seed}" in si
    theirs, ours = si[f"rope-s{seed}"], runs[f"sinusoidal-s{seed}"]
    assert ours.config == theirs.config.replace("pos=rope", "pos=sinusoidal")
    assert ours.overrides == {**theirs.overrides, "eval.variants": "none"}
    assert runs[f"t5-s{seed}"].overrides == ours.overrides
  assert (
    _run_config(runs["t5-s0"]).model.position.max_distance < _run_config(runs["t5-s0"]).data.seq_len
  )  # every bucket trains, as in the paper
  with pytest.raises(ValueError, match=r"experiments/alibi_table:ARG='matchd' is not allowed"):
    at.get_runs("matchd")


def test_scale_invariant_bytes_trains_what_schemes_does_not_and_reads_the_rest_from_it():
  """:bytes, the CPU variant where 600 steps learn: RoPE (with the NTK and YaRN evaluation
  variants) and LogN p-RoPE trained here, seeds 0-2; every other row of the paper's table is a
  schemes run whose command is this experiment's own (but for the run name)."""
  si = importlib.import_module("experiments.scale_invariant.sweep")
  loaded = sweep.load(str(ROOT / "experiments" / "scale_invariant") + ":bytes")
  assert sorted(loaded.runs) == sorted(
    f"{r}-s{s}" for r in ("rope", "logn_p_rope") for s in (0, 1, 2)
  )
  assert loaded.out_dir.endswith("scale_invariant/bytes")
  assert loaded.runs["rope-s0"].overrides["eval.variants"] == si.ROPE_VARIANTS
  schemes = _schemes_sweep().runs
  for seed in (0, 1, 2):
    for row, schemes_row in si.FROM_SCHEMES.items():
      theirs = schemes[f"{schemes_row}-s{seed}"]
      pos, extra = si.SCHEMES[row]
      assert (
        theirs.config == f"configs/extrapolation.py:pos={pos},data=books,regime=bytes,steps=600"
      )
      assert theirs.overrides == {
        "seed": seed,
        **extra,
        "eval.multipliers": (1, 4, 16),
        "eval.variants": "none",
      }, row
    rope, schemes_rope = loaded.runs[f"rope-s{seed}"], schemes[f"rope-s{seed}"]
    assert rope.config == schemes_rope.config  # the same training as schemes' RoPE
    assert {**rope.overrides, "eval.variants": "none"} == schemes_rope.overrides
  with pytest.raises(ValueError, match=r"^experiments/scale_invariant:ARG='nope' is not allowed"):
    sweep.load(str(ROOT / "experiments" / "scale_invariant") + ":nope")


def test_prope_matched_base_is_the_cpu_sweep_with_the_llama2_matched_base():
  """:matched_base: the CPU sweep's runs, one override more: the rotary base at which the
  fraction of pairs under one turn inside L = 64 is Llama-2's at 4k, so p-RoPE's dropped
  quarter turns about 5 rad over L (base 10^4: under 0.07)."""
  from lcx import regime

  plain = sweep.load(str(ROOT / "experiments" / "prope")).runs
  matched = sweep.load(str(ROOT / "experiments" / "prope") + ":matched_base")
  assert matched.out_dir.endswith("prope/matched_base") and set(matched.runs) == set(plain)
  assert {r.overrides["seed"] for r in matched.runs.values()} == {0, 1, 2}
  for name, run in matched.runs.items():
    assert run.config == plain[name].config
    base = run.overrides.pop("model.position.base")
    assert run.overrides == plain[name].overrides
    assert base == pytest.approx(27.086, abs=1e-3)
  assert regime.pair_counts(base, 32, 64)["p_rope_dropped_angle"] > 4  # radians over L
  assert regime.pair_counts(10_000.0, 32, 64)["p_rope_dropped_angle"] < 0.07
  with pytest.raises(ValueError, match=r"^experiments/prope:ARG='x' is not allowed"):
    sweep.load(str(ROOT / "experiments" / "prope") + ":x")


def test_flip_flop_matched_base_is_the_cpu_ropes_with_the_llama2_matched_base():
  """:matched_base: the CPU table's RoPE rows, one override more, at the base where 4 of the 16
  pairs turn less than once inside the 513 positions (base 10^4: 8; Llama-2 at 4k: 18 of 64)."""
  from lcx import regime

  plain = sweep.load(str(ROOT / "experiments" / "flip_flop")).runs
  matched = sweep.load(str(ROOT / "experiments" / "flip_flop") + ":matched_base")
  assert matched.out_dir.endswith("flip_flop/matched_base")
  assert set(matched.runs) == {"rope-s0", "rope-s1", "rope-s2"}
  for name, run in matched.runs.items():
    assert run.config == plain[name].config
    base = run.overrides.pop("model.position.base")
    assert run.overrides == plain[name].overrides
  config = _run_config(plain["rope-s0"], "configs/flip_flop.py:")
  L, head_dim = config.data.seq_len, config.model.head_dim
  assert base == pytest.approx(regime.matched_base(L)) and L == 513
  assert regime.pair_counts(base, head_dim, L)["under_one_turn"] == 4
  assert regime.pair_counts(config.model.position.base, head_dim, L)["under_one_turn"] == 8


def test_nope_tasks_matched_base_is_the_cpu_rope_rows_with_the_base_matched_at_each_l_or_range():
  from lcx import regime

  plain = sweep.load(str(ROOT / "experiments" / "nope_tasks")).runs
  matched = sweep.load(str(ROOT / "experiments" / "nope_tasks") + ":matched_base").runs
  assert len(matched) == 13 * 3 * 3
  for name, run in matched.items():
    source = plain[re.sub(r"_matched(_range)?-", "-", name)]
    assert "rope" in name and run.config == source.config == "configs/base.py:pos=rope,size=tiny"
    base = run.overrides.pop("model.position.base")
    assert run.overrides == source.overrides
    # randomized RoPE's range: the base matched where its positions run, not at L
    at = source.overrides.get("train.random_positions") if "_range-" in name else None
    assert base == pytest.approx(regime.matched_base(at or source.overrides["data.seq_len"]))
  ranged = [name for name in matched if "_range-" in name]
  assert len(ranged) == 13 * 3 and all("rope_randomized_matched_range-" in n for n in ranged)


def test_drope_recipe_adds_qk_norm_over_heads_to_the_dropped_model_and_fits_beta_per_task():
  """DroPE as its reference code recalibrates (QK-norm over all heads added to the NoPE model,
  no temperature while recalibrating), tested as it is and with beta fitted per NIAH task."""
  from configs import niah

  runs = sweep.load(str(ROOT / "experiments" / "drope")).runs
  named = niah.get_config("pos=nope").eval.named_variants
  for seed in (0, 1, 2):
    recipe, drope = runs[f"drope_recipe-s{seed}"], runs[f"drope-s{seed}"]
    assert (
      recipe.needs == (f"rope-s{seed}",) and recipe.config == runs[f"drope_no_temp-s{seed}"].config
    )
    extra = {k: v for k, v in recipe.overrides.items() if drope.overrides.get(k) != v}
    assert extra == {
      "model.qk_norm": True,
      "model.qk_norm_over": "heads",
      "eval.variants": "multikey,multiquery,multivalue,"
      "multikey_beta_fit,multiquery_beta_fit,multivalue_beta_fit",
    }
    assert "model.attention.temperature" not in recipe.overrides
  recipe_only = sweep.load(str(ROOT / "experiments" / "drope") + ":recipe")
  assert recipe_only.out_dir.endswith("drope/recipe")
  assert list(recipe_only.runs) == [
    f"{r}-s{s}" for s in (0, 1, 2) for r in ("rope", "drope_recipe")
  ]
  assert all(run == runs[name] for name, run in recipe_only.runs.items())  # the same runs
  with pytest.raises(ValueError, match=r"^experiments/drope:ARG='x' is not allowed"):
    sweep.load(str(ROOT / "experiments" / "drope") + ":x")
  for kind in ("multikey", "multiquery", "multivalue"):
    assert named[f"{kind}_beta_fit"].to_dict() == {
      "data": {"task": f"niah_{kind}"},
      "eval": {"beta_fit": {"fitted": True}},
    }


def test_drope_full_trains_every_run_at_1e_3_and_the_probe_is_its_seed_0_base():
  """:full adds `train.lr=1e-3` to every run, bases and recalibrations alike, and nothing else
  to the CPU table's runs; :base_probe is :full's RoPE base of seed 0, alone in its shard."""
  drope = str(ROOT / "experiments" / "drope")
  small, full = sweep.load(drope).runs, sweep.load(drope + ":full").runs
  assert set(small) == set(full) and len(full) == 24
  for name, run in full.items():
    extra = {k: v for k, v in run.overrides.items() if small[name].overrides.get(k) != v}
    assert extra == {"train.lr": 1e-3} and "train.lr" not in small[name].overrides, name
    assert run.needs == small[name].needs and run.config == small[name].config.replace(
      "size=small", "size=default"
    ).replace("steps=1200", "steps=4000").replace("steps=240", "steps=800")
  probe = sweep.load(drope + ":base_probe")
  assert probe.out_dir.endswith("drope/base_probe")
  assert probe.runs == {"rope_low_lr-s0": full["rope-s0"]}
  assert sweep.shards(probe.runs, 1) == [["rope_low_lr-s0"]]


def test_drope_matched_base_moves_the_base_of_every_rope_model_and_leaves_the_rest():
  """:matched_base: the 6 rows that carry RoPE or start from its checkpoint, 3 seeds; the RoPE
  models (rope, rnope_swa, rope_more) train at the base where 4 of the 16 pairs turn less than
  once inside L = 207 (base 10^4: 9); the dropped rows read the matched RoPE run of their seed."""
  from lcx import regime

  plain = sweep.load(str(ROOT / "experiments" / "drope")).runs
  matched = sweep.load(str(ROOT / "experiments" / "drope") + ":matched_base")
  assert matched.out_dir.endswith("drope/matched_base") and len(matched.runs) == 18
  assert {n.rsplit("-s", 1)[0] for n in set(plain) - set(matched.runs)} == {"alibi", "nope"}
  bases = set()
  for name, run in matched.runs.items():
    assert run.config == plain[name].config and run.needs == plain[name].needs
    overrides = dict(run.overrides)
    if run.config.startswith("configs/niah.py:pos=rope"):
      bases.add(overrides.pop("model.position.base"))
    assert overrides == plain[name].overrides, name
  (base,) = bases
  config = _run_config(plain["rope-s0"], "configs/niah.py:")
  L, head_dim = config.data.seq_len, config.model.head_dim
  assert base == pytest.approx(regime.matched_base(L)) and L == 207
  assert regime.pair_counts(base, head_dim, L)["under_one_turn"] == 4
  assert regime.pair_counts(config.model.position.base, head_dim, L)["under_one_turn"] == 9


def test_rope_extension_has_three_seeds_each_reading_its_own_base_run():
  """Seed 0 keeps its committed runs' names and commands; seed s > 0 trains with seed s and
  every search, variant, fine-tune and control of it reads rope-sS, never seed 0's run."""
  runs = sweep.load(str(ROOT / "experiments" / "rope_extension")).runs
  base = [n for n in runs if "-s" not in n]
  assert len(base) == 10 and "seed" not in runs["rope"].overrides
  for seed in (1, 2):
    mine = {n: r for n, r in runs.items() if n.endswith(f"-s{seed}")}
    assert sorted(mine) == sorted(f"{n}-s{seed}" for n in base)
    for name, run in mine.items():
      text = json.dumps([run.config, run.overrides, run.needs, run.on])
      assert "/rope/" not in text and '"rope"' not in text, name  # never seed 0's base run
      if run.config:  # trained here: with this seed
        assert run.overrides["seed"] == seed, name
    assert (
      f"{{runs}}/rope-s{seed}/longrope/factors.json"
      in mine[f"training_free-s{seed}"].overrides["eval.variants"]
    )
    assert (
      mine[f"linear_finetuned-s{seed}"].overrides["train.init_from"] == f"{{runs}}/rope-s{seed}"
    )


def test_rope_extension_seeds_line_up_seed_0s_plain_names_with_the_seeded_runs(tmp_path):
  """seeds.py pairs A and B of one seed, seed 0 read from runs without a suffix, LongRoPE's
  variant whatever its factors path; each cell is the report's paired difference."""
  seeds = importlib.import_module("experiments.rope_extension.seeds")
  made = {}
  for seed, suffix in [(0, ""), (1, "-s1")]:
    for i, variant in enumerate(["none", f"longrope@/runs/rope{suffix}/factors.json"]):
      result = with_documents(lengths_result(f"rope{suffix}", variant), shift=-0.1 * i, seed=i)
      result["protocol"]["protocol"] = "windows"
      made[seed, variant.split("@")[0]] = result
      path = tmp_path / f"rope{suffix}" / f"{variant.replace('/', '_')}.json"
      path.parent.mkdir(exist_ok=True)
      path.write_text(json.dumps(result))
  found = seeds.windows_results(tmp_path)
  assert sorted(found) == [("rope", 0, "longrope"), ("rope", 0, "none")] + [
    ("rope", 1, "longrope"),
    ("rope", 1, "none"),
  ]
  a, b = ("rope", "longrope"), ("rope", "none")
  for seed in (0, 1):
    expected = report.lengths.paired_cell(
      made[seed, "longrope"]["lengths"]["128"],
      made[seed, "none"]["lengths"]["128"],
      made[seed, "none"]["protocol"],
    )
    assert seeds.difference(found, a, b, "128", seed) == expected
    assert expected.startswith("-0.1")  # the shift, paired over the same documents
  assert seeds.difference(found, a, b, "128", 2) == "not run"


def test_rope_extension_seeds_compares_at_each_regimes_multiples_of_L():
  """The claims' lengths and variant names follow L: the bytes regime's L = 64, :matched's 256."""
  seeds = importlib.import_module("experiments.rope_extension.seeds")
  for arg, L in (("", 64), ("matched", 256)):
    assert seeds.REGIMES[arg][1] == L
    by_what = {what: (a, b, at) for what, a, b, at in seeds.comparisons(L)}
    assert by_what["yarn@4 - none"][2] == (str(L), str(4 * L), str(16 * L))
    assert by_what[f"rerope@{L} - none"][0] == ("rope", f"rerope@{L}")
    assert by_what[f"self_extend@{L // 2}/4 - none"][2] == (str(2 * L), str(16 * L))
  runs = sweep.load(str(ROOT / "experiments" / "rope_extension") + ":matched").runs
  variants = runs["training_free"].overrides["eval.variants"].split(",")
  for what, a, _, _ in seeds.comparisons(256):
    if a[0] == "rope" and a[1] != "longrope":
      assert a[1] in variants, what  # every variant a claim reads is one the sweep evaluates


def _anchor(heading: str) -> str:
  """GitHub's anchor for a markdown heading: lower case, punctuation dropped, spaces to '-'."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


DOCS = [
  ROOT / "README.md",
  *sorted((ROOT / "docs").glob("*.md")),
  ROOT / "experiments" / "README.md",
  *sorted((ROOT / "experiments").glob("*/README.md")),
]


def test_every_anchor_link_in_the_readmes_resolves():
  """A heading renamed to carry new counts once left a link to its old anchor dead; a section
  moved from README.md to docs/ leaves one to the file it left (anchors resolve across files)."""
  anchors = {p: {_anchor(h) for h in re.findall(r"^#+ (.+)$", p.read_text(), re.M)} for p in DOCS}
  dead = []
  for readme in DOCS:
    for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", readme.read_text()):
      path = (readme.parent / target).resolve() if target else readme
      if path in anchors and anchor not in anchors[path]:
        dead.append(f"{readme.relative_to(ROOT)}: {target}#{anchor}")
  assert _anchor("The matched regime (`rope_extension:matched`)") == (
    "the-matched-regime-rope_extensionmatched"
  )
  assert not dead, dead


def test_every_relative_link_in_the_docs_names_a_file_that_exists():
  """A page moved to docs/ keeps its links to the tree (`../experiments/...`) pointing somewhere."""
  missing = []
  for doc in DOCS:
    for target in re.findall(r"\]\(([^)#\s:]+)(?:#[^)\s]*)?\)", doc.read_text()):
      if not (doc.parent / target).exists():
        missing.append(f"{doc.relative_to(ROOT)}: {target}")
  assert not missing, missing


def test_the_readme_is_a_landing_page_with_the_two_set_up_commands_first():
  """README.md is at most 250 lines and the first commands it shows are the quickstart and the
  test suite; the reference lives in docs/."""
  readme = (ROOT / "README.md").read_text()
  assert len(readme.splitlines()) <= 250
  commands = re.findall(
    r"(?:^|`)(\./launch\.sh \w+|(?:\.venv/bin/)?python[\w.]* -m [\w.]+)|`(lcx \w+|pip install)",
    readme,
    re.M,
  )
  commands = [a or b for a, b in commands]
  assert commands[:2] == ["./launch.sh quickstart", "./launch.sh test"], commands[:5]
  assert len(commands) > 2  # the tour follows


def test_drope_bases_pairs_each_matched_run_with_the_same_run_at_base_10000(tmp_path):
  """bases.py pairs a matched-base result with the base-10^4 result of the same run, variant
  and seed, example by example; a seed the matched sweep has not run says so."""
  from tests.tools.report.results import tasks_result

  bases = importlib.import_module("experiments.drope.bases")

  def result(run, hits, digest="same"):
    r = tasks_result(run, "multivalue")
    r["buckets"]["17-32"]["per_example"] = {
      "exact": "1" * hits + "0" * (100 - hits),
      "digest": digest,
    }
    r["config"] = {"eval": {"bootstrap": 200}, "data": {"seed": 3}}
    r["buckets"]["17-32"]["accuracy"] = hits / 100
    return r

  made = {
    "matched": [result("rope-s0", 60), result("rope-s1", 40, "other")],
    "base": [result("rope-s0", 45), result("rope-s1", 50), result("rope-s2", 50)],
  }
  for where, results in made.items():
    for r in results:
      path = tmp_path / where / r["run"] / "multivalue.json"
      path.parent.mkdir(parents=True)
      path.write_text(json.dumps(r))
  matched, base = (bases.by_name(tmp_path / where) for where in ("matched", "base"))
  assert sorted(matched) == [("rope", "multivalue", 0), ("rope", "multivalue", 1)]
  diff, (lo, hi) = report.tasks.paired(made["matched"][0], made["base"][0], "17-32", 200, 3)
  assert diff == pytest.approx(0.15) and lo > 0
  line = next(x for x in bases.lines(matched, base) if x.startswith("rope/multivalue 17-32:"))
  assert line == (
    f"rope/multivalue 17-32: 0.450 -> 0.600 {diff:+.3f} [{lo:+.3f}, {hi:+.3f}]"
    " / examples differ / not run"
  )


CONTEXT_ROWS = (
  "rope",
  "alibi",
  "sinusoidal",
  "trained_logn_p_rope",
  "si_p_rope",
  "nope",
  "t5",
  "kerple_log",
  "fire",
)


@pytest.mark.parametrize("arg", ["", "full"])
def test_context_table_is_both_papers_rows_in_the_context_regime_seed_0_first(arg):
  """Issue 59 item 2: the ALiBi paper's rows with NoPE, KERPLE-log and FIRE, and the SI paper's,
  3 seeds each, in regime=context (the CPU at its 2000 steps); every row's seed 0 before any
  seed 1, the claims' rows first, so a sweep stopped across sessions has whole seeds."""
  runs = sweep.load(str(ROOT / "experiments" / "context_table") + (f":{arg}" if arg else "")).runs
  assert list(runs) == [f"{row}-s{seed}" for seed in (0, 1, 2) for row in CONTEXT_ROWS]
  for name, run in runs.items():
    config = _run_config(run)
    assert "regime=context" in run.config and config.seed == int(name.rsplit("-s", 1)[1])
    assert (config.data.seq_len, config.data.vocab_size) == (128, 1024)
    assert config.train.steps == (4000 if arg else 2000)
    assert config.model.d_model == (256 if arg else 128)
    assert config.model.position.get("base", 1e4) == 1e4
    assert config.eval.num_tokens == 100 * 16 * 128 and config.eval.multipliers[-1] == 16
  t5 = _run_config(runs["t5-s0"])
  assert t5.model.position.max_distance < t5.data.seq_len  # every bucket trains
  for row, temperature in (("trained_logn_p_rope", "ssmax"), ("si_p_rope", "scale_invariant")):
    config = _run_config(runs[f"{row}-s2"])
    assert (config.model.position.name, config.model.attention.temperature) == (
      "p_rope",
      temperature,
    )


def test_context_table_matched_base_is_the_si_rows_at_the_llama_matched_base_with_own_claims():
  """The SI rows again with the rotary base matched to Llama-2 at 4k (72.55 at L = 128), where
  p-RoPE's dropped pairs turn inside L; its claims (`CLAIMS_MATCHED_BASE`) name only its rows,
  and the default claims stay the table's."""
  from lcx import regime
  from lcx.tools.report import claims

  target = str(ROOT / "experiments" / "context_table") + ":matched_base"
  runs = sweep.load(target).runs
  rows = ("rope", "trained_logn_p_rope", "si_p_rope")
  assert list(runs) == [f"{row}-s{seed}" for seed in (0, 1, 2) for row in rows]
  for run in runs.values():
    config = _run_config(run)
    assert config.model.position.base == pytest.approx(72.547, abs=1e-3)
    assert config.model.position.base == regime.matched_base(config.data.seq_len)
    assert (config.data.seq_len, config.train.steps, config.eval.num_tokens) == (128, 2000, 204800)
  declared = claims.read_claims("experiments/context_table:matched_base")
  assert {c.name for c in declared} == {
    "si_below_trained_logn_16x",
    "si_below_rope_16x",
    "si_rises_less_than_trained_logn_16x",
    "si_rises_less_than_rope_16x",
    "rope_rises_16x",
  }
  for claim in declared:
    assert {f"{stem}-s0" for stem in claim.stems()} <= set(runs), claim.name
    assert claim.declared() == CONTEXT_CLAIMS[claim.name]  # worded as the table's
  with pytest.raises(ValueError, match="experiments/context_table:ARG"):
    sweep.load(str(ROOT / "experiments" / "context_table") + ":matched")


def test_context_table_trains_its_logn_row_with_the_scaling_and_declares_its_claims():
  """The SI paper's LogN + p-RoPE is trained with its log-n factor; lcx's log_n is 1 inside L
  (the network RoPE trains), ssmax is not. Each declared claim compares two of the sweep's rows
  at a length it scores."""
  import jax.numpy as jnp

  from lcx.model import temperature
  from lcx.tools.report import claims

  inside_1xL = jnp.arange(128)[None, :]
  assert bool((temperature.query_factor("log_n", inside_1xL, None, train_len=128) == 1).all())
  s_H = jnp.full((4,), temperature.ssmax_init(128))
  factor = temperature.query_factor("ssmax", inside_1xL, None, train_len=128, ssmax_H=s_H)
  assert float(factor[0, 63, 0]) == pytest.approx(math.log(64) / math.log(128))
  runs = sweep.load(str(ROOT / "experiments" / "context_table")).runs
  declared = claims.read_claims("experiments/context_table")
  assert {c.name: c.declared() for c in declared} == CONTEXT_CLAIMS
  for claim in declared:
    assert {f"{stem}-s0" for stem in claim.stems()} <= set(runs), claim.name
    assert claim.lengths == (16,)
  assert runs["trained_logn_p_rope-s0"].overrides["model.attention.temperature"] == "ssmax"


# context_table's claims, each as the report's "declared" column prints it.
CONTEXT_CLAIMS = {
  "alibi_below_rope_16x": "alibi/none - rope/none < -0.050",
  "alibi_below_sinusoidal_16x": "alibi/none - sinusoidal/none < -0.050",
  "si_below_trained_logn_16x": "si_p_rope/none - trained_logn_p_rope/none < -0.010",
  "si_below_rope_16x": "si_p_rope/none - rope/none < -0.010",
  "alibi_flat_16x": "-0.050 < alibi/none - 1x < +0.050",
  "rope_rises_16x": "rope/none - 1x > +0.300",
  "sinusoidal_rises_16x": "sinusoidal/none - 1x > +0.300",
  "si_rises_less_than_trained_logn_16x": (
    "(si_p_rope/none - 1x) - (trained_logn_p_rope/none - 1x) < -0.010"
  ),
  "si_rises_less_than_rope_16x": "(si_p_rope/none - 1x) - (rope/none - 1x) < -0.010",
}


def test_context_table_claims_judge_results_named_and_scored_as_its_runs_write_them():
  """Seeds 0-2 of the claims' rows at L = 128 and 16x on the same 7 documents (as context_probe's
  results hold them), in the papers' shapes: ALiBi flat, RoPE and sinusoidal rising, scale-
  invariant p-RoPE rising least. Every declared claim is judged, and each is reproduced."""
  rises = {"rope": 0.4, "alibi": -0.01, "sinusoidal": 1.0, "trained_logn_p_rope": 0.06}
  rises["si_p_rope"] = 0.003
  hard_D = np.random.default_rng(99).normal(4.0, 0.3, 7)
  results = []
  for seed in (0, 1, 2):
    for i, (row, rise) in enumerate(rises.items()):
      r = lengths_result(f"{row}-s{seed}", train_len=128, losses={1: 4.0, 16: 4.0 + rise})
      noise_D = np.random.default_rng([seed, i]).normal(0, 0.005, 7)
      for n, loss_D in (("128", hard_D), ("2048", hard_D + rise + noise_D)):
        r["lengths"][n]["per_document"] = {
          "ids": [0, 1, 2, 3, 5, 7, 8],
          "loss": [float(x) for x in loss_D],
          "tokens": [29258] * 7,
        }
      results.append(r)
  cells = report.judge(results, report.read_claims("experiments/context_table"))
  assert {c.claim.name: c.verdict for c in cells} == dict.fromkeys(CONTEXT_CLAIMS, "reproduced")


VERDICT_LABELS = ("reproduced", "not reproduced", "inconclusive", "underpowered", "untestable here")
VERDICT_WORDS = re.compile(r"reproduc|inconclusive|underpowered|testable|suggestive", re.I)


def test_the_results_index_lists_every_experiment_and_defines_the_five_labels():
  index = (ROOT / "experiments" / "README.md").read_text()
  assert "## How verdicts are labelled" in index
  assert [label for label in VERDICT_LABELS if f"- **{label}**: " not in index] == []
  assert [e.name for e in EXPERIMENTS if f"[{e.name}]({e.name}/README.md)" not in index] == []


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda p: p.name)
def test_every_verdict_is_one_of_the_five_labels_beside_the_published_numbers(experiment):
  """A bold verdict is one of the five labels, whole ("reproduced for the order, not for the
  levels" and "suggestive" were not), and the README quotes its paper's numbers and links the
  labels' definitions."""
  readme = (experiment / "README.md").read_text()
  assert "](../README.md#how-verdicts-are-labelled)" in readme
  assert "**Published**" in readme
  bold = re.findall(r"\*\*(.+?)\*\*", readme, re.S)
  assert [b for b in bold if VERDICT_WORDS.search(b) and b not in VERDICT_LABELS] == []


def test_compare_devices_compares_only_cells_scored_on_the_same_windows():
  """A CPU result scored on more windows than the GPU's differs by the windows, not the device:
  it is counted, not compared."""
  compare = importlib.import_module("experiments.scale_invariant.compare_devices").compare

  def result(device, losses_and_windows):
    lengths = {n: {"loss": loss, "windows": w} for n, (loss, w) in losses_and_windows.items()}
    return {"device": device, "lengths": lengths}

  cpu = {
    ("rope-s0", "none.json"): result("cpu x1", {"256": (5.50, 128), "4096": (5.60, 8)}),
    ("alibi-s0", "none.json"): result("cpu x1", {"256": (5.52, 128), "4096": (5.40, 8)}),
  }
  gpu = {
    ("rope-s0", "none.json"): result("gpu x1", {"256": (5.5001, 128), "4096": (5.70, 7)}),
    ("alibi-s0", "none.json"): result("gpu x1", {"256": (5.5203, 128), "4096": (5.30, 7)}),
  }
  lines = compare(cpu, gpu)
  assert lines[1] == "scored on the same windows: 2 cells; on other windows (not compared): 2"
  assert lines[2].startswith("|CPU - GPU| mean loss: median 2.0e-04, max 3.0e-04 nats (alibi-s0")
  assert lines[3] == "|CPU - GPU| of each row minus RoPE of its seed: max 2.0e-04 nats over 1 cells"
  cpu_only_new = {k: result("cpu x1", {"4096": (5.0, 8)}) for k in cpu}
  assert len(compare(cpu_only_new, gpu)) == 2
