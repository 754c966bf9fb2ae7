"""Section `peers`: per scheme, lcx's train step interleaved with the same model as a plain
`nnx.jit` step and in x-transformers on PyTorch; lcx/peer is the tokens/s ratio (> 1: lcx
faster)."""

from __future__ import annotations

import statistics

import jax
import jax.numpy as jnp
from flax import nnx

from lcx.model.decoder import Decoder
from lcx.run import train
from lcx.tools.bench import mfu, peak
from lcx.tools.bench.measure import Program, interleaved, ratio, timed
from lcx.tools.bench.workload import (
  buildable,
  options_config,
  registered,
  skipped_rows,
  synthetic_batch,
)
from lcx.tools.report import markdown_table

TITLE = (
  "Peers: lcx vs a plain nnx.jit step and x-transformers (interleaved; lcx/peer = tokens/s ratio)"
)


def plain_nnx_program(config) -> Program:
  """The textbook Flax NNX step on the same Decoder and optimizer: `nnx.Optimizer`, `nnx.jit`,
  no sharding, no donation. `compile_s` is the first call (compile plus one step)."""
  model = Decoder(config.model, rngs=nnx.Rngs(config.seed))
  opt = nnx.Optimizer(model, train.optimizer(config.train), wrt=nnx.Param)
  d = config.data
  batch = {
    k: jnp.asarray(v)
    for k, v in synthetic_batch(d.batch_size, d.seq_len, config.model.vocab_size).items()
  }

  @nnx.jit
  def train_step(model, opt, batch):
    def loss_of(m):
      return train.loss_fn(m, batch, batch["positions"])

    loss, grads = nnx.value_and_grad(loss_of)(model)
    opt.update(model, grads)
    return loss

  def step():
    jax.block_until_ready(train_step(model, opt, batch))

  compile_s = timed(step)
  step()
  return Program(step, compile_s)


def xt_options(scheme: str, head_dim: int) -> tuple[dict, dict] | None:
  """(TransformerWrapper kwargs, Decoder kwargs) of the closest x-transformers option to an lcx
  scheme, or None. p-RoPE becomes partial rotary over 3/4 of the features; FIRE becomes
  x-transformers' dynamic position bias (an MLP of log distance), as FIRE is an MLP of distance.
  """
  relative = {"use_abs_pos_emb": False}
  return {
    "nope": (relative, {}),
    "rope": (relative, {"rotary_pos_emb": True, "rotary_emb_dim": head_dim}),
    "p_rope": (
      relative,
      {"rotary_pos_emb": True, "rotary_emb_dim": 2 * round(0.75 * head_dim / 2)},
    ),
    "xpos": (relative, {"rotary_xpos": True, "rotary_emb_dim": head_dim}),
    "alibi": (relative, {"alibi_pos_bias": True}),
    "t5": (relative, {"rel_pos_bias": True}),
    "fire": (relative, {"dynamic_pos_bias": True, "dynamic_pos_bias_log_distance": True}),
    "sinusoidal": ({"use_abs_pos_emb": True, "scaled_sinu_pos_emb": True}, {}),
    "learned": ({"use_abs_pos_emb": True}, {}),
  }.get(scheme)


def xtransformers_program(config) -> Program | str:
  """The same model in x-transformers on PyTorch, AdamW with clipping: eager on CPU; on a GPU
  torch sees, on that GPU with bf16 autocast when `model.dtype` is bfloat16 and PyTorch's flash
  SDPA (`attn_flash`) for every scheme x-transformers allows it with (not T5's bias).

  Returns a reason string instead when torch or x-transformers is missing or has no match.
  """
  try:
    import torch
    import x_transformers
  except ImportError as e:
    return f"not importable: {e.name} (pip install torch==2.13.0 x-transformers)"
  m, t = config.model, config.train
  options = xt_options(m.position.name, m.head_dim)
  if options is None:
    return f"no x-transformers option for {m.position.name}"
  wrapper_kw, decoder_kw = options
  device = "cuda" if torch.cuda.is_available() else "cpu"
  if device == "cuda" and m.position.name != "t5":
    decoder_kw = {**decoder_kw, "attn_flash": True}
  torch.manual_seed(config.seed)
  model = x_transformers.TransformerWrapper(
    num_tokens=m.vocab_size,
    max_seq_len=config.data.seq_len,
    attn_layers=x_transformers.Decoder(
      dim=m.d_model,
      depth=m.num_layers,
      heads=m.num_heads,
      attn_dim_head=m.head_dim,
      ff_mult=m.mlp_dim // m.d_model,
      ff_no_bias=True,
      use_rmsnorm=True,
      **decoder_kw,
    ),
    **wrapper_kw,
  ).to(device)
  opt = torch.optim.AdamW(
    model.parameters(), lr=t.lr, betas=(t.b1, t.b2), weight_decay=t.weight_decay
  )
  batch = synthetic_batch(config.data.batch_size, config.data.seq_len, m.vocab_size)
  inputs = torch.from_numpy(batch["inputs"]).long().to(device)
  targets = torch.from_numpy(batch["targets"]).long().to(device)
  autocast = torch.autocast(
    device, dtype=torch.bfloat16, enabled=device == "cuda" and m.dtype == "bfloat16"
  )

  def step():
    with autocast:
      logits = model(inputs)
      loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, m.vocab_size).float(), targets.reshape(-1)
      )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
    opt.step()
    if device == "cuda":
      torch.cuda.synchronize()  # the step is done when timed

  compile_s = timed(step)  # eager: the first step (allocations, lazy init)
  step()
  return Program(step, compile_s)


PEERS = {"plain_nnx": plain_nnx_program, "x_transformers": xtransformers_program}


def run(opts, results) -> dict:
  """Per scheme, lcx interleaved with each peer: tokens/s ratio lcx / peer (> 1: lcx faster)."""
  schemes, missing = registered(opts.schemes)
  out = {"schemes": {}, "skipped": {s: "not registered" for s in missing}}
  for s in schemes:
    config = options_config(opts, s)
    programs, failed = buildable(opts, [s])
    if failed:
      out["skipped"].update(failed)
      continue
    programs = {"lcx": programs[s]}
    row = {}
    for name, make in PEERS.items():
      peer = make(config)
      if isinstance(peer, str):
        row[name] = {"unavailable": peer}
      else:
        programs[name] = peer
    rounds = interleaved(programs, opts.rounds, opts.steps)
    tokens = config.data.batch_size * config.data.seq_len
    fpt = mfu.train_flops_per_token(config.model, config.data.seq_len)
    for name, program in programs.items():
      step_s = statistics.median(rounds[name])
      row[name] = {
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "mfu": fpt * tokens / step_s / peak.roofline(results),  # PaLM count, measured f32
        "compile_s": program.compile_s,
        "rounds_s": rounds[name],
      }
      if name != "lcx":  # tokens/s ratio = inverse step-time ratio
        row[name]["lcx_speedup"] = ratio(rounds[name], rounds["lcx"])
    out["schemes"][s] = row
    print(
      f"  peers {s}: "
      + ", ".join(f"{n} {r['step_s']:.3f} s" for n, r in row.items() if "step_s" in r),
      flush=True,
    )
  return out


def table(result: dict) -> str:
  rows = []
  for s, row in result["schemes"].items():
    cells = [s, f"{row['lcx']['step_s']:.3f}", f"{100 * row['lcx']['mfu']:.0f}%"]
    for name in PEERS:
      p = row[name]
      cells += (
        [p["unavailable"], "", ""]
        if "unavailable" in p
        else [f"{p['step_s']:.3f}", f"{100 * p['mfu']:.0f}%", f"{p['lcx_speedup']:.2f}x"]
      )
    rows.append(cells)
  head = ["scheme", "lcx s/step", "MFU (PaLM, measured f32)"]
  for name in PEERS:
    head += [f"{name} s/step", "MFU", "lcx/" + name]
  return markdown_table(head, rows + skipped_rows(result, len(head)))
