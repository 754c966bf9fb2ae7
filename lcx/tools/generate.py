"""Generation with a KV cache: `generate(graphdef, params, prompt_BxP, max_new_tokens)`, and the
command line `python -m lcx.tools.generate --workdir=DIR --prompt=TEXT --max_new_tokens=N`.

One compiled program per (batch, prompt length, new tokens, sampling settings): the prompt and
the tokens still to come sit in a fixed buffer of P + N slots, and every layer's KV cache
(`model.KVCache`) has that many slots, so each decode step has the same shapes.
  prefill  a forward pass over the whole buffer, the prompt one document, the empty slots
           another (never attended): the ordinary kernels (chunked for long prompts), each
           layer writing its unrotated keys and values into its cache
  step     the last token against the cache (`Decoder.decode`): the query and every cached
           key rotated with the current length, biases, remaps and patterns as in training
Cached logits equal the full forward pass over the prefix (tests/tools/test_generate.py). One case
needs more than a cache: a length-dependent RoPE scaling (dynamic, longrope) gives every token
of a longer prefix other frequencies, so the hidden states of the layers after the first, and
with them their keys and values, change for tokens already cached. Whenever the frequencies at
the current length differ from those the cache was built with, the step is a prefill instead
(dynamic: every step past the training length; longrope: once, on crossing it), so the logits
are exactly those of the prefix run again, as such a scaling defines them. The eval-time
temperature `model.attention.beta_c` (1 + C ln(T/L) on every query of a T-token sequence) is
such a case too: every step past L is a prefill.

Sampling: temperature 0 is greedy (argmax); otherwise logits / temperature, restricted to the
top_k most likely tokens when top_k > 0, drawn with a key folded from `seed` and the step, so a
seed gives the same tokens on every run.
"""

from __future__ import annotations

if __name__ == "__main__":  # the command line: its flags and fields are checked before jax loads
  from lcx.tools import generate_cli

  def _run(*args, **kwargs):
    """Once they pass: this file again, as the module lcx.tools.generate (jax), runs the
    generation."""
    from lcx.tools import generate

    generate.main(*args, **kwargs)

  generate_cli.run(_run)  # exits

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lcx.model import temperature
from lcx.model.positions import rotary, scaling


def sample(logits_BxV, key, temperature: float = 0.0, top_k: int = 0):
  """Next token ids, B: argmax at temperature 0; else a draw from softmax(logits / T), over the
  top_k largest logits only when top_k > 0."""
  if temperature == 0:
    return jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
  logits_BxV = logits_BxV / temperature
  if top_k:
    kth_Bx1 = jax.lax.top_k(logits_BxV, top_k)[0][:, -1:]
    logits_BxV = jnp.where(logits_BxV < kth_Bx1, -jnp.inf, logits_BxV)
  return jax.random.categorical(key, logits_BxV, axis=-1).astype(jnp.int32)


def _frequencies(scheme):
  """length -> the scheme's rotary frequencies at that length, or None where no length changes
  them (every scheme but a rotary one with a length-dependent scaling)."""
  if not (
    isinstance(scheme, rotary.RoPE) and scaling.ROPE_TYPES[scheme.scaling.rope_type].per_length
  ):
    return None
  return lambda length: scaling.token_frequencies(
    scheme.rotary_dim, scheme.base, scheme.scaling, jnp.asarray(length)
  )[0]


def _beta(model):
  """length -> the eval-time temperature factor on every query (lcx.model.temperature), or None
  where it is off."""
  attn = model.blocks[0].attn
  if not attn.beta_c:
    return None
  return functools.partial(temperature.beta_factor, train_len=attn.train_len, c=attn.beta_c)


@functools.partial(
  jax.jit,
  static_argnames=("graphdef", "max_new_tokens", "temperature", "top_k", "kernel", "with_logits"),
)
def _generate(
  params, prompt_BxP, key, *, graphdef, max_new_tokens, temperature, top_k, kernel, with_logits
):
  b, p = prompt_BxP.shape
  size = p + max_new_tokens
  model = nnx.merge(graphdef, params)
  model.init_cache(b, size)
  graphdef, cache, rest = nnx.split(model, nnx.Cache, ...)
  frequencies, beta = _frequencies(model.position), _beta(model)
  pos_BxS = jnp.broadcast_to(jnp.arange(size), (b, size))

  def prefill(cache, tokens_BxS, length):
    """Logits after tokens 0..length-1, every slot of the cache (re)written at `length`."""
    m = nnx.merge(graphdef, cache, rest)
    seg_BxS = jnp.where(pos_BxS < length, 1, 2)  # slots past the prefix: another document
    logits_BxSxV = m(tokens_BxS, pos_BxS, seg_BxS, kernel=kernel)
    return (
      jax.lax.dynamic_index_in_dim(logits_BxSxV, length - 1, 1, keepdims=False),
      nnx.state(m, nnx.Cache),
    )

  def step(cache, tokens_BxS, length):
    """Logits after tokens 0..length-1, from the cache of tokens 0..length-2."""
    m = nnx.merge(graphdef, cache, rest)
    last_Bx1 = jax.lax.dynamic_slice_in_dim(tokens_BxS, length - 1, 1, axis=1)
    return m.decode(last_Bx1, length - 1)[:, 0], nnx.state(m, nnx.Cache)

  def advance(cache, tokens_BxS, i, built):
    """The logits after tokens 0..p+i-1: a prefill first, and again wherever the frequencies
    or the beta temperature at the current length differ from those at `built` (the length
    the cached hidden states were computed at); a step otherwise."""
    length = p + i
    refill = i == 0
    if frequencies is not None:
      refill = refill | jnp.any(frequencies(length) != frequencies(built))
    if beta is not None:
      refill = refill | (beta(length) != beta(built))
    logits_BxV, cache = jax.lax.cond(refill, prefill, step, cache, tokens_BxS, length)
    return logits_BxV, cache, jnp.where(refill, length, built)

  def body(i, carry):
    tokens_BxS, cache, built, seen_BxNxV = carry
    logits_BxV, cache, built = advance(cache, tokens_BxS, i, built)
    new_B = sample(logits_BxV, jax.random.fold_in(key, i), temperature, top_k)
    if with_logits:
      seen_BxNxV = seen_BxNxV.at[:, i].set(logits_BxV)
    return tokens_BxS.at[:, p + i].set(new_B), cache, built, seen_BxNxV

  tokens_BxS = jnp.zeros((b, size), jnp.int32).at[:, :p].set(prompt_BxP)
  vocab = model.embed.shape[0]
  seen_BxNxV = jnp.zeros((b, max_new_tokens if with_logits else 0, vocab), jnp.float32)
  tokens_BxS, _, _, seen_BxNxV = jax.lax.fori_loop(
    0, max_new_tokens, body, (tokens_BxS, cache, jnp.asarray(p), seen_BxNxV)
  )
  return tokens_BxS[:, p:], seen_BxNxV


def generate(
  graphdef,
  params,
  prompt_BxP,
  max_new_tokens: int,
  *,
  temperature: float = 0.0,
  top_k: int = 0,
  seed: int = 0,
  kernel: str = "dense",
  with_logits: bool = False,
):
  """The next `max_new_tokens` ids after each row of `prompt_BxP` (one document per row, from
  position 0: begin it with BOS as training does), int32 BxN; with `with_logits`, also the
  float32 BxNxV logits each was drawn from. `kernel` runs the prefill ("chunked" for long
  prompts); the steps are dense over the cache."""
  tokens_BxN, logits_BxNxV = _generate(
    params,
    jnp.asarray(prompt_BxP, jnp.int32),
    jax.random.key(seed),
    graphdef=graphdef,
    max_new_tokens=int(max_new_tokens),
    temperature=float(temperature),
    top_k=int(top_k),
    kernel=kernel,
    with_logits=with_logits,
  )
  if with_logits:
    return np.asarray(tokens_BxN), np.asarray(logits_BxNxV)
  return np.asarray(tokens_BxN)


# --- Command line: `python -m lcx.tools.generate` parses and checks its flags in
# lcx.tools.generate_cli, before jax is imported, which then calls `main` ---


def main(
  config,
  workdir: str,
  prompt: str,
  *,
  max_new_tokens: int,
  temperature: float,
  top_k: int,
  seed: int,
  eval_step: int | None,
) -> None:
  """Prints `prompt` and the run's continuation of it, and tokens/s on stderr; a bad value
  exits via `fail` (its flags and declared fields already passed lcx.tools.generate_cli)."""
  from lcx import errors
  from lcx.cli import fail
  from lcx.config import checks as config_lib
  from lcx.model import positions
  from lcx.run.metrics import say

  try:
    config_lib.check_code(config)  # generate_cli ran check_declared, before jax
  except ValueError as error:
    fail(str(error))
  from lcx.run import prepare  # orbax, grain, TFDS: seconds

  try:
    prepared = prepare.prepare(config, checked=True)
    cfg, tokenizer = prepared.config, prepared.tokenizer
    if top_k > cfg.model.vocab_size:
      raise errors.not_allowed(
        "--top_k", top_k, f"0..{cfg.model.vocab_size}, the vocabulary size (0: all tokens)"
      )
    prompt_P = np.concatenate([[tokenizer.bos_id], tokenizer.encode(prompt)])
    size = len(prompt_P) + max_new_tokens
    m = cfg.model
    positions.check_eval_length(
      m.position, positions.Dims(m.d_model, m.num_heads, m.head_dim, m.max_len), size
    )
    step, params, _ = prepare.restore(prepared, workdir, eval_step)
  except (ValueError, FileNotFoundError, errors.RunFault) as error:  # RunFault: unreadable ckpt
    fail(str(error))
  kernel = "chunked" if size >= cfg.eval.chunked_from else "dense"
  args = (params, jnp.asarray(prompt_P[None], jnp.int32), jax.random.key(seed))
  static = dict(
    graphdef=prepared.graphdef,
    max_new_tokens=max_new_tokens,
    temperature=float(temperature),
    top_k=top_k,
    kernel=kernel,
    with_logits=False,
  )
  start = time.perf_counter()
  program = _generate.lower(*args, **static).compile()
  compiled = time.perf_counter()
  tokens_N = np.asarray(jax.block_until_ready(program(*args)[0]))[0]
  seconds = time.perf_counter() - compiled
  ended = np.flatnonzero(tokens_N == tokenizer.eos_id)
  shown = tokens_N[: ended[0]] if ended.size else tokens_N
  print(prompt + tokenizer.decode(shown), flush=True)
  say(
    f"step {step}: {len(tokens_N)} tokens after a {len(prompt_P)}-token prompt in "
    f"{seconds:.3f} s ({len(tokens_N) / seconds:.1f} tokens/s; compiled in "
    f"{compiled - start:.1f} s)"
    + (f"; EOS after {ended[0]}, the rest not shown" if ended.size else "")
  )
