"""lcx.tools.bench.peak: what the matmul probes run per backend (a CPU: float32 only, at most
2048, so the section a train or peers run needs costs under a minute), and the looped probe."""

import jax
import numpy as np

from lcx.tools.bench import peak
from tests.helpers import bench_options


def test_a_cpu_runs_float32_only_up_to_2048_and_says_what_it_left_out():
  points, skipped = peak.plan(bench_options().peak_sizes, "cpu")  # the default 1024, 2048, 4096
  assert points == [("float32", 1024), ("float32", 2048)]
  assert skipped == {"bfloat16": "no native bfloat16 matmul on cpu", "n=4096": "above 2048 on cpu"}
  assert peak.plan(bench_options("--quick").peak_sizes, "cpu")[0] == [("float32", 2048)]
  assert peak.plan([4096, 8192], "cpu")[0] == [("float32", 2048)]  # none left: the largest
  assert peak.limits("cpu").chain == 2


def test_an_accelerator_runs_every_dtype_and_size():
  for backend in ("gpu", "tpu"):
    points, skipped = peak.plan([1024, 8192], backend)
    assert points == [(d, n) for d in ("float32", "bfloat16") for n in (1024, 8192)]
    assert skipped == {}
  assert peak.limits("gpu").chain == 16


def test_the_probe_chains_its_matmuls_in_one_loop():
  a, b = (jax.random.normal(jax.random.key(i), (8, 8)) for i in range(2))
  got = peak.chained_matmul(a, b, 3)
  np.testing.assert_allclose(got, a @ b @ b @ b, rtol=1e-5)
  lowered = jax.jit(peak.chained_matmul, static_argnames="chain").lower(a, b, chain=16).as_text()
  assert "while" in lowered and lowered.count("dot_general") == 1  # one loop, not 16 launches
  program = peak.xla_matmul("float32", 16, chain=4)
  assert program.compile_s > 0 and program.step() is None


def test_the_section_runs_the_plan_and_counts_every_chained_matmul(monkeypatch):
  made = []

  def fake(dtype, n, chain):
    made.append((dtype, n, chain))
    return dtype, n

  monkeypatch.setattr(peak, "MATMULS", {"xla": (fake, lambda: None)})
  monkeypatch.setattr(peak.jax, "default_backend", lambda: "cpu")
  monkeypatch.setattr(
    peak, "interleaved", lambda programs, *_: {k: [3.0, 1.0, 2.0] for k in programs}
  )
  result = peak.run(bench_options("--peak_sizes=1024,4096"), {})
  assert made == [("float32", 1024, 2)]  # no bfloat16, nothing above 2048 on a CPU
  assert result["xla"] == {
    "float32": {"flops": 2 * 1024**3 * 2 / 2.0, "flops_by_size": {"1024": 2 * 1024**3 * 2 / 2.0}}
  }
  assert result["skipped"] == {
    "bfloat16": "no native bfloat16 matmul on cpu",
    "n=4096": "above 2048 on cpu",
  }
  assert peak.measured({"peak": result}, "float32") == result["roofline_float32"]
  assert peak.measured({"peak": result}, "bfloat16") is None
  text = peak.table(result)
  assert "2 chained matmuls per timed call" in text
  assert "not run: bfloat16 (no native bfloat16 matmul on cpu)" in text
