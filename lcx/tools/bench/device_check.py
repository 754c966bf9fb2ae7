"""`./launch.sh bench --device_check [--device_plan=core|extra] [--plan] [--out=...]`: issue
26's accelerator numbers, for a lent GPU or TPU (experiments/bench/README.md says how).

Every point runs in a fresh process (`--device_point=JSON`, jax's persistent compilation cache
shared), so its peak memory is its own and an out-of-memory point is a row with its error, not
the end of the check. Two plans (PLANS): `core`, the default on an accelerator, estimated to fit
8 minutes of a fresh lent machine (`--plan` prints each point's estimate, from the committed
device checks' wall times, and the total, and runs nothing); `extra`, the rest, for a second call.
Points, in the order run (most wanted first; `deadline_s` stops starting points, each then a row
saying so):
  peak     the looped probe (peak.xla_matmul: 16 chained 8192^3 matmuls per call, median of 10),
           bf16 and f32, beside the device's datasheet bf16 peak (mfu.py)
  train    lcx's train step (bf16): core, the large model with impl=pallas and impl=xla;
           extra, the default model, the large pallas step with lcx's CPU-tuned backward passes
           (lcx/model/cpu_tuned.py; not the default off CPU), with model.remat=matmuls (pallas
           and xla) and =block (the large RoPE step; CoPE's default-model step). Tokens/s, peak
           memory and MFU: PaLM and causal counts over the datasheet peak and over the probe's
           bf16 (mfu.py)
  eval     the long evaluation's forward (batch 1, RoPE): core, pallas at 256k and 1M; extra,
           64k, then the XLA chunked kernel at 64k and 256k last
  schemes  every registered scheme's train step / NoPE's (core; CoPE, out of memory without
           remat, is the extra plan's remat row), impl=auto, one process, interleaved rounds
  peer     lcx vs x-transformers on the same GPU (flash SDPA where it takes the scheme), large
           model, interleaved (one row per scheme)
  tune     (extra) the 256k forward at other kernel blocks and Triton warps/stages
  correct  the Pallas kernel against the dense XLA path on the device, float32, at T=256: relative
           error of the output and of every gradient, one point per case (on an H200 a case took
           77-85 s at T=1024, compiling both kernels): one in the core plan, the rest in extra
The JSON (--out) and a markdown table beside it (.md) give the device and versions on every
row. On CPU (or with --quick) the plan is tiny, so the whole path runs end to end in a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import jax

from lcx import files
from lcx.model import cpu_tuned, kernels, positions
from lcx.tools.bench import long_eval, mfu, peak, peers
from lcx.tools.bench.measure import interleaved, ratio, ratio_ci, timed
from lcx.tools.bench.workload import bench_config, lcx_program, synthetic_batch
from lcx.tools.report import markdown_table

TITLE = "Device check (issue 26): one fresh process per row"
PLANS = {
  # The default on an accelerator: the most wanted numbers, estimated (`estimate`) to fit 8 minutes
  # of a fresh lent machine; `--device_check --plan` prints the points and their estimates.
  "core": {
    "peak_n": 8192,
    "peak_chain": 16,  # matmuls per timed call of the looped probe (peak.xla_matmul)
    "peak_rounds": 10,
    "train": [("large", 64, 1024)],
    "train_impls": ("pallas", "xla"),
    "train_tuned": [],
    "train_remat": [],
    "eval_model": ("default", 1024),
    "eval": [("pallas", 262144), ("pallas", 1048576)],
    "tune": [],
    "tune_length": 262144,
    "schemes_model": ("default", 64, 1024),
    "schemes": None,  # every registered scheme, but:
    # CoPE's XLA step needs a 63 GB temporary without remat: out of memory in every run so far
    # (gpu_2026-11-26, 26b); the extra plan times it with model.remat=block.
    "schemes_without": ("cope",),
    "peer_model": ("large", 64, 1024),
    "peer_schemes": ["nope", "rope", "alibi", "t5"],
    # one small point per case (each compiles both kernels' forward and backward, ~80 s on an
    # H200 at T=1024): the core has one, the extra plan the rest
    "correct": {"batch": 1, "seq_len": 256, "heads": 8, "kv_heads": 4, "head_dim": 64},
    "correct_cases": [("alibi", "none", "sliding_window")],
    "eval_last": [],
    "steps": 5,
    "rounds": 3,
    "repeats": 1,
    "timeout_s": 600,
  },
  # `--device_plan=extra`: the rest of issue 26's rows, for a second call.
  "extra": {
    "peak_n": None,  # the train row's MFU: over the datasheet peak only
    "train": [("default", 64, 1024)],
    "train_impls": ("pallas",),  # impl=xla at b40769c on an H200: 804k tokens/s, 33.75 GB
    # the large pallas step again with lcx's CPU-tuned backward passes (lcx/model/cpu_tuned.py):
    # does what saves time and memory on XLA:CPU pay on this device too?
    "train_tuned": [("large", 64, 1024)],
    # (scheme, size, batch, seq_len, impl, model.remat): the large step's memory target (8 GB;
    # remat=none is the core plan's row, 9.13 GB in gpu_2026-11-26b) with the matmuls kept
    # (python -m lcx.tools.bench.residuals: 0.27x none's residual bytes on the kernel, 0.13x on
    # XLA) and with every block recomputed, and CoPE's XLA step, out of memory without (63 GB)
    "train_remat": [
      ("rope", "large", 64, 1024, "pallas", "matmuls"),
      ("rope", "large", 64, 1024, "xla", "matmuls"),
      ("rope", "large", 64, 1024, "pallas", "block"),
      ("cope", "default", 64, 1024, "auto", "block"),
    ],
    "eval_model": ("default", 1024),
    "eval": [("pallas", 65536)],
    # the 256k forward again with other blocks and Triton settings (the kernel's default: 128,
    # 4 warps, 2 stages): (block_size, num_warps, num_stages)
    "tune": [(128, 8, 2), (128, 4, 3), (64, 4, 2)],
    "tune_length": 262144,
    "schemes": [],
    "peer_schemes": [],
    "correct": {"batch": 1, "seq_len": 256, "heads": 8, "kv_heads": 4, "head_dim": 64},
    "correct_cases": None,  # every case in CORRECT_CASES the core plan leaves out
    "eval_last": [("xla", 65536), ("xla", 262144)],
    "steps": 10,
    "rounds": 3,
    "repeats": 1,
    "timeout_s": 600,
  },
  "tiny": {
    "peak_n": 256,
    "peak_chain": 2,
    "peak_rounds": 3,
    "correct": {"batch": 1, "seq_len": 40, "heads": 4, "kv_heads": 2, "head_dim": 8},
    "correct_cases": [("rope", "self_extend", "dense"), ("alibi", "none", "sliding_window")],
    "train": [("tiny", 2, 32)],
    "train_impls": ("pallas", "xla"),
    "train_tuned": [],  # on CPU the tuned passes are the default: the train row has them
    "train_remat": [],
    "eval_model": ("tiny", 32),
    "eval": [("pallas", 64)],
    "tune": [(16, 8, 2)],
    "tune_length": 64,
    "schemes_model": ("tiny", 2, 32),
    "schemes": ["nope", "alibi"],
    "peer_model": ("tiny", 2, 32),
    "peer_schemes": ["nope"],
    "eval_last": [("xla", 64)],
    "steps": 2,
    "rounds": 2,
    "repeats": 1,
    "timeout_s": 600,
  },
}
BUDGET_S = 480  # the core plan's estimate fits this: 8 of a lent machine's 15 minutes
COMPILATION_CACHE = os.path.join(tempfile.gettempdir(), "lcx-device-check-jax-cache")
# The kernel's correctness on the device: (scheme, remap, pattern) with a learned sink, GQA and
# two documents, one block edge crossed.
CORRECT_CASES = [
  ("t5", "none", "dense"),  # Triton's loop over the block's buckets
  ("sandwich", "none", "dense"),  # its bfloat16-split dots summed in float32
  ("rope", "none", "dense"),
  ("alibi", "none", "dense"),
  ("kerple_log", "none", "dense"),
  ("rope", "self_extend", "dense"),
  ("alibi", "none", "sliding_window"),
]
DTYPE = "bfloat16"


def device() -> dict:
  """What ran the numbers: device kind and count, backend and versions."""
  import flax

  d = jax.devices()[0]
  return {
    "device": f"{len(jax.devices())} x {d.device_kind}",
    "device_kind": d.device_kind,  # the key of mfu.DATASHEET_BF16_TFLOPS
    "backend": jax.default_backend(),
    "jax": jax.__version__,
    "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else "",
    "flax": flax.__version__,
    "python": platform.python_version(),
  }


def _config(scheme, size, batch, seq_len, impl):
  config = bench_config(scheme, size, batch, seq_len)
  config.model.dtype = DTYPE
  config.model.attention.impl = impl
  return config


def _middle(times: list[float]) -> float:
  """The upper median: a measured time, not an average of two."""
  return sorted(times)[len(times) // 2]


def _train(point) -> dict:
  config = _config(point["scheme"], point["size"], point["batch"], point["seq_len"], point["impl"])
  config.model.remat = point.get("remat", "none")
  with cpu_tuned.plain(False) if point.get("tuned") else contextlib.nullcontext():
    program = lcx_program(config)
  times = [timed(program.step) for _ in range(point["steps"])]
  step_s = _middle(times)
  tokens = point["batch"] * point["seq_len"]
  return {
    "compile_s": program.compile_s,
    "step_s": step_s,
    "tokens_per_s": tokens / step_s,
    **mfu.counts(config.model, point["seq_len"]),
    "impl_resolved": kernels.resolve_impl(config.model),  # what auto chose on this backend
  }


def _correct(point) -> dict:
  """Per case, the Pallas kernel (Triton on a GPU) against the dense XLA kernel in float32:
  max |flash - dense| / max |dense| of the output and of each gradient (q, k, v, sink and the
  scheme's parameters), under one loss, both jitted on this device."""
  import jax.numpy as jnp
  from flax import nnx

  from lcx.model import attention, patterns
  from lcx.model.positions import remaps

  b, t, h, g, e = (point[k] for k in ("batch", "seq_len", "heads", "kv_heads", "head_dim"))
  dims = positions.Dims(d_model=h * e, num_heads=h, head_dim=e, max_len=t)
  keys = jax.random.split(jax.random.key(0), 5)
  seg_BxT = jnp.broadcast_to((jnp.arange(t) >= t // 2 + 3).astype(jnp.int32) + 1, (b, t))
  pos_BxT = attention.document_index(seg_BxT)
  args = (
    jax.random.normal(keys[0], (b, t, h, e)),
    jax.random.normal(keys[1], (b, t, g, e)),
    jax.random.normal(keys[2], (b, g, t, e)),
    jax.random.normal(keys[3], (h,)),
  )
  w_BxHxTxE = jax.random.normal(keys[4], (b, h, t, e))
  rows = []
  for scheme_name, remap, pattern in point["cases"]:
    graphdef, state = nnx.split(
      positions.build(positions.default_config(scheme_name), dims, rngs=nnx.Rngs(0))
    )
    remap_cfg = remaps.default_config(remap)
    pattern_cfg = patterns.default_config(pattern)
    remap_fn, pattern_fn = remaps.build(remap_cfg, dims), patterns.build(pattern_cfg)
    results, case_start = [], time.perf_counter()
    for kernel in (kernels.get_kernel("dense", t), kernels.flash_kernel()):

      def loss(q, k, v, sink_H, state, kernel=kernel):
        s = nnx.merge(graphdef, state)
        plan = kernel.prepare(pos_BxT, seg_BxT, scheme=s, remap=remap_fn, pattern=pattern_fn)
        out_BxHxTxE = kernel.attend(q, k, v, plan, scheme=s, sink_H=sink_H)
        return jnp.sum(out_BxHxTxE * w_BxHxTxE), out_BxHxTxE

      (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True))(
        *args, state
      )
      results.append((out, jax.tree.leaves(grads)))
    (want, want_grads), (got, got_grads) = results

    def rel(a, b):
      return float(jnp.abs(a - b).max() / jnp.maximum(jnp.abs(b).max(), 1e-30))

    rows.append(
      {
        "what": "correct",
        "case": f"{scheme_name}/{remap}/{pattern}",
        "out_rel_err": rel(got, want),
        "grad_rel_err": max(rel(a, b) for a, b in zip(got_grads, want_grads)),
        "case_s": time.perf_counter() - case_start,  # both compiles included
      }
    )
  return {"rows": rows}


def _schemes(point) -> dict:
  """Every scheme's train step with impl=auto in one process, interleaved rounds; a scheme that
  fails to build is a row with its error. The programs compile two at a time (XLA compiles
  outside the GIL), so each compile_s includes waiting on the other's; four at a time left
  CoPE's 63 GB XLA temporary without room on an H200 (experiments/bench/gpu_2026-11-26)."""
  from concurrent.futures import ThreadPoolExecutor

  def build(scheme):
    config = _config(scheme, point["size"], point["batch"], point["seq_len"], "auto")
    try:
      return lcx_program(config), {"impl_resolved": kernels.resolve_impl(config.model)}
    except Exception as e:  # one scheme's failure must not cost the others' numbers
      return None, {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}

  with ThreadPoolExecutor(2) as pool:
    built = dict(zip(point["schemes"], pool.map(build, point["schemes"])))
  programs = {s: program for s, (program, _) in built.items() if program is not None}
  rows = {s: row for s, (_, row) in built.items()}
  rounds = interleaved(programs, point["rounds"], point["steps"])
  tokens = point["batch"] * point["seq_len"]
  for scheme, program in programs.items():
    step_s = _middle(rounds[scheme])
    rows[scheme].update(step_s=step_s, tokens_per_s=tokens / step_s, compile_s=program.compile_s)
    if "nope" in programs:
      low, high, _ = ratio_ci(rounds[scheme], rounds["nope"])
      rows[scheme].update(vs_nope=ratio(rounds[scheme], rounds["nope"]), vs_nope_ci=[low, high])
  return {"rows": [{"what": "scheme", "scheme": s, **r} for s, r in rows.items()]}


def _peer(point) -> dict:
  """Per scheme, lcx (impl=auto) and x-transformers on the same device, interleaved; lcx_speedup
  = x-transformers' step time / lcx's (> 1: lcx faster)."""
  rows = []
  tokens = point["batch"] * point["seq_len"]
  for scheme in point["schemes"]:
    config = _config(scheme, point["size"], point["batch"], point["seq_len"], "auto")
    row = {"what": "peer", "scheme": scheme}
    other = peers.xtransformers_program(config)
    if isinstance(other, str):
      rows.append({**row, "error": other})
      continue
    programs = {"lcx": lcx_program(config), "x_transformers": other}
    rounds = interleaved(programs, point["rounds"], point["steps"])
    for name in programs:
      step_s = _middle(rounds[name])
      row[f"{name}_tokens_per_s"] = tokens / step_s
    row["lcx_speedup"] = ratio(rounds["x_transformers"], rounds["lcx"])
    row["impl_resolved"] = kernels.resolve_impl(config.model)
    rows.append(row)
    del programs, other  # free the device memory before the next scheme
  return {"rows": rows}


def _eval(point) -> dict:
  if "triton" in point:  # a tune point: this process's kernels with these Triton settings
    kernels.flash.TRITON = dict(zip(("num_warps", "num_stages"), point["triton"]))
  runner = long_eval.eval_runner(
    "rope",
    point["size"],
    point["train_len"],
    "chunked",
    point["length"],
    point["impl"],
    DTYPE,
    block_size=point.get("block_size"),
  )
  batch = synthetic_batch(1, point["length"], runner.config.model.vocab_size)
  rows = (batch["inputs"], batch["targets"], batch["positions"], batch["segment_ids"])
  first_s = timed(lambda: runner.nll(*rows))
  times = [timed(lambda: runner.nll(*rows)) for _ in range(point["repeats"])]
  return {"first_call_s": first_s, "forward_s": _middle(times)}


def _peak(point) -> dict:
  """The looped matmul probe (peak.xla_matmul, warmed) per dtype: FLOP/s of the median round,
  and the device's datasheet bf16 peak beside it (None where mfu.py has none)."""
  out = {"datasheet_bf16_flops": mfu.datasheet_peak(jax.devices()[0].device_kind)}
  for dtype in ("bfloat16", "float32"):
    program = peak.xla_matmul(dtype, point["n"], point["chain"])
    times = [timed(program.step) for _ in range(point["rounds"])]
    out[f"{dtype}_flops"] = 2 * point["n"] ** 3 * point["chain"] / _middle(times)
  return out


POINTS = {
  "peak": _peak,
  "correct": _correct,
  "train": _train,
  "eval": _eval,
  "schemes": _schemes,
  "peer": _peer,
}


def run_point(point: dict) -> dict:
  """One measurement in this process, with the device, versions and this process's peak."""
  start = time.perf_counter()
  result = POINTS[point["what"]](point)
  return {
    **point,
    **result,
    **device(),
    "peak_gb": long_eval._peak_bytes() / long_eval.GB,
    "wall_s": time.perf_counter() - start,
  }


def _in_process(point: dict, timeout_s: int) -> dict:
  """`run_point` in a fresh `python -m lcx.tools.bench --device_point=...` (no preallocation),
  with jax's persistent compilation cache (COMPILATION_CACHE unless JAX_COMPILATION_CACHE_DIR is
  set): a program compiled by an earlier point, or an earlier call on the same machine, is read
  back, not compiled again."""
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
  env.setdefault("JAX_COMPILATION_CACHE_DIR", COMPILATION_CACHE)
  cmd = [sys.executable, "-m", "lcx.tools.bench", f"--device_point={json.dumps(point)}"]
  try:
    proc = subprocess.run(
      cmd, capture_output=True, text=True, cwd=long_eval.REPO_ROOT, env=env, timeout=timeout_s
    )
  except subprocess.TimeoutExpired:
    return {**point, "error": f"timed out after {timeout_s} s"}
  lines = [x for x in proc.stdout.splitlines() if x.startswith("DEVICE_POINT ")]
  if proc.returncode != 0 or not lines:
    tail = " | ".join(x.strip() for x in proc.stderr.strip().splitlines()[-4:])
    return {**point, "error": f"exit {proc.returncode}: {tail[-400:]}"}
  return json.loads(lines[-1][len("DEVICE_POINT ") :])


def plan_points(plan: dict) -> list[dict]:
  """The plan's points in the order run: the most wanted numbers first."""
  points = []
  if plan["peak_n"]:
    points.append(
      {"what": "peak", "n": plan["peak_n"], "chain": plan["peak_chain"]}
      | {"rounds": plan["peak_rounds"]}
    )

  def train(scheme, size, batch, seq_len, impl, **extra):
    point = {"what": "train", "scheme": scheme, "size": size, "batch": batch}
    return point | {"seq_len": seq_len, "impl": impl, "steps": plan["steps"], **extra}

  points += [train("rope", *shape, impl) for shape in plan["train"] for impl in plan["train_impls"]]
  points += [train("rope", *shape, "pallas", tuned=True) for shape in plan["train_tuned"]]
  points += [train(*point[:5], remat=point[5]) for point in plan["train_remat"]]
  eval_size, train_len = plan["eval_model"]

  def evals(pairs):
    return [
      {
        "what": "eval",
        "size": eval_size,
        "train_len": train_len,
        "length": length,
        "impl": impl,
        "repeats": plan["repeats"],
      }
      for impl, length in pairs
    ]

  points += evals(plan["eval"])
  timing = {"steps": plan["steps"], "rounds": plan["rounds"]}
  if plan["schemes"] != []:
    size, batch, seq_len = plan["schemes_model"]
    schemes = [s for s in plan["schemes"] or positions.SCHEMES if s != "nope"]
    schemes = ["nope"] + [s for s in schemes if s not in plan.get("schemes_without", ())]
    points.append(
      {"what": "schemes", "schemes": schemes, "size": size, "batch": batch, "seq_len": seq_len}
      | timing
    )
  if plan["peer_schemes"]:
    size, batch, seq_len = plan["peer_model"]
    points.append(
      {
        "what": "peer",
        "schemes": plan["peer_schemes"],
        "size": size,
        "batch": batch,
        "seq_len": seq_len,
      }
      | timing
    )
  for block, warps, stages in plan["tune"]:
    (point,) = evals([("pallas", plan["tune_length"])])
    points.append(point | {"block_size": block, "triton": [warps, stages]})
  points += [{"what": "correct", "cases": [case]} | plan["correct"] for case in correct_cases(plan)]
  return points + evals(plan["eval_last"])


def correct_cases(plan: dict) -> list[tuple[str, str, str]]:
  """The plan's correctness cases; None: those of CORRECT_CASES the core plan leaves out."""
  if plan["correct_cases"] is not None:
    return plan["correct_cases"]
  return [c for c in CORRECT_CASES if c not in PLANS["core"]["correct_cases"]]


def _rows_of(point: dict, row: dict) -> list[dict]:
  """A point's table rows: its own, or one per case or scheme of a several-row point, each with
  the process's device, versions and peak memory."""
  if "rows" not in row:
    return [row]
  shared = {k: v for k, v in row.items() if k not in point and k != "rows"}
  return [{**sub, **shared} for sub in row["rows"]]


def plan_name(quick: bool = False, name: str | None = None) -> str:
  """`name`, or the default: tiny on a CPU or with `quick`, else core."""
  return name or ("tiny" if quick or jax.default_backend() == "cpu" else "core")


def run(
  out: str, quick: bool = False, deadline_s: float | None = None, name: str | None = None
) -> dict:
  """Every point of the plan `plan_name(quick, name)`, MFUs per mfu.py; writes `out` (JSON) and
  `out` with .md (the table) after every point, so a cut-short run keeps its rows. No point starts
  after `deadline_s` seconds (each is then a row saying so), and a running one is stopped 60 s
  after it."""
  chosen = plan_name(quick, name)
  plan = PLANS[chosen]
  results = {"plan": chosen, "command": " ".join(sys.argv), "rows": []}
  start = time.perf_counter()
  for point in plan_points(plan):
    print(f"[device_check] {json.dumps(point)}", flush=True)
    elapsed = time.perf_counter() - start
    timeout_s = plan["timeout_s"]
    if deadline_s is not None:
      timeout_s = min(timeout_s, max(1, deadline_s + 60 - elapsed))
    if deadline_s is not None and elapsed > deadline_s:
      rows = [{**point, "error": f"not run: past the check's deadline ({deadline_s:.0f} s)"}]
    else:
      rows = _rows_of(point, _in_process(point, int(timeout_s)))
    for row in rows:
      _derived(row, results["rows"])
      print(json.dumps(row), flush=True)
      results["rows"].append(row)
    write(results, out)
  return results


# --plan's estimates: a point's seconds are the sum over the rows it writes of the median wall
# time of committed rows with the same key (ESTIMATE_KEYS; a several-row point's wall time is
# shared out evenly among its rows), else UNMEASURED_S of the row's kind, plus PROCESS_S. The
# committed rows ran on a fresh H200 without a compilation cache, so they are upper bounds where
# the cache holds a program; the keys leave out steps and rounds (compilation dominates), and a
# correctness case's T (it was measured at 1024, the plans now run it at 256).
COMMITTED = pathlib.Path(long_eval.REPO_ROOT, "experiments", "bench")  # gpu_*/device_check*.json
ESTIMATE_KEYS = {
  "peak": ("n", "chain"),
  "train": ("scheme", "size", "batch", "seq_len", "impl", "tuned", "remat"),
  "eval": ("size", "length", "impl", "block_size", "triton"),
  "scheme": ("scheme",),
  "peer": ("scheme",),
  "correct": ("case",),
}
# Per row never measured: about the measured ones of its kind (a scheme 9.7-11.4 s, a peer
# scheme 21 s, a correctness case 77-85 s at T=1024, the train steps 13-22 s), rounded up. The
# looped peak probe: the single-call probe's 3.3-3.5 s, plus 2 x 11 calls of 16 matmuls at 8192
# (0.7 s at the 816 bf16 and 440 TF32 TFLOP/s measured at b8d219a) and the loops' compilation.
UNMEASURED_S = {
  "peak": 6.0,
  "train": 30.0,
  "eval": 60.0,
  "scheme": 12.0,
  "peer": 25.0,
  "correct": 90.0,
}
# A point's fresh process (Python, jax, the device) beyond its row's wall_s: 2.5-4.6 s in
# gpu_2026-11-26/points_2.txt (each process's wall time beside its row).
PROCESS_S = 4.0
# A point -> the rows it writes, as the plan knows them (their estimate keys).
ROWS_OF = {
  "schemes": lambda p: [{"what": "scheme", "scheme": s} for s in p["schemes"]],
  "peer": lambda p: [{"what": "peer", "scheme": s} for s in p["schemes"]],
  "correct": lambda p: [{"what": "correct", "case": "/".join(c)} for c in p["cases"]],
}


def _estimate_key(row: dict) -> tuple:
  return (row["what"],) + tuple(json.dumps(row.get(k)) for k in ESTIMATE_KEYS[row["what"]])


def measured_seconds(folder: pathlib.Path = COMMITTED) -> dict[tuple, float]:
  """Estimate key -> median wall seconds of the committed rows with it (errors left out)."""
  found: dict[tuple, list[float]] = {}
  for path in sorted(folder.glob("gpu_*/device_check*.json")):
    rows = [r for r in json.loads(path.read_text())["rows"] if "wall_s" in r]
    sharing = {}  # the rows of one several-row point share its wall time
    for r in rows:
      sharing[r["what"], r["wall_s"]] = sharing.get((r["what"], r["wall_s"]), 0) + 1
    for r in rows:
      if "error" not in r:
        share = r["wall_s"] / sharing[r["what"], r["wall_s"]]
        found.setdefault(_estimate_key(r), []).append(share)
  return {key: statistics.median(times) for key, times in found.items()}


def estimate(point: dict, measured: dict[tuple, float]) -> tuple[float, str]:
  """(seconds, where they come from: "measured", "constant" or "measured + constant")."""
  rows = ROWS_OF.get(point["what"], lambda p: [p])(point)
  keys = [_estimate_key(r) for r in rows]
  seconds = sum(measured.get(k, UNMEASURED_S[k[0]]) for k in keys) + PROCESS_S
  sources = {"measured" if k in measured else "constant" for k in keys}
  return seconds, " + ".join(sorted(sources))


def plan_seconds(name: str, measured: dict[tuple, float] | None = None) -> list[float]:
  """Estimated seconds (`estimate`) of each point of plan `name` on a fresh H200."""
  measured = measured_seconds() if measured is None else measured
  return [estimate(point, measured)[0] for point in plan_points(PLANS[name])]


def plan_text(name: str) -> str:
  """`--device_check --plan`: every point of plan `name` with its estimate on a fresh H200 and
  the total; the tiny plan (a CPU's) has none."""
  if name == "tiny":
    points = [f"{json.dumps(p)}" for p in plan_points(PLANS[name])]
    return "\n".join([f"device check plan {name!r} (a CPU's: not estimated):", *points])
  measured = measured_seconds()
  lines = [f"device check plan {name!r}: seconds estimated for a fresh H200 (source), point"]
  for point in plan_points(PLANS[name]):
    seconds, source = estimate(point, measured)
    lines.append(f"{seconds:6.0f} s  ({source})  {json.dumps(point)}")
  total = sum(plan_seconds(name, measured))
  budget = f" (budget {BUDGET_S} s)" if name == "core" else ""
  return "\n".join(lines + [f"{total:6.0f} s  total{budget}"])


def _derived(row: dict, done: list[dict]) -> None:
  """MFUs of a train row (mfu.figures): over its device's datasheet bf16 peak and over the bf16
  peak the probe measured before it, if one did."""
  if row["what"] == "train" and "tokens_per_s" in row:
    probes = [r["bfloat16_flops"] for r in done if r["what"] == "peak" and "bfloat16_flops" in r]
    peaks = {
      "datasheet": mfu.datasheet_peak(row["device_kind"]),
      "measured": next(iter(probes), None),
    }
    row.update(mfu.figures(row, row["tokens_per_s"], peaks))


def _cells(row: dict) -> tuple[str, str]:
  """(what was measured, its numbers) of one row, for the table."""
  w = row["what"]
  label = {
    "peak": lambda: f"matmul {row['n']}^3",
    "correct": lambda: f"pallas vs dense, f32, {row.get('case') or _case_names(row['cases'])}",
    "train": lambda: (
      f"train {row['size']} {row['batch']}x{row['seq_len']} {row['scheme']} impl={row['impl']}"
      + (", CPU-tuned backward passes" if row.get("tuned") else "")
      + (f", remat={row['remat']}" if "remat" in row else "")
    ),
    "scheme": lambda: f"step {row['scheme']}, impl=auto",
    "schemes": lambda: "every scheme's step, impl=auto",
    "peer": lambda: f"lcx vs x-transformers, {row.get('scheme', 'every scheme')}",
    "eval": lambda: (
      f"eval {row['length']} tokens {row['size']} impl={row['impl']}"
      + (
        f", block {row['block_size']}, {row['triton'][0]} warps, {row['triton'][1]} stages"
        if "triton" in row
        else ""
      )
    ),
  }[w]()
  if "error" in row:
    return label, "error: " + row["error"][:160]
  if w == "peak":
    numbers = (
      f"bf16 {row['bfloat16_flops'] / 1e9:.0f} GFLOP/s, f32 {row['float32_flops'] / 1e9:.0f}"
    )
    if "chain" not in row:  # a single-call probe, before the looped one
      return label, numbers
    datasheet = row["datasheet_bf16_flops"]
    share = (
      f"bf16 {100 * row['bfloat16_flops'] / datasheet:.1f}% of the datasheet's "
      f"{datasheet / 1e12:.0f} TFLOP/s"
      if datasheet
      else mfu.NO_DATASHEET
    )
    return label, f"{numbers}; {share}; {row['chain']} chained per call, median of {row['rounds']}"
  if w == "correct":
    seconds = f", {row['case_s']:.0f} s" if "case_s" in row else ""  # recorded since b40769c
    return label, (
      f"output {row['out_rel_err']:.1e}, gradients {row['grad_rel_err']:.1e} (rel.){seconds}"
    )
  if w == "train":
    # mfu_bf16: over the single-call probe, in rows from before mfu.py
    old_mfu = f", MFU {100 * row['mfu_bf16']:.1f}%" if "mfu_bf16" in row else ""
    mfus = f"; {mfu.describe(row)}" if "peak_datasheet" in row else ""
    return label, (
      f"{row['tokens_per_s']:.0f} tokens/s{old_mfu}, step {row['step_s']:.4f} s, "
      f"compile {row['compile_s']:.1f} s{mfus}"
    )
  if w == "scheme":
    ratio_ = ""
    if "vs_nope" in row:
      low, high = row["vs_nope_ci"]
      ratio_ = f"{row['vs_nope']:.3f} x NoPE [{low:.3f}, {high:.3f}], "
    return label, (
      f"{ratio_}{row['tokens_per_s']:.0f} tokens/s, ran {row['impl_resolved']}, "
      f"compile {row['compile_s']:.1f} s"
    )
  if w == "peer":
    return label, (
      f"lcx {row['lcx_speedup']:.2f}x ({row['lcx_tokens_per_s']:.0f} vs "
      f"{row['x_transformers_tokens_per_s']:.0f} tokens/s), lcx ran {row['impl_resolved']}"
    )
  return label, f"forward {row['forward_s']:.3f} s (first {row['first_call_s']:.1f} s)"


def _case_names(cases: list) -> str:
  return "/".join(cases[0]) if len(cases) == 1 else "every case"


def table(results: dict) -> str:
  rows = []
  for row in results["rows"]:
    what, numbers = _cells(row)
    peak_gb = f"{row['peak_gb']:.2f}" if "peak_gb" in row else ""
    versions = f"jax {row['jax']}, flax {row['flax']}" if "jax" in row else ""
    rows.append([what, numbers, peak_gb, row.get("device", ""), versions])
  return markdown_table(["measurement", "numbers", "peak GB", "device", "versions"], rows)


def write(results: dict, out: str) -> None:
  files.write_json(out, results, indent=2)
  files.write_atomic(_md(out), table(results) + "\n")


def _md(out: str) -> str:
  return os.path.splitext(out)[0] + ".md"
