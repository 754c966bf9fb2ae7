"""lcx.tools.bench.device_check: the full plan has every row of issue 26 in the order run, a failed
row stays a row, the deadline stops starting points, and the tiny plan runs end to end on CPU
(slow)."""

import json
import pathlib
import subprocess
import types

import pytest

from lcx.model import kernels, positions
from lcx.tools.bench import device_check, options
from tests.helpers import bench_options, run_lcx, schemes_with


def accelerator_points():
  """The core plan's points, then the extra plan's: every row of issue 26 over two calls."""
  return [
    p for name in ("core", "extra") for p in device_check.plan_points(device_check.PLANS[name])
  ]


def test_device_check_core_and_extra_plans_have_every_row_of_issue_26():
  points = accelerator_points()
  assert points[0] == {"what": "peak", "n": 8192, "chain": 16, "rounds": 10}
  correct = [p for p in points if p["what"] == "correct"]
  assert [case for p in correct for case in p["cases"]] == [
    ("alibi", "none", "sliding_window"),  # the core's one case
    *[c for c in device_check.CORRECT_CASES if c != ("alibi", "none", "sliding_window")],
  ]  # every case on the device, one small point each
  assert {p["seq_len"] for p in correct} == {256}
  train = [
    (p["scheme"], p["size"], p["impl"], p.get("tuned", False), p.get("remat", "none"))
    for p in points
    if p["what"] == "train" and (p["batch"], p["seq_len"]) == (64, 1024)
  ]
  assert train == [
    ("rope", "large", "pallas", False, "none"),
    ("rope", "large", "xla", False, "none"),
    ("rope", "default", "pallas", False, "none"),
    ("rope", "large", "pallas", True, "none"),  # the CPU-tuned backward passes, A/B
    ("rope", "large", "pallas", False, "matmuls"),  # the memory target: matmuls kept
    ("rope", "large", "xla", False, "matmuls"),
    ("rope", "large", "pallas", False, "block"),  # ... and every block recomputed
    ("cope", "default", "auto", False, "block"),  # CoPE's XLA step, out of memory without
  ]
  evals = [(p["length"], p["impl"], p.get("block_size")) for p in points if p["what"] == "eval"]
  assert evals == [
    (262144, "pallas", None),
    (1048576, "pallas", None),
    (65536, "pallas", None),
    *[(262144, "pallas", block) for block in (128, 128, 64)],  # the tune points
    (65536, "xla", None),
    (262144, "xla", None),
  ]
  assert {p["size"] for p in points if p["what"] == "eval"} == {"default"}  # all one model
  (schemes,) = [p for p in points if p["what"] == "schemes"]
  others = [s for s in positions.SCHEMES if s not in ("nope", "cope")]
  assert schemes["schemes"] == ["nope", *others]  # CoPE: the remat train row
  (peer,) = [p for p in points if p["what"] == "peer"]
  assert (peer["size"], peer["batch"], peer["seq_len"]) == ("large", 64, 1024)
  assert {"nope", "rope", "alibi", "t5"} <= set(peer["schemes"])
  failed = {
    "what": "train",
    "scheme": "rope",
    "size": "large",
    "batch": 64,
    "seq_len": 1024,
    "impl": "xla",
  }
  table = device_check.table({"rows": [{**failed, "error": "exit 1: RESOURCE_EXHAUSTED"}]})
  assert "error: exit 1: RESOURCE_EXHAUSTED" in table  # a failed row stays a row


def test_scheme_and_peer_points_run_t5_on_the_kernel_on_a_gpu():
  """impl=auto as the core plan's `schemes` and `peer` points configure it, resolved for a GPU:
  the Pallas kernel for T5 (its blocker dropped), XLA for FIRE (its bias MLP does not lower)
  and Sandwich (measured slower in the kernel) among the bias schemes."""
  points = accelerator_points()
  (schemes,) = [p for p in points if p["what"] == "schemes"]
  (peer,) = [p for p in points if p["what"] == "peer"]

  def resolved(point, scheme):
    config = device_check._config(scheme, point["size"], point["batch"], point["seq_len"], "auto")
    return kernels.resolve_impl(config.model, "gpu")

  assert resolved(peer, "t5") == "pallas"
  got = {s: resolved(schemes, s) for s in schemes["schemes"] if s in schemes_with("bias")}
  assert got == {s: "xla" if s in ("fire", "sandwich") else "pallas" for s in schemes_with("bias")}


def test_peak_point_is_the_looped_probe_median_of_rounds_beside_the_datasheet(monkeypatch):
  made = []
  probe = types.SimpleNamespace(step=None)
  monkeypatch.setattr(device_check.peak, "xla_matmul", lambda *a: made.append(a) or probe)
  times = iter([5.0, 1.0, 2.0] * 2)  # per dtype: a slow first round, then 1 and 2 s
  monkeypatch.setattr(device_check, "timed", lambda program: next(times))
  point = {"what": "peak", "n": 1024, "chain": 16, "rounds": 3}
  got = device_check._peak(point)
  assert made == [("bfloat16", 1024, 16), ("float32", 1024, 16)]
  assert got["bfloat16_flops"] == got["float32_flops"] == 2 * 1024**3 * 16 / 2.0  # the median
  assert got["datasheet_bf16_flops"] is None  # this CPU: mfu.py has no datasheet peak


def test_core_plan_is_estimated_to_fit_8_minutes_and_plan_prints_every_point():
  seconds = device_check.plan_seconds("core")
  assert sum(seconds) <= device_check.BUDGET_S == 480
  assert all(s > device_check.PROCESS_S for s in seconds)
  measured = device_check.measured_seconds()
  (peer,) = [p for p in device_check.plan_points(device_check.PLANS["core"]) if p["what"] == "peer"]
  # gpu_2026-11-26/device_check_2.json: the 4-scheme peer point took 85.4 s
  assert device_check.estimate(peer, measured) == pytest.approx(
    (85.42454107900005 + device_check.PROCESS_S, "measured")
  )
  proc = run_lcx(
    ["--device_check", "--plan", "--device_plan=core"], module="lcx.tools.bench", timeout=120
  )
  lines = proc.stdout.strip().splitlines()
  points = device_check.plan_points(device_check.PLANS["core"])
  assert len(lines) == len(points) + 2
  for line, point, s in zip(lines[1:], points, seconds):
    assert line.endswith(json.dumps(point)) and line.startswith(f"{s:6.0f} s")
  assert lines[-1] == f"{sum(seconds):6.0f} s  total (budget 480 s)"


def test_plan_flags_need_the_device_check_and_a_known_plan():
  for flag, value, allowed in (
    ("--plan", True, "only with --device_check"),
    ("--device_plan", "core", "only with --device_check"),
  ):
    with pytest.raises(ValueError, match=rf"^{flag}={value!r} is not allowed; allowed: {allowed}$"):
      bench_options(f"{flag}={value}" if flag == "--device_plan" else flag)
  with pytest.raises(ValueError, match=r"^--device_plan='full' is not allowed; allowed: core, "):
    bench_options("--device_check", "--device_plan=full")
  assert set(options.DEVICE_PLANS) == set(device_check.PLANS)


def test_points_run_with_a_persistent_compilation_cache(monkeypatch):
  seen = {}

  def fake_run(cmd, env, **kwargs):
    seen.update(env)
    return subprocess.CompletedProcess(cmd, 0, 'DEVICE_POINT {"what": "peak"}\n', "")

  monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
  monkeypatch.setattr(device_check.subprocess, "run", fake_run)
  assert device_check._in_process({"what": "peak"}, 10) == {"what": "peak"}
  assert seen["JAX_COMPILATION_CACHE_DIR"] == device_check.COMPILATION_CACHE
  monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/elsewhere")
  device_check._in_process({"what": "peak"}, 10)
  assert seen["JAX_COMPILATION_CACHE_DIR"] == "/elsewhere"  # the user's wins


def test_no_point_starts_after_the_deadline(tmp_path, monkeypatch):
  ran = []

  def fake(point, timeout_s):
    ran.append(timeout_s)
    return {**point, "error": "measured"}

  monkeypatch.setattr(device_check, "_in_process", fake)
  clock = iter(range(0, 1000, 30))  # each call of the clock: 30 s later
  monkeypatch.setattr(device_check.time, "perf_counter", lambda: next(clock))
  results = device_check.run(str(tmp_path / "d.json"), quick=True, deadline_s=100)
  assert ran == [130, 100, 70]  # started at 30, 60, 90 s; each stopped 60 s after the deadline
  late = results["rows"][3:]
  assert late and all("past the check's deadline (100 s)" in r["error"] for r in late)
  written = json.loads((tmp_path / "d.json").read_text())["rows"]
  assert written == json.loads(json.dumps(results["rows"]))  # every row, the late ones too


@pytest.mark.slow
def test_device_check_runs_every_point_of_the_tiny_plan_on_cpu(tmp_path, monkeypatch):
  """`run` on CPU: the tiny plan, JSON and table written. Here each point runs in this process
  (`run_point`); the command-line test below runs one through a process of its own."""
  monkeypatch.setattr(kernels.flash, "TRITON", kernels.flash.TRITON)  # a tune point sets it
  monkeypatch.setattr(device_check, "_in_process", lambda point, _: device_check.run_point(point))
  out = tmp_path / "device_check.json"
  device_check.run(str(out))
  rows = json.loads(out.read_text())["rows"]
  assert [r["what"] for r in rows] == (
    ["peak", "train", "train", "eval", "scheme", "scheme", "peer", "eval", "correct", "correct"]
    + ["eval"]
  )
  peers = [r for r in rows if r["what"] == "peer"]
  for row in rows:
    if row in peers and "error" in row:  # the bench extra (torch, x-transformers) is optional
      assert row["error"].startswith("not importable")
      continue
    assert "error" not in row, row
    assert row["backend"] == "cpu" and row["jax"] and row["device"] and row["peak_gb"] > 0
  for row in [r for r in rows if r["what"] == "correct"]:  # interpret mode: exact f32
    assert row["out_rel_err"] < 1e-5 and row["grad_rel_err"] < 1e-5, row
  peak_bf16 = rows[0]["bfloat16_flops"]
  assert rows[0]["datasheet_bf16_flops"] is None and (rows[0]["chain"], rows[0]["rounds"]) == (2, 3)
  train = rows[1:3]
  for row, impl in zip(train, ("pallas", "xla")):
    assert row["impl"] == impl and row["tokens_per_s"] == pytest.approx(64 / row["step_s"])
    assert row["peak_datasheet"] is None and "mfu_palm_datasheet" not in row  # a CPU has none
    for count, key in (("palm", "flops_per_token"), ("causal", "flops_per_token_causal")):
      assert row[f"mfu_{count}_measured"] == pytest.approx(
        row[key] * row["tokens_per_s"] / peak_bf16
      )
  md = out.with_suffix(".md").read_text()
  assert "no datasheet peak; MFU" in md and "2 chained per call, median of 3" in md
  schemes = [r for r in rows if r["what"] == "scheme"]
  assert [r["scheme"] for r in schemes] == ["nope", "alibi"]
  assert schemes[0]["vs_nope"] == 1.0 and all(r["impl_resolved"] == "xla" for r in schemes)
  for row in peers:
    assert "error" in row or row["lcx_speedup"] > 0
  evals = [r for r in rows if r["what"] == "eval"]
  assert [r["impl"] for r in evals] == ["pallas", "pallas", "xla"] and evals[0]["forward_s"] > 0
  assert (
    evals[1]["block_size"] == 16
    and "block 16, 8 warps, 2 stages" in out.with_suffix(".md").read_text()
  )  # the tune point: the kernel at another block and Triton settings
  table = out.with_suffix(".md").read_text().strip().splitlines()
  assert len(table) == 2 + len(rows) and all("cpu" in line for line in table[2:])


def test_the_command_line_runs_a_point_in_its_own_process_and_stops_at_the_deadline(tmp_path):
  """`--device_check --deadline_s=0.5`: the first point (the peak) starts at once in a process
  of its own (`--device_point`), which outlasts the deadline, so every later point is a row
  saying so; the JSON and the printed table hold them all."""
  out = tmp_path / "device_check.json"
  flags = ["--device_check", f"--out={out}", "--deadline_s=0.5"]
  proc = run_lcx(flags, module="lcx.tools.bench", timeout=300)
  results = json.loads(out.read_text())
  peak, *late = results["rows"]
  assert peak["what"] == "peak" and "error" not in peak, peak
  assert peak["backend"] == "cpu" and peak["bfloat16_flops"] > 0 and peak["peak_gb"] > 0
  assert late and all(r["error"] == "not run: past the check's deadline (0 s)" for r in late)
  assert len(late) + 1 == len(device_check.plan_points(device_check.PLANS["tiny"]))
  assert device_check.table(results) in proc.stdout


COMMITTED = sorted(
  (pathlib.Path(__file__).resolve().parents[3] / "experiments" / "bench").glob(
    "*/device_check*.json"
  )
)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_device_check_tables_regenerate_from_their_json(path):
  """Each committed table is `table` over its committed JSON, byte for byte."""
  results = json.loads(path.read_text())
  assert device_check.table(results) + "\n" == path.with_suffix(".md").read_text()
