"""Generation: cached logits equal the full forward pass for every scheme, remap, RoPE scaling
and sparse pattern past the training length; sampling is seeded; greedy decoding reproduces a
trained copy task; the command line prints the continuation, and bad input is one error line."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lcx.config import checks as config_lib
from lcx.data import tasks
from lcx.model import patterns, positions
from lcx.model.decoder import Decoder
from lcx.model.positions import remaps
from lcx.run import prepare
from lcx.tools import generate
from lcx.tools.evaluate import runner as runner_lib, tasks as task_eval
from tests import pairwise
from tests.helpers import compiled, hooks_of, refused_before_jax, run_lcx, set_fields, tiny_config

L, P, S = 16, 10, 48  # training length, prompt, positions generated up to (3x L)
ROTARY = ("rope", "p_rope", "xpos")
REMAPS = {
  "none": {},
  "self_extend": {"window": 4, "group": 3},
  "rerope": {"window": 6},
  "dual_chunk": {"chunk_size": 6, "local_window": 2},
  "compress": {"alpha": 0.5},
  "streaming": {"sink": 2, "window": 6},
}
SCALINGS = {
  "default": {},
  "linear": {"factor": 2.0},
  "ntk": {"factor": 2.0},
  "dynamic": {"factor": 2.0},
  "yarn": {"factor": 3.0},
  "llama3": {"factor": 3.0, "low_freq_factor": 1.0, "high_freq_factor": 2.0},
  "longrope": {
    "factor": 3.0,
    "short_factor": (1.0, 1.1, 1.2, 1.3, 1.0, 1.0, 1.5, 2.0),
    "long_factor": (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0),
    "n_hat": 2,
  },
}
PATTERNS = {
  "dense": {},
  "sliding_window": {"window": 8},
  "block_global": {"block": 8},
  "strided": {"window": 4, "stride": 5},
  "streaming": {"sink": 2, "window": 6},
}


def _model(scheme, remap="none", rope_type="default", pattern="dense", options=None):
  """`options`: dotted fields under model (e.g. {"nope_every": 2}) set before building."""
  config = tiny_config(scheme)
  set_fields(config.model, options or {})
  cfg = config.model
  cfg.vocab_size, cfg.max_len = 259, L
  if scheme == "learned":
    cfg.position.max_len_policy = "clamp"  # positions past the table reuse its last row
  if scheme in ROTARY:
    cfg.position.scaling.update(rope_type=rope_type, **SCALINGS[rope_type])
  cfg.remap = remaps.default_config(remap)
  cfg.remap.update(REMAPS[remap])
  cfg.attention.pattern = patterns.default_config(pattern)
  cfg.attention.pattern.update(PATTERNS[pattern])
  model = Decoder(cfg, rngs=nnx.Rngs(0))
  zero_at_init = {"t5": "table_NxH", "cope": "embedding_NxE"}
  if scheme in zero_at_init:  # give the buckets (embeddings) values, so the scheme matters
    for layer in range(cfg.num_layers):  # CoPE: one table per layer
      table = getattr(model.position.for_layer(layer), zero_at_init[scheme])
      table[...] = jax.random.normal(jax.random.key(1 + layer), table[...].shape)
  return model


def _prefix_logits(model, seq_BxS):
  """Row (b, i): the last logits of the forward pass over seq[b, :P+i] alone. Each prefix is
  one packed document followed by another (the rest of the row), which it never sees and whose
  length it does not read (test_model: a packed document's logits are its own)."""
  b, s = seq_BxS.shape
  n = s - P
  lens_R = np.tile(P + np.arange(n), b)
  rows_RxS = np.repeat(seq_BxS, n, axis=0)
  seg_RxS = np.where(np.arange(s)[None] < lens_R[:, None], 1, 2)
  pos_RxS = np.broadcast_to(np.arange(s), rows_RxS.shape)
  logits = compiled(model)(rows_RxS, pos_RxS, seg_RxS)
  return np.asarray(logits)[np.arange(len(lens_R)), lens_R - 1].reshape(b, n, -1)


def _generate(model, prompt_BxP, **kwargs):
  graphdef, params = nnx.split(model, nnx.Param)
  return generate.generate(graphdef, params, prompt_BxP, S - P, with_logits=True, **kwargs)


def _prompt(batch=2):
  return np.random.default_rng(0).integers(0, 256, (batch, P)).astype(np.int32)


def _valid(case) -> bool:
  """A remap the scheme accepts; a RoPE scaling other than the default only on a rotary scheme."""
  scheme, remap, rope_type, _ = case
  return remaps.accepts(remap, scheme) and (rope_type == "default" or scheme in ROTARY)


def _kind(case) -> tuple:
  """What decides how each factor acts: a scheme, the position hooks it overrides (the cache
  holds what each hook made); a RoPE scaling, its name if it reads the current length (dynamic,
  longrope: the cache must not freeze it), else whether it rescales the frequencies at all (a
  fixed table, the same code path for linear, ntk, yarn and llama3)."""
  scheme, remap, rope_type, pattern = case
  per_length = positions.scaling.ROPE_TYPES[rope_type].per_length
  scaling = rope_type if per_length or rope_type == "default" else "fixed"
  return hooks_of(scheme), remap, scaling, pattern


# Every value of (scheme, remap, scaling, pattern) occurs, and every pair of their kinds that a
# valid case holds (the four act on different things: which hook, which positions, which
# frequencies, which keys; a fault from one value or the meeting of two shows): 47 of the 900
# valid cases. Run by default: 18 of them that hold every value, with the tiny model's two layers
# (a layer reading another's cache shows); the rest is slow, and one layer (a quarter of the
# compile time, which is most of a case's).
FACTORS = (list(positions.SCHEMES), list(REMAPS), list(SCALINGS), list(PATTERNS))
CASES = pairwise.pairwise(FACTORS, _valid, kind=_kind)
QUICK = set(pairwise.each_value(CASES))


def _marked(case):
  return pytest.param(*case, id="-".join(case), marks=() if case in QUICK else pytest.mark.slow)


@pytest.mark.parametrize("scheme,remap,rope_type,pattern", [_marked(c) for c in CASES])
def test_cached_logits_equal_the_full_forward_pass(scheme, remap, rope_type, pattern):
  """Prompt of 10, generated to 48 positions (3x the training length 16): the logits at every
  step equal the forward pass over the prefix so far (float32)."""
  layers = 2 if (scheme, remap, rope_type, pattern) in QUICK else 1
  model = _model(scheme, remap, rope_type, pattern, {"num_layers": layers})
  tokens_BxN, logits_BxNxV = _generate(model, _prompt())
  reference = _prefix_logits(model, np.concatenate([_prompt(), tokens_BxN], axis=1))
  assert np.isfinite(logits_BxNxV).all()
  np.testing.assert_allclose(logits_BxNxV, reference, atol=1e-4, rtol=1e-4)


# The attention options beside the scheme: each with a remap and a pattern too.
OPTIONS = {
  "schedule_log_n_qk_norm": {
    "nope_every": 2,
    "position_window": 5,
    "attention.temperature": "log_n",
    "qk_norm": True,
  },
  "ssmax_beta_sink": {
    "attention.temperature": "ssmax",
    "attention.beta_c": 0.5,
    "attention.sink": "learned",
  },
  "stick_breaking_log_n": {"attention.kind": "stick_breaking", "attention.temperature": "log_n"},
  "scale_invariant": {"attention.temperature": "scale_invariant"},
  "gate_llama4": {
    "nope_every": 2,
    "attention.gate": "elementwise",
    "attention.temperature": "llama4",
  },
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_cached_logits_equal_the_full_forward_pass_with_attention_options(name):
  model = _model("rope", "rerope", "default", "strided", OPTIONS[name])
  for i, block in enumerate(model.blocks):  # stick-breaking's remainder vectors: not 0
    if block.attn.remainder_HxE is not None:
      vector = block.attn.remainder_HxE
      vector[...] = jax.random.normal(jax.random.key(i), vector[...].shape)
  tokens_BxN, logits_BxNxV = _generate(model, _prompt())
  reference = _prefix_logits(model, np.concatenate([_prompt(), tokens_BxN], axis=1))
  assert np.isfinite(logits_BxNxV).all()
  np.testing.assert_allclose(logits_BxNxV, reference, atol=1e-4, rtol=1e-4)


def test_the_cases_cover_every_value_and_every_valid_pair_of_kinds():
  assert FACTORS[0] == list(positions.SCHEMES)
  assert set(FACTORS[1]) == set(remaps.REMAPS)
  assert set(FACTORS[2]) == set(positions.scaling.ROPE_TYPES)
  assert set(FACTORS[3]) == set(patterns.PATTERNS)
  product = [c for c in itertools.product(*FACTORS) if _valid(c)]
  assert set(CASES) <= set(product) and len(CASES) == len(set(CASES)) < len(product) / 10
  kinds, all_kinds = [_kind(c) for c in CASES], [_kind(c) for c in product]
  for i, j in itertools.combinations(range(len(FACTORS)), 2):
    assert {(k[i], k[j]) for k in kinds} == {(k[i], k[j]) for k in all_kinds}, (i, j)
  for i, values in enumerate(FACTORS):
    assert {c[i] for c in CASES} == {c[i] for c in QUICK} == set(values)
  assert {("embed",), ("rotate",), ("bias",), ("contextual",), ()} <= {k[0] for k in kinds}
  assert {k[2] for k in kinds} == {"default", "fixed", "dynamic", "longrope"}


@pytest.mark.parametrize("rope_type", ["dynamic", "longrope"])
def test_length_dependent_scalings_equal_the_prefix_run_alone(rope_type):
  """The reference itself, for the scalings that read the length: the prefix's own forward
  pass, model(tokens[:, :t]), before, at and past the training length."""
  model = _model("rope", rope_type=rope_type)
  tokens_BxN, logits_BxNxV = _generate(model, _prompt())
  seq = np.concatenate([_prompt(), tokens_BxN], axis=1)
  forward = jax.jit(lambda *a: model(*a)[:, -1])
  for t in (P, L, L + 1, S - 1):  # the logits after t tokens
    alone = forward(seq[:, :t], np.broadcast_to(np.arange(t), (2, t)), np.ones((2, t), np.int32))
    np.testing.assert_allclose(logits_BxNxV[:, t - P], alone, atol=1e-4, rtol=1e-4)


def test_a_cache_alone_would_not_do_for_a_length_dependent_scaling(monkeypatch):
  """Why generation runs the prefix again when the frequencies change: with two layers, the
  second layer's cached keys come from hidden states computed at an older length. Without the
  refill, dynamic NTK drifts from the forward pass once past the training length."""
  model = _model("rope", rope_type="dynamic")
  monkeypatch.setattr(generate, "_frequencies", lambda scheme: None)
  generate._generate.clear_cache()
  tokens_BxN, logits_BxNxV = _generate(model, _prompt())
  generate._generate.clear_cache()
  reference = _prefix_logits(model, np.concatenate([_prompt(), tokens_BxN], axis=1))
  gap_N = np.abs(logits_BxNxV - reference).max(axis=(0, 2))
  assert gap_N[: L - P].max() < 1e-4  # up to L the frequencies do not change
  assert gap_N[L - P + 1 :].min() > 1e-3


def test_the_cache_takes_its_own_size_only():
  model = _model("rope")
  model.init_cache(1, 8)
  with pytest.raises(ValueError, match="KV cache of 8 slots"):
    model(jnp.zeros((1, 5), jnp.int32), jnp.arange(5)[None], jnp.ones((1, 5), jnp.int32))


def test_chunked_prefill_equals_dense():
  model = _model("alibi", "self_extend")
  graphdef, params = nnx.split(model, nnx.Param)
  dense = generate.generate(graphdef, params, _prompt(), 6, with_logits=True)
  chunked = generate.generate(graphdef, params, _prompt(), 6, kernel="chunked", with_logits=True)
  np.testing.assert_array_equal(dense[0], chunked[0])
  np.testing.assert_allclose(dense[1], chunked[1], atol=1e-4, rtol=1e-4)


def test_fox_chunked_prefill_in_blocks_equals_dense():
  """The prefill's chunked kernel takes FoX's prefix sums block by block (4-token blocks, not
  dividing the 10-token prompt); each cached token's log gates then serve every step."""
  model = _model("fox", options={"attention.chunk_size": 4})
  graphdef, params = nnx.split(model, nnx.Param)
  dense = generate.generate(graphdef, params, _prompt(), 12, with_logits=True)
  chunked = generate.generate(graphdef, params, _prompt(), 12, kernel="chunked", with_logits=True)
  np.testing.assert_array_equal(dense[0], chunked[0])
  np.testing.assert_allclose(dense[1], chunked[1], atol=1e-4, rtol=1e-4)


def test_sampling_is_seeded_and_top_k_restricts_the_draw():
  model = _model("rope")
  graphdef, params = nnx.split(model, nnx.Param)

  def draw(**kw):
    return generate.generate(graphdef, params, _prompt(), 12, **kw)

  first = draw(temperature=1.0, top_k=5, seed=3)
  np.testing.assert_array_equal(first, draw(temperature=1.0, top_k=5, seed=3))
  assert not np.array_equal(first, draw(temperature=1.0, top_k=5, seed=4))
  logits = jnp.asarray(np.random.default_rng(0).normal(size=(4, 50)), jnp.float32)
  top3 = np.argsort(-np.asarray(logits), axis=-1)[:, :3]
  draw_k = jax.jit(jax.vmap(lambda key: generate.sample(logits, key, 2.0, 3), out_axes=1))
  drawn = np.asarray(draw_k(jax.random.split(jax.random.key(0), 64)))
  assert all(set(drawn[b]) <= set(top3[b]) for b in range(4))
  assert len(set(drawn[0])) == 3  # all three, at temperature 2
  for temperature, top_k in ((0.0, 0), (1.0, 1)):  # greedy, and a draw from one token
    np.testing.assert_array_equal(
      generate.sample(logits, jax.random.key(0), temperature, top_k),
      np.argmax(np.asarray(logits), -1),
    )


# --- A tiny copy-task model: greedy generation and the command line. ---


@pytest.mark.slow
def test_greedy_generation_reproduces_the_copy_task(copy_run):
  """Greedy decoding is right exactly where teacher-forced argmax is (the evaluation's exact
  match), and the trained model (conftest's, sizes 1-6) copies."""
  config, workdir = copy_run
  prepared = prepare.prepare(config)
  step, _ = prepare.checkpoint_meta(workdir)
  params = prepare.restore_params(prepared, workdir, step)
  examples = tasks.eval_examples("copy", 4, 32, seed=1)
  teacher_forced, _ = task_eval.hits(runner_lib.Runner(prepared, params), examples)
  out = generate.generate(prepared.graphdef, params, np.stack([p for p, _ in examples]), 5)
  greedy = np.array([tasks.exact_match(o, a) for o, (_, a) in zip(out, examples)])
  np.testing.assert_array_equal(greedy, teacher_forced)
  assert greedy.mean() >= 0.9


@pytest.mark.slow
def test_command_line_prints_the_continuation(copy_run):
  """The prompt and its greedy (or seeded sampled) continuation, cut at an EOS: what the
  library generates from BOS + the prompt's bytes (a task model is not trained to stop)."""
  config, workdir = copy_run
  prepared = prepare.prepare(config)
  params = prepare.restore_params(prepared, workdir, prepare.checkpoint_meta(workdir)[0])

  def expected(text, new, **kw):
    ids = list(generate.generate(prepared.graphdef, params, [[256, *text.encode()]], new, **kw)[0])
    return text + prepared.tokenizer.decode(ids[: ids.index(257)] if 257 in ids else ids)

  proc = run_lcx(
    [f"--workdir={workdir}", "--prompt=dbca=", "--max_new_tokens=8"], module="lcx.tools.generate"
  )
  assert proc.stdout == expected("dbca=", 8) + "\n"
  assert proc.stdout.startswith("dbca=dbca")
  assert "8 tokens after a 6-token prompt" in proc.stderr and "tokens/s" in proc.stderr
  sampled = dict(temperature=1.5, top_k=50, seed=7)
  proc = run_lcx(
    [
      f"--workdir={workdir}",
      "--prompt=ab=",
      "--max_new_tokens=6",
      *(f"--{k}={v}" for k, v in sampled.items()),
    ],
    module="lcx.tools.generate",
  )
  assert proc.stdout == expected("ab=", 6, **sampled) + "\n"
  proc = run_lcx(
    [f"--workdir={workdir}", "--prompt=ab=", "--config.model.d_model=32"],
    module="lcx.tools.generate",
    check=False,
  )
  assert proc.returncode == 2 and proc.stdout == ""
  assert proc.stderr.strip().splitlines()[-1].startswith("error: model.d_model=32 differs")


@pytest.mark.parametrize(
  "args,message",
  [
    (["--prompt=x"], "error: flag --workdir=None"),
    (["--workdir={tmp}", "--prompt=x"], "holds no run (config.json)"),
    (["--workdir={tmp}", "--prompt=x", "--max_new_tokens=0"], "--max_new_tokens=0"),
    (["--workdir={tmp}", "--prompt=x", "--temperature=-1"], "--temperature=-1"),
    (["--workdir={tmp}", "--prompt=x", "--top_k=abc"], "--top_k=abc"),
  ],
)
def test_bad_flags_are_one_error_line(args, message, tmp_path):
  proc = run_lcx([a.format(tmp=tmp_path) for a in args], module="lcx.tools.generate", check=False)
  assert proc.returncode == 2 and proc.stdout == ""
  lines = [x for x in proc.stderr.strip().splitlines() if x]
  assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


@pytest.mark.parametrize(
  "args, message",
  [
    (
      ["--prompt=x", "--config.model.position.name=bogus"],
      "model.position.name='bogus' is not allowed; allowed: alibi, cope, fire, ",
    ),
    (
      ["--prompt=x", "--config.model.positon.name=rope"],
      "model.positon is not a known field; allowed: attention, d_model, ",
    ),
    (["--promt=x"], "Unknown command line flag 'promt'. Did you mean: prompt ?"),
    (["--prompt=caf\udce9"], "--prompt is not UTF-8 text: byte 0xe9 at character 3"),
  ],
)
def test_a_bad_flag_or_field_is_refused_before_jax_is_imported(args, message, tmp_path):
  """lcx.tools.generate hands its command line to lcx.tools.generate_cli before its own imports: the
  flags, the prompt and the run's declared fields are checked with no jax loaded."""
  config_lib.save(tiny_config(), str(tmp_path))  # a run's config.json, the default config
  error = refused_before_jax([f"--workdir={tmp_path}", *args], module="lcx.tools.generate")
  assert error.startswith("error: " + message), error
