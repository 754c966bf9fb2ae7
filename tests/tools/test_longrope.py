"""The LongRoPE search: its seeds and operators keep the factors in the space; on a tiny trained
run it never loses to its seeds, its factors.json scores the recorded fitness as an evaluation
variant, and an interrupted search resumes to the same state as an uninterrupted one."""

import collections
import json
import math
import os
import shutil

import numpy as np
import pytest

from lcx.config import checks as config_lib, run_config
from lcx.model.positions import scaling
from lcx.run import prepare, train
from lcx.tools import evaluate, longrope
from tests.helpers import refused_before_jax, run_lcx, tiny_config

SPACE = longrope.Space(
  num_pairs=8,
  max_factor=5.0,
  step=0.01,
  n_hats=(0, 1, 2, 4, 8, 16, 32),
  mutation_rate=0.3,
  crossover_rate=0.5,
)


def _valid(c, space=SPACE):
  lam = np.asarray(c.long_factor)
  return (
    len(lam) == space.num_pairs
    and np.all(np.diff(lam) >= 0)
    and lam.min() >= 1
    and lam.max() <= space.max_factor
    and c.n_hat in space.n_hats
  )


def test_seeds_are_pi_ntk_and_yarn_as_per_pair_factors():
  d, base, s, length = 16, 10000.0, 4.0, 32
  seeds = longrope.seed_factors(d, base, s, length)
  np.testing.assert_allclose(seeds["pi"], [4.0] * 8)
  np.testing.assert_allclose(seeds["ntk"], [s ** (2 * i / (d - 2)) for i in range(8)], rtol=1e-12)
  sc = scaling.resolve({"rope_type": "yarn", "factor": s}, d, default_length=length)
  yarn_inv_freq, _ = scaling.frequencies(d, base, sc, None)
  np.testing.assert_allclose(
    np.asarray(seeds["yarn"]) * yarn_inv_freq, scaling.theta(d, base), rtol=1e-12
  )
  assert seeds["yarn"][0] == pytest.approx(1.0) and seeds["yarn"][-1] == pytest.approx(s)
  for name, lam in seeds.items():
    assert _valid(longrope.Candidate(lam, 0, name)), name


def test_n_hat_choices_are_the_papers_table_4_up_to_l():
  assert longrope.n_hat_choices(32) == (0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32)
  assert longrope.n_hat_choices(48) == (0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32)
  assert longrope.n_hat_choices(4096) == (0, 1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 64, 128, 256)
  assert longrope.n_hat_choices(1) == (0, 1)


def test_mutation_and_crossover_stay_non_decreasing_in_range_and_new():
  rng = np.random.default_rng(0)
  seeds = [
    longrope.Candidate(lam, 0, name)
    for name, lam in longrope.seed_factors(16, 10000.0, 4.0, 32).items()
  ]
  seen = {c.key for c in seeds}
  population = longrope.first_generation(rng, seeds, 40, SPACE, set())
  assert [c.origin for c in population[:3]] == ["pi", "ntk", "yarn"]
  assert len({c.key for c in population}) == 40  # every one new
  for _ in range(5):
    kids = longrope.children(rng, population[:10], 20, 20, SPACE, seen)
    assert all(_valid(c) for c in kids)
    assert len({c.key for c in kids}) == len(kids) and not {c.key for c in seeds} & {
      c.key for c in kids
    }
    assert {c.origin for c in kids} == {"mutation", "crossover"}
    population = kids
  assert len({c.n_hat for c in population}) > 1  # n_hat is searched too
  off_grid = [
    x for c in population for x in c.long_factor if abs(x / 0.01 - round(x / 0.01)) > 1e-6
  ]
  seed_values = {x for c in seeds for x in c.long_factor}
  assert set(off_grid) <= seed_values  # mutations draw from the grid


def test_crossover_of_identical_parents_finds_nothing_new():
  c = longrope.Candidate((1.0, 2.0, 3.0), 0, "pi")
  space = longrope.Space(3, 5.0, 0.01, (0,), 0.3, 0.5)
  assert longrope.crossover(np.random.default_rng(0), c, c, space, {c.key}) is None


@pytest.mark.parametrize(
  "field, value, message",
  [
    ("target_len", 0, r"eval.longrope.target_len=0 must be above the training length L=32"),
    ("target_len", 32, r"eval.longrope.target_len=32 must be above the training length L=32"),
    ("parents", 70, r"eval.longrope.parents=70 must be <= eval.longrope.population=64"),
    (
      "max_factor",
      2.0,
      r"eval.longrope.max_factor=2.0 must be 0 \(1.25 x the scale\) or >= "
      r"the scale target_len / L = 4",
    ),
    ("population", 2, r"eval.longrope.population=2 is not allowed; allowed: >= 3"),
    (
      "crossover_rate",
      1.0,
      r"eval.longrope.crossover_rate=1.0 is not allowed; allowed: in \(0, 1\)",
    ),
  ],
)
def test_bad_search_settings_name_the_field(field, value, message):
  config = tiny_config()
  config.eval.longrope.target_len = 128
  config.eval.longrope[field] = value
  with pytest.raises(ValueError, match=message):
    longrope.validate(config)


def test_the_search_needs_a_rotary_scheme():
  config = tiny_config("alibi")
  config.eval.longrope.target_len = 128
  with pytest.raises(ValueError, match="model.position.name='alibi' has no RoPE frequencies"):
    longrope.validate(config)


@pytest.mark.parametrize(
  "pos, args, message",
  [
    (
      "rope",
      ["--config.eval.longrope.populaton=3"],
      "eval.longrope.populaton is not a known field; allowed: crossover_rate, ",
    ),
    (
      "rope",
      ["--config.eval.longrope.target_len=128", "--config.eval.longrope.population=2"],
      "eval.longrope.population=2 is not allowed; allowed: >= 3",
    ),
    ("rope", [], "eval.longrope.target_len=0 must be above the training length L=32"),
    (
      "alibi",
      ["--config.eval.longrope.target_len=128"],
      "model.position.name='alibi' has no RoPE frequencies to rescale",
    ),
    ("rope", ["--target_len=128"], "Unknown command line flag 'target_len'"),
  ],
)
def test_a_bad_flag_or_field_is_refused_before_jax_is_imported(pos, args, message, tmp_path):
  """lcx.tools.longrope hands its command line to lcx.tools.longrope_cli before its own imports: the
  flags, the run's declared fields and the search's own checks run with no jax loaded."""
  config_lib.save(tiny_config(pos), str(tmp_path))  # a run's config.json
  error = refused_before_jax([f"--workdir={tmp_path}", *args], module="lcx.tools.longrope")
  assert error.startswith("error: " + message), error


# --- On a tiny trained run ---

SMALL = {
  "target_len": 128,
  "documents": 4,
  "population": 8,
  "parents": 4,
  "mutations": 3,
  "crossovers": 3,
  "generations": 3,
  "seed": 3,
}


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("rope"))
  train.train(tiny_config("rope", steps=60, checkpoint_every=1000), workdir)
  return workdir


def _search_config(workdir, **changes):
  config = run_config.run_config(workdir)
  for key, value in {**SMALL, **changes}.items():
    config.eval.longrope[key] = value
  return config


def _comparable(state):
  """The state without wall-clock times."""
  state = json.loads(json.dumps(state))
  state.pop("elapsed_seconds")
  for entry in state["log"]:
    entry.pop("seconds")
  return state


@pytest.mark.slow
def test_search_keeps_its_best_scores_it_as_a_variant_and_resumes_exactly(
  rope_run, capsys, monkeypatch
):
  workdir = rope_run
  state = longrope.search(_search_config(workdir), workdir)
  out_dir = os.path.join(workdir, "longrope")
  assert state["generation"] == 3 and state["finished"]
  assert [e["generation"] for e in state["log"]] == [0, 1, 2, 3]
  assert state["evaluated"] == len(state["history"]) <= 8 + 3 * 6
  best = state["best"]["perplexity"]
  seeds = {name: c["perplexity"] for name, c in state["seeds"].items()}
  assert sorted(seeds) == ["ntk", "pi", "yarn"] and all(math.isfinite(p) for p in seeds.values())
  assert best <= min(seeds.values())  # elitism: a seed is never lost
  log_best = [e["best"] for e in state["log"]]
  assert log_best == sorted(log_best, reverse=True) and log_best[-1] == best
  lam = np.asarray(state["best"]["long_factor"])
  assert np.all(np.diff(lam) >= 0) and lam.min() >= 1 and lam.max() <= 1.25 * 4
  assert "| searched" in capsys.readouterr().out

  # factors.json is a longrope variant scoring the recorded fitness on the same documents.
  factors = json.load(open(os.path.join(out_dir, "factors.json")))
  assert factors == {
    "rope_type": "longrope",
    "factor": 4.0,
    "original_max_position_embeddings": 32,
    "short_factor": [1.0] * 8,
    "long_factor": state["best"]["long_factor"],
    "n_hat": state["best"]["n_hat"],
  }
  # It is fitted on the search split, which no evaluation scores (the split is recorded).
  assert len(state["source"]["commit"]) == 40 and isinstance(state["source"]["dirty"], bool)
  fitted = state["fitness_documents"]
  assert fitted["split"] == "search" and len(fitted["ids"]) == 4
  spec = f"longrope@{out_dir}/factors.json"
  prepared = prepare.prepare(_search_config(workdir))
  _, params, _ = prepare.restore(prepared, workdir)
  changes = longrope.variants.overrides(spec, prepared.config.eval.named_variants)
  variant = longrope.variants.apply(prepared.config, changes)
  runner = longrope.Runner(prepare.for_variant(prepared, variant), params)
  windows = longrope.samples.cut(
    longrope._long_documents(prepared.config, 128, prepared.tokenizer), 128, "windows"
  )
  assert sorted(set(windows.doc_NxT.ravel().tolist())) == fitted["ids"]
  nll = runner.nll(
    windows.inputs_NxT, windows.targets_NxT, windows.positions_NxT, windows.segments_NxT
  )
  assert math.exp(nll.mean()) == pytest.approx(best, rel=1e-5)
  config = run_config.run_config(workdir)
  config.eval.variants = f"none,{spec}"
  config.eval.documents, config.eval.lengths = "long", (128,)
  config.eval.num_tokens, config.eval.sample_seed = 4 * 128, SMALL["seed"]
  results = evaluate.evaluate(config, workdir)
  scored = results[spec + ".windows-long"]["lengths"]["128"]  # long documents: named so
  assert scored["documents"] == 4 and scored["tokens"] == 4 * 128
  assert not set(scored["per_document"]["ids"]) & set(fitted["ids"])
  assert scored["perplexity"] != pytest.approx(best, rel=1e-5)

  # A finished search prints its result and scores nothing more. It checks its config and the
  # searched factors' variant config; the command line, having run check_declared on its config
  # before jax, has it check only the code's part of it.
  calls = collections.Counter()
  for name in ("check_declared", "check_code"):
    original = getattr(config_lib, name)
    monkeypatch.setattr(config_lib, name, lambda c, n=name, f=original: (calls.update([n]), f(c)))
  again = longrope.search(_search_config(workdir), workdir)
  assert _comparable(again) == _comparable(state)
  assert calls == {"check_declared": 2, "check_code": 2}
  calls.clear()
  longrope.main(_search_config(workdir), workdir)
  assert calls == {"check_declared": 1, "check_code": 2}  # the variant's

  # Interrupted after one generation, then continued: the same final state.
  shutil.move(out_dir, out_dir + "_full")
  first = longrope.search(_search_config(workdir, generations=1), workdir)
  assert first["generation"] == 1
  resumed = longrope.search(_search_config(workdir), workdir)
  assert _comparable(resumed) == _comparable(state)
  assert (
    open(os.path.join(out_dir, "factors.json")).read()
    == open(os.path.join(out_dir + "_full", "factors.json")).read()
  )

  # Other settings than the saved search's are refused, naming the field.
  with pytest.raises(
    ValueError,
    match=r"state.json holds a search with eval.longrope.seed=3, "
    r"now 4: set it back",
  ):
    longrope.search(_search_config(workdir, seed=4), workdir)


@pytest.mark.slow
def test_one_compiled_program_scores_every_candidate(rope_run):
  """The candidates are inputs, not constants: new factors and n_hat compile nothing new, and
  two candidates in one batch score as each alone."""
  config = _search_config(rope_run)
  prepared = prepare.prepare(config)
  _, params, _ = prepare.restore(prepared, rope_run)
  sequences = longrope._long_documents(prepared.config, 128, prepared.tokenizer)
  windows = longrope.samples.cut(sequences, 128, "windows")
  variant = longrope.variants.apply(
    prepared.config,
    {
      longrope.variants.SCALING: {
        "rope_type": "longrope",
        "factor": 4.0,
        "short_factor": [1.0] * 8,
        "long_factor": [4.0] * 8,
      }
    },
  )
  runner = longrope.Runner(prepare.for_variant(prepared, variant), params)
  scorer = longrope.Scorer(runner, windows)
  a = longrope.Candidate((1.0,) * 4 + (4.0,) * 4, 8, "mutation")
  b = longrope.Candidate((2.0,) * 8, 0, "mutation")
  both = scorer.perplexities([a, b])
  alone = scorer.perplexities([a]) + scorer.perplexities([b])
  assert both == pytest.approx(alone, rel=1e-6) and both[0] != pytest.approx(both[1])
  assert scorer.program._cache_size() == 1


@pytest.mark.slow
def test_command_line_search_and_its_errors(rope_run, tmp_path):
  flags = [f"--config.eval.longrope.{k}={v}" for k, v in {**SMALL, "generations": 1}.items()]
  workdir = str(tmp_path / "run")
  shutil.copytree(rope_run, workdir, ignore=shutil.ignore_patterns("longrope*", "eval"))
  proc = run_lcx([f"--workdir={workdir}", *flags], module="lcx.tools.longrope", timeout=300)
  assert "longrope generation 1/1: best perplexity" in proc.stderr
  assert "| searched" in proc.stdout and os.path.exists(f"{workdir}/longrope/factors.json")
  for args, message in [
    ([f"--workdir={workdir}"], "eval.longrope.target_len=0 must be above the training length"),
    (
      [f"--workdir={workdir}", *flags, "--config.model.d_model=32"],
      "model.d_model=32 differs from the checkpoint's 64: it is a trained field",
    ),
    ([f"--workdir={tmp_path}/none"], f"--workdir={tmp_path}/none holds no run"),
    (
      [f"--workdir={workdir}", "--config.eval.longrope.populaton=3"],
      "eval.longrope.populaton is not a known field; allowed: crossover_rate, ",
    ),
  ]:
    proc = run_lcx(args, module="lcx.tools.longrope", check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: " + message), proc.stderr[-500:]
