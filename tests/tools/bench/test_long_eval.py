"""lcx.tools.bench.long_eval: the dense memory estimate, and the eval point's forward (the
evaluator's Runner) on each kernel and implementation."""

import numpy as np
import pytest

from lcx.tools.bench import long_eval, workload
from lcx.tools.evaluate.runner import Runner


def test_dense_eval_memory_estimate():
  m = workload.bench_config("rope", "default", 16, 256).model  # 4 heads
  assert long_eval.dense_eval_bytes(m, 32768) == 4 * 4 * 4 * 32768**2  # 64 GiB: skipped


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


def test_long_eval_through_the_pallas_kernel_equals_xla():
  """The evaluator's forward with impl=pallas (interpret mode here) gives the chunked XLA
  kernel's losses: the device check's eval rows compare the same computation."""
  batch = workload.synthetic_batch(1, 40, 259)
  rows = (batch["inputs"], batch["targets"], batch["positions"], batch["segment_ids"])
  xla = long_eval.eval_runner("alibi", "tiny", 16, "chunked", 40, "xla").nll(*rows)
  pallas = long_eval.eval_runner("alibi", "tiny", 16, "chunked", 40, "pallas").nll(*rows)
  np.testing.assert_allclose(pallas, xla, rtol=1e-4)
