"""lcx.bench: the FLOPs formula by hand, ratio and interleaving logic, flags, the evaluator's
forward at an eval point, and one tiny end-to-end run (slow) whose JSON and tables have every
section. No timing thresholds."""

import importlib.util
import json

import numpy as np
import pytest
from absl import flags

from lcx import bench, config as config_lib, positions
from lcx.bench import device_check, long_eval, options, throughput, timing, workload
from lcx.evaluate.runner import Runner
from tests.helpers import run_lcx, schemes_with


def test_flops_match_a_hand_count_for_the_tiny_model():
  m = workload.bench_config("rope", "tiny", 2, 32).model  # d=64, 2 layers, 4 heads x 16, mlp 256
  assert m.vocab_size == 259
  per_layer = 4 * 64 * 64 + 2 * 64 * 256  # q, k, v, o; MLP in and out
  assert throughput.matmul_params(m) == 2 * per_layer + 64 * 259
  attention = 12 * 2 * 32 * 4 * 16  # QK^T and PV, forward + backward, full T x T
  assert throughput.train_flops_per_token(m, 32) == 6 * (2 * per_layer + 64 * 259) + attention


def test_flops_count_grouped_query_attention_and_swiglu():
  m = workload.bench_config("rope", "tiny", 2, 32).model
  m.num_kv_heads, m.mlp = 1, "swiglu"
  per_layer = 2 * 64 * 64 + 2 * 64 * 16 + 3 * 64 * 256  # q, o; one k, v head; gate, in, out
  assert throughput.matmul_params(m) == 2 * per_layer + 64 * 259


def test_mfu_and_ratio():
  assert throughput.mfu(1e6, 100.0, 2e8) == pytest.approx(0.5)
  assert timing.ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0]) == 2.0  # median of 2, 2, 3


def test_median_ci_is_the_textbook_order_statistic_interval():
  # n = 100: the 40th and 61st values (96.5%); n = 15: the 4th and 12th (96.5%).
  assert timing.median_ci(list(range(1, 101))[::-1])[:2] == (40, 61)
  low, high, coverage = timing.median_ci(list(range(1, 16)))
  assert (low, high) == (4, 12) and coverage == pytest.approx(1 - 2 * 576 / 2**15)
  # Too few values for 95%: the extremes, with their coverage, 1 - 2 / 2^5.
  assert timing.median_ci([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 5.0, 1 - 2 / 32)
  assert timing.median_ci([1.0, 2.0, 3.0, 4.0, 5.0], level=0.9) == (1.0, 5.0, 1 - 2 / 32)
  assert timing.ratio_ci([2.0] * 7, [1.0] * 7) == (2.0, 2.0, 1 - 2 / 128)
  with pytest.raises(ValueError, match="no values"):
    timing.median_ci([])


def test_median_ci_covers_the_median_at_its_stated_rate():
  """Over many samples of a skewed distribution, the interval holds the true median at least
  as often as it says (it is exact for continuous data)."""
  rng = np.random.default_rng(0)
  true_median = np.log(2.0)  # of the exponential distribution
  for n in (7, 15, 40):
    hits, trials = 0, 2000
    for _ in range(trials):
      low, high, coverage = timing.median_ci(list(rng.exponential(size=n)))
      hits += low <= true_median <= high
    assert abs(hits / trials - coverage) < 0.02, (n, hits / trials, coverage)


def test_interleaved_rotates_the_order_and_times_all_but_a_warm_up_step(monkeypatch):
  """Each round: every program once untimed, then `steps` timed; the order rotates. A step's
  "time" here is its index among its program's calls, so the warm-up's index 0 never counts."""
  calls = []
  programs = {n: timing.Program(step=lambda n=n: calls.append(n), compile_s=0.0) for n in "abc"}
  monkeypatch.setattr(timing, "timed", lambda fn: (fn(), calls.count(calls[-1]) - 1)[1])
  rounds = timing.interleaved(programs, rounds=3, steps=2)
  assert calls == list("aaabbbcccbbbcccaaacccaaabbb")
  assert rounds == {"a": [1.5, 4.5, 7.5], "b": [1.5, 4.5, 7.5], "c": [1.5, 4.5, 7.5]}


def test_dense_eval_memory_estimate():
  m = workload.bench_config("rope", "default", 16, 256).model  # 4 heads
  assert long_eval.dense_eval_bytes(m, 32768) == 4 * 4 * 4 * 32768**2  # 64 GiB: skipped


def _options(*argv):
  fv = flags.FlagValues()
  options.define_flags(fv)
  fv(["bench", *argv])
  return options.from_flags(fv)


def test_flags_quick_full_and_overrides():
  full, quick = _options(), _options("--quick")
  assert full.sections == list(bench.SECTIONS) and full.eval_lengths[-1] == 65536
  assert full.schemes == list(positions.SCHEMES)  # every registered scheme, none typed here
  assert len(quick.schemes) < len(full.schemes) and quick.rounds < full.rounds
  opts = _options(
    "--quick", "--schemes=nope,fire", "--rounds=7", "--sections=eval", "--peak_sizes=64,128"
  )
  assert (opts.schemes, opts.rounds, opts.sections, opts.peak_sizes) == (
    ["nope", "fire"],
    7,
    ["eval"],
    [64, 128],
  )
  with pytest.raises(
    ValueError,
    match=r"^--sections='peak,speed' is not allowed; allowed: "
    r"comma lists of peak, train, positions, eval, peers$",
  ):
    _options("--sections=peak,speed")
  with pytest.raises(
    ValueError,
    match=r"^--eval_lengths='1k' is not allowed; allowed: comma "
    r"lists of integers$",
  ):
    _options("--eval_lengths=1k")


def test_options_flag_builds_rows_of_the_option_on_its_scheme():
  assert _options().options == list(workload.MODEL_OPTIONS)
  assert _options("--quick").options == [
    "stick_breaking",
    "scale_invariant",
    "llama4",
    "gate_elementwise",
    "resonance",
  ]
  opts = _options("--options=")
  assert opts.options == [] and workload.option_rows(opts.options) == []
  assert workload.option_rows(["stick_breaking", "qk_norm"]) == [
    "nope+stick_breaking",
    "rope+qk_norm",
  ]
  config = workload.options_config(opts, "nope+stick_breaking", "tiny")
  assert (config.model.position.name, config.model.attention.kind) == ("nope", "stick_breaking")
  config = workload.options_config(opts, "rope+ssmax", "tiny")
  assert (config.model.position.name, config.model.attention.temperature) == ("rope", "ssmax")
  assert workload.options_config(opts, "rope+nope_every", "tiny").model.nope_every == 2
  config = workload.options_config(opts, "p_rope+scale_invariant", "tiny")
  assert (config.model.position.name, config.model.attention.temperature) == (
    "p_rope",
    "scale_invariant",
  )
  llama4 = workload.options_config(opts, "rope+llama4", "tiny").model
  assert (llama4.attention.temperature, llama4.nope_every) == ("llama4", 2)
  for gate in ("elementwise", "headwise"):
    assert workload.options_config(opts, f"rope+gate_{gate}", "tiny").model.attention.gate == gate
  scaling = workload.options_config(opts, "rope+resonance", "tiny").model.position.scaling
  assert (scaling.rope_type, scaling.resonance) == ("yarn", True)
  assert workload.options_config(opts, "cope+cope_shared", "tiny").model.position.shared
  assert not workload.options_config(opts, "cope", "tiny").model.position.shared  # per layer
  sb = workload.options_config(opts, "nope+stick_breaking", "tiny").model.attention
  assert sb.remainder_bias  # the reference's remainder vector, the default
  plain = workload.options_config(opts, "nope", "tiny").model
  assert (plain.attention.kind, plain.qk_norm, plain.nope_every) == ("softmax", False, 0)
  with pytest.raises(
    ValueError,
    match=r"^--options='softmax' is not allowed; allowed: comma lists of stick_breaking, qk_norm",
  ):
    _options("--options=softmax")


def test_every_option_row_sets_a_valid_config_that_differs_from_its_scheme():
  opts = _options()
  for row in workload.option_rows(list(workload.MODEL_OPTIONS)):
    scheme = row.partition("+")[0]
    config = workload.options_config(opts, row, "tiny")
    assert config.model.to_dict() != workload.options_config(opts, scheme, "tiny").model.to_dict()
    config_lib.validate(config)  # ValueError naming the field if an option sets a wrong one


@pytest.mark.slow
def test_every_option_row_builds_and_takes_a_train_step():
  """What the positions section runs for each row (`buildable`), on a tiny plan: every option
  compiles, steps, and gives a finite loss with a nonzero gradient."""
  opts = _options("--model_size=tiny", "--batch_size=2", "--seq_len=16")
  rows = workload.option_rows(list(workload.MODEL_OPTIONS))
  programs, failed = workload.buildable(opts, rows)
  assert failed == {} and list(programs) == rows
  for row, program in programs.items():
    metrics = program.step()
    assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0, row


@pytest.mark.parametrize("scheme", schemes_with("from_input"))
def test_an_input_hook_scheme_builds_and_steps_in_the_positions_section(scheme):
  """FoX's gates from hidden states through the positions section's own train step (`buildable`
  turns a failure into a skipped row, so this is where one would show)."""
  opts = _options("--model_size=tiny", "--batch_size=2", "--seq_len=16")
  assert scheme in opts.schemes  # timed by default
  programs, failed = workload.buildable(opts, [scheme])
  assert failed == {} and list(programs) == [scheme]
  metrics = programs[scheme].step()
  assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0


def test_unregistered_schemes_are_skipped_with_a_note(capsys):
  have, missing = workload.registered(["nope", "no_such_scheme"])
  assert (have, missing) == (["nope"], ["no_such_scheme"])
  assert "no_such_scheme" in capsys.readouterr().out


@pytest.mark.parametrize("kernel", ["dense", "chunked"])
def test_eval_point_scores_with_the_evaluators_runner(kernel):
  """The eval point's forward is the evaluator's Runner, on the asked kernel, one row per call."""
  runner = long_eval.eval_runner("rope", "tiny", 16, kernel, 48)
  assert isinstance(runner, Runner) and runner.kernel(48) == kernel
  batch = workload.synthetic_batch(1, 48, runner.config.model.vocab_size)
  nll = runner.nll(batch["inputs"], batch["targets"], batch["positions"], batch["segment_ids"])
  assert nll.shape == (1, 48) and np.all(nll > 0)
  other = long_eval.eval_runner("rope", "tiny", 16, {"dense": "chunked"}.get(kernel, "dense"), 48)
  np.testing.assert_allclose(
    other.nll(batch["inputs"], batch["targets"], batch["positions"], batch["segment_ids"]),
    nll,
    rtol=1e-4,
  )  # same model (seed 0), the other kernel: the same losses


@pytest.mark.slow
def test_tiny_end_to_end_run_writes_every_section(tmp_path):
  out = tmp_path / "bench.json"
  proc = run_lcx(
    [
      "--model_size=tiny",
      "--sizes=tiny",
      "--batch_size=2",
      "--seq_len=16",
      "--schemes=nope,rope",
      "--options=stick_breaking,qk_norm",
      "--rounds=2",
      "--steps=1",
      "--train_steps=2",
      "--peak_sizes=64",
      "--eval_lengths=32",
      "--eval_repeats=1",
      "--max_dense_gb=1e-9",
      f"--out={out}",
    ],
    module="lcx.bench",
  )
  results = json.loads(out.read_text())
  s = results["sections"]
  assert set(s) == set(bench.SECTIONS)
  assert set(s["peak"]["xla"]) == {"float32", "bfloat16"}
  assert s["peak"]["roofline_float32"] >= s["peak"]["xla"]["float32"]["flops"] > 0
  train = s["train"]["tiny"]
  assert train["tokens_per_s"] == pytest.approx(2 * 16 / train["step_s"])
  assert train["mfu"] == pytest.approx(
    train["flops_per_token"] * train["tokens_per_s"] / s["peak"]["roofline_float32"]
  )
  assert s["positions"]["schemes"]["nope"]["ratio_to_nope"] == 1.0
  assert set(s["positions"]["schemes"]) == {"nope", "rope", "nope+stick_breaking", "rope+qk_norm"}
  qk_norm = s["positions"]["schemes"]["rope+qk_norm"]
  assert qk_norm["ratio_to_scheme"] > 0 and "x scheme" in proc.stdout
  low, high, coverage = s["positions"]["schemes"]["rope"]["ratio_to_nope_ci"]
  assert low <= s["positions"]["schemes"]["rope"]["ratio_to_nope"] <= high and 0 < coverage < 1
  assert s["positions"]["skipped"] == {}
  rope = s["peers"]["schemes"]["rope"]
  assert rope["lcx"]["step_s"] > 0
  for peer in ("plain_nnx", "x_transformers"):
    if peer == "x_transformers" and not importlib.util.find_spec("x_transformers"):
      assert rope[peer] == {
        "unavailable": "not importable: x_transformers (pip install torch==2.13.0 x-transformers)"
      }
      continue
    assert rope[peer]["lcx_speedup"] == pytest.approx(
      timing.ratio(rope[peer]["rounds_s"], rope["lcx"]["rounds_s"])
    )
  dense, chunked = s["eval"]["points"]
  assert dense["skipped"].startswith("would need")  # --max_dense_gb tiny: computed, not run
  assert chunked["forward_s"] > 0 and chunked["peak_gb"] > 0
  assert chunked["programs_compiled"] == 1  # the same length again: no recompilation
  for section in bench.SECTIONS.values():
    assert section.TITLE in proc.stdout
  assert "MFU = " + bench.MFU_FORMULA in proc.stdout
  assert "| scheme" in proc.stdout and f"wrote {out}" in proc.stdout  # report's markdown tables


@pytest.mark.slow
def test_cli_errors_are_one_line():
  proc = run_lcx(["--sections=peak,speed"], module="lcx.bench", check=False, timeout=120)
  assert proc.returncode == 2 and proc.stdout == ""
  assert proc.stderr == (
    "error: --sections='peak,speed' is not allowed; allowed: "
    "comma lists of peak, train, positions, eval, peers\n"
  )


def test_long_eval_through_the_pallas_kernel_equals_xla():
  """The evaluator's forward with impl=pallas (interpret mode here) gives the chunked XLA
  kernel's losses: the device check's eval rows compare the same computation."""
  batch = workload.synthetic_batch(1, 40, 259)
  rows = (batch["inputs"], batch["targets"], batch["positions"], batch["segment_ids"])
  xla = long_eval.eval_runner("alibi", "tiny", 16, "chunked", 40, "xla").nll(*rows)
  pallas = long_eval.eval_runner("alibi", "tiny", 16, "chunked", 40, "pallas").nll(*rows)
  np.testing.assert_allclose(pallas, xla, rtol=1e-4)


def test_device_check_full_plan_has_every_row_of_issue_26():
  points = device_check.plan_points(device_check.PLANS["full"])
  train = {(p["size"], p["batch"], p["seq_len"], p["impl"]) for p in points if p["what"] == "train"}
  assert train == {(s, 64, 1024, i) for s in ("default", "large") for i in ("xla", "pallas")}
  evals = {(p["length"], p["impl"]) for p in points if p["what"] == "eval"}
  assert evals == {(n, i) for n in (65536, 262144) for i in ("xla", "pallas")}
  assert [p["scheme"] for p in points if p["what"] == "scheme"] == [
    "nope",
    *[s for s in positions.SCHEMES if s != "nope"],
  ]  # every registered scheme, NoPE (the denominator) first
  failed = {"what": "train", "size": "large", "batch": 64, "seq_len": 1024, "impl": "xla"}
  table = device_check.table({"rows": [{**failed, "error": "exit 1: RESOURCE_EXHAUSTED"}]})
  assert "error: exit 1: RESOURCE_EXHAUSTED" in table  # a failed row stays a row


@pytest.mark.slow
def test_device_check_runs_end_to_end_on_cpu(tmp_path):
  """`--device_check` on CPU: the tiny plan, one process per row, JSON and table written."""
  out = tmp_path / "device_check.json"
  run_lcx(["--device_check", f"--out={out}"], module="lcx.bench", timeout=900)
  rows = json.loads(out.read_text())["rows"]
  assert [r["what"] for r in rows] == ["peak", "train", "train"] + ["scheme"] * 3 + ["eval"] * 2
  for row in rows:
    assert "error" not in row, row
    assert row["backend"] == "cpu" and row["jax"] and row["device"] and row["peak_gb"] > 0
  peak_bf16 = rows[0]["bfloat16_flops"]
  for row, impl in zip(rows[1:3], ("xla", "pallas")):
    assert row["impl"] == impl and row["tokens_per_s"] == pytest.approx(64 / row["step_s"])
    assert row["mfu_bf16"] == pytest.approx(
      row["flops_per_token"] * row["tokens_per_s"] / peak_bf16
    )
  assert [(r["scheme"], r["impl"]) for r in rows[3:6]] == [
    ("nope", "auto"),
    ("rope", "auto"),
    ("alibi", "auto"),
  ]
  assert rows[3]["vs_nope"] == 1.0
  assert rows[5]["vs_nope"] == pytest.approx(rows[5]["step_s"] / rows[3]["step_s"])
  assert [r["impl"] for r in rows[6:]] == ["xla", "pallas"] and rows[6]["forward_s"] > 0
  table = out.with_suffix(".md").read_text().strip().splitlines()
  assert len(table) == 2 + len(rows) and all("cpu" in line for line in table[2:])
