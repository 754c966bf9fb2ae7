"""`./launch.sh bench --device_check [--out=DIR/device_check.json]`: issue 26's accelerator
numbers in one command, for a lent GPU or TPU (experiments/bench/README.md says how).

Every point runs in a fresh process (`--device_point=JSON`), so its peak memory is its own
and an out-of-memory point is a row with its error, not the end of the check. Points, in the
order run (most wanted first: a lent machine's minutes are few, and `deadline_s` stops
starting points, each then a row saying so):
  peak     bf16 and f32 square matmul FLOP/s (the MFU denominator: bf16)
  train    lcx's train step (large and default model, bf16), impl=pallas (and impl=xla in
           the CPU plan): tokens/s, MFU, peak memory; then the large pallas step with lcx's
           CPU-tuned backward passes (lcx/model/cpu_tuned.py), which off CPU are not the default,
           and with model.remat=block (the large RoPE step; CoPE's default-model step)
  eval     the long evaluation's forward (batch 1, RoPE): pallas at 64k, 256k and 1M (the
           XLA chunked kernel at 64k and 256k come last)
  schemes  every registered scheme's train step / NoPE's, impl=auto (the Pallas kernel where
           it runs the scheme), one process, interleaved rounds (one row per scheme)
  peer     lcx vs x-transformers on the same GPU (flash SDPA where it takes the scheme), large
           model, interleaved (one row per scheme)
  tune     the 256k forward at other kernel blocks and Triton warps/stages (flash.TRITON)
  correct  the Pallas kernel against the dense XLA path on the device, float32: relative error
           of the output and of every gradient, per case (on an H200 at b40769c: 3e-4 to 7e-4,
           TF32 matmuls on both sides; the five cases then took 383 s, so it runs after the
           speed points)
then the rest of the eval points.
The JSON (--out) and a markdown table beside it (.md) give the device and versions on every
row. On CPU (or with --quick) the plan is tiny, so the whole path runs end to end in a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time

import jax

from lcx.model import cpu_tuned, kernels, positions
from lcx.tools.bench import long_eval, peak, peers, throughput
from lcx.tools.bench.measure import interleaved, ratio, ratio_ci, timed
from lcx.tools.bench.workload import bench_config, lcx_program, synthetic_batch
from lcx.tools.report import markdown_table

TITLE = "Device check (issue 26): one fresh process per row"
PLANS = {
  "full": {
    "peak_n": 8192,
    "correct": {"batch": 1, "seq_len": 1024, "heads": 8, "kv_heads": 4, "head_dim": 64},
    "train": [("large", 64, 1024), ("default", 64, 1024)],
    "train_impls": ("pallas",),  # impl=xla at b40769c on an H200: 804k tokens/s, 33.75 GB
    # the large pallas step again with lcx's CPU-tuned backward passes (lcx/model/cpu_tuned.py):
    # does what saves time and memory on XLA:CPU pay on this device too?
    "train_tuned": [("large", 64, 1024)],
    # model.remat=block (scheme, size, batch, seq_len, impl): the large step's memory target, and
    # CoPE's XLA step, out of memory without it (63 GB)
    "train_remat": [("rope", "large", 64, 1024, "pallas"), ("cope", "default", 64, 1024, "auto")],
    "eval_model": ("default", 1024),
    "eval": [("pallas", 65536), ("pallas", 262144), ("pallas", 1048576)],
    # the 256k forward again with other blocks and Triton settings (the kernel's default: 128,
    # 4 warps, 2 stages): (block_size, num_warps, num_stages)
    "tune": [(128, 8, 2), (128, 4, 3), (64, 4, 2)],
    "tune_length": 262144,
    "schemes_model": ("default", 64, 1024),
    "schemes": None,  # every registered scheme
    "peer_model": ("large", 64, 1024),
    "peer_schemes": ["nope", "rope", "alibi", "t5"],
    "eval_last": [("xla", 65536), ("xla", 262144)],
    "steps": 10,
    "rounds": 3,
    "repeats": 1,
    "timeout_s": 600,
  },
  "tiny": {
    "peak_n": 256,
    "correct": {
      "batch": 1,
      "seq_len": 40,
      "heads": 4,
      "kv_heads": 2,
      "head_dim": 8,
      "cases": [("rope", "self_extend", "dense"), ("alibi", "none", "sliding_window")],
    },
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
    "flops_per_token": throughput.train_flops_per_token(config.model, point["seq_len"]),
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
  out = {}
  for dtype in ("bfloat16", "float32"):
    program = peak.xla_matmul(dtype, point["n"])
    times = [timed(program.step) for _ in range(5)]
    out[f"{dtype}_flops"] = 2 * point["n"] ** 3 / sorted(times)[2]
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
  """`run_point` in a fresh `python -m lcx.tools.bench --device_point=...` (no preallocation)."""
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
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
  points = [{"what": "peak", "n": plan["peak_n"]}]

  def train(scheme, size, batch, seq_len, impl, **extra):
    point = {"what": "train", "scheme": scheme, "size": size, "batch": batch}
    return point | {"seq_len": seq_len, "impl": impl, "steps": plan["steps"], **extra}

  points += [train("rope", *shape, impl) for shape in plan["train"] for impl in plan["train_impls"]]
  points += [train("rope", *shape, "pallas", tuned=True) for shape in plan["train_tuned"]]
  points += [train(*point, remat="block") for point in plan["train_remat"]]
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
  size, batch, seq_len = plan["schemes_model"]
  schemes = ["nope"] + [s for s in plan["schemes"] or positions.SCHEMES if s != "nope"]
  timing = {"steps": plan["steps"], "rounds": plan["rounds"]}
  points.append(
    {"what": "schemes", "schemes": schemes, "size": size, "batch": batch, "seq_len": seq_len}
    | timing
  )
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
  points.append({"what": "correct", "cases": CORRECT_CASES} | plan["correct"])
  return points + evals(plan["eval_last"])


def _rows_of(point: dict, row: dict) -> list[dict]:
  """A point's table rows: its own, or one per case or scheme of a several-row point, each with
  the process's device, versions and peak memory."""
  if "rows" not in row:
    return [row]
  shared = {k: v for k, v in row.items() if k not in point and k != "rows"}
  return [{**sub, **shared} for sub in row["rows"]]


def run(out: str, quick: bool = False, deadline_s: float | None = None) -> dict:
  """Every point of the plan (tiny on CPU or with `quick`), MFU against the measured bf16 peak;
  writes `out` (JSON) and `out` with .md (the table) after every point, so a cut-short run keeps
  its rows. No point starts after `deadline_s` seconds (each is then a row saying so), and a
  running one is stopped 60 s after it."""
  plan_name = "tiny" if quick or jax.default_backend() == "cpu" else "full"
  plan = PLANS[plan_name]
  results = {"plan": plan_name, "command": " ".join(sys.argv), "rows": []}
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


def _derived(row: dict, done: list[dict]) -> None:
  """MFU of a train row against the bf16 peak measured before it."""
  if row["what"] == "train" and "tokens_per_s" in row:
    peaks = [r for r in done if r["what"] == "peak" and "bfloat16_flops" in r]
    if peaks:
      row["mfu_bf16"] = row["flops_per_token"] * row["tokens_per_s"] / peaks[0]["bfloat16_flops"]


def _cells(row: dict) -> tuple[str, str]:
  """(what was measured, its numbers) of one row, for the table."""
  w = row["what"]
  label = {
    "peak": lambda: f"matmul {row['n']}^3",
    "correct": lambda: f"pallas vs dense, f32, {row.get('case', 'every case')}",
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
    return label, (
      f"bf16 {row['bfloat16_flops'] / 1e9:.0f} GFLOP/s, f32 {row['float32_flops'] / 1e9:.0f}"
    )
  if w == "correct":
    seconds = f", {row['case_s']:.0f} s" if "case_s" in row else ""  # recorded since b40769c
    return label, (
      f"output {row['out_rel_err']:.1e}, gradients {row['grad_rel_err']:.1e} (rel.){seconds}"
    )
  if w == "train":
    mfu = f", MFU {100 * row['mfu_bf16']:.1f}%" if "mfu_bf16" in row else ""
    return label, (
      f"{row['tokens_per_s']:.0f} tokens/s{mfu}, step {row['step_s']:.4f} s, "
      f"compile {row['compile_s']:.1f} s"
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


def table(results: dict) -> str:
  rows = []
  for row in results["rows"]:
    what, numbers = _cells(row)
    peak_gb = f"{row['peak_gb']:.2f}" if "peak_gb" in row else ""
    versions = f"jax {row['jax']}, flax {row['flax']}" if "jax" in row else ""
    rows.append([what, numbers, peak_gb, row.get("device", ""), versions])
  return markdown_table(["measurement", "numbers", "peak GB", "device", "versions"], rows)


def write(results: dict, out: str) -> None:
  for path, text in ((out, json.dumps(results, indent=2)), (_md(out), table(results) + "\n")):
    with open(path + ".tmp", "w") as f:
      f.write(text)
    os.replace(path + ".tmp", path)


def _md(out: str) -> str:
  return os.path.splitext(out)[0] + ".md"
