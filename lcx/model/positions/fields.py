"""Every position scheme's and remap's config fields, declared once and without jax: the defaults
(lcx/config/defaults.py), the field checks that run before jax loads (lcx/config/checks.py),
`./launch.sh config` and docs/schemes.md's scheme table read these records, and the flax modules
register their classes under these names (lcx/model/positions/base.py, remaps.py) with no defaults
of their own. A check that needs the model's dimensions (an even d_model, the rotary dim, the
scaling dict) stays with the module that builds the scheme."""

from __future__ import annotations

from typing import Any, Callable

import ml_collections

from lcx import errors
from lcx.field import Field, Section, Unset, positive
from lcx.model.positions.registry import check_fields, to_config

SCHEME_PREFIX, REMAP_PREFIX = "model.position", "model.remap"


def _is(kind):
  return lambda v: isinstance(v, kind) and not isinstance(v, bool)


def _one_of(*values) -> Callable[[Any], bool]:
  return lambda v: v in values


# Every field a rotary scheme's `scaling` sub-dict holds (lcx/model/positions/scaling.py checks them
# per rope type). None (Unset) means "no value": each rope type says which fields it reads; a
# field it does not read must keep its default.
SCALING_DEFAULTS = {
  "rope_type": "default",
  "factor": Unset(float),  # s >= 1; required by every type but "default"
  "original_max_position_embeddings": Unset(int),  # L; None: the training length
  "beta_fast": 32.0,  # yarn
  "beta_slow": 1.0,  # yarn
  "mscale": Unset(float),  # yarn
  "mscale_all_dim": Unset(float),  # yarn
  "attention_factor": Unset(float),  # yarn, longrope; None: the paper's formula
  "truncate": True,  # yarn
  "low_freq_factor": 1.0,  # llama3
  "high_freq_factor": 4.0,  # llama3
  "short_factor": Unset(tuple),  # longrope: d/2 rescale factors used up to L
  "long_factor": Unset(tuple),  # longrope: d/2 rescale factors used beyond L
  "n_hat": 0,  # longrope: positions < n_hat keep the unscaled frequencies
  "max_position_embeddings": Unset(int),  # longrope: factor = this / L when factor is unset
  "rope_theta": Unset(float),  # every type: must equal the scheme's base (a trained field)
  "partial_rotary_factor": Unset(float),  # every type: int(head_dim * this) must be rotary_dim
  "mrope_section": Unset(tuple),  # HF multimodal RoPE: not supported, ignored with a warning
  "resonance": False,  # every type: Resonance RoPE, wavelengths rounded to integers (lcx only)
}

PAIRINGS = ("interleaved", "rotate_half")  # lcx/model/positions/rotary.py's feature pairings
MAX_LEN_POLICIES = ("clamp", "error")  # lcx/model/positions/absolute.py's lookups past the table
FIRE_INITS = ("linear", "normal")
KERPLE_INITS = ("uniform", "constant")
KERPLE_EPS = 1e-2  # the reference's lower bound on r1 and r2
KERPLE_POWER_MAX = 2.0  # r2 <= 2: |i - j|^r2 is conditionally positive definite only there

ROTARY = (
  Field(
    "base",
    10000.0,
    "theta_i = base^(-2i/d)",
    lambda v: v > 1,
    "> 1 (theta_i = base^(-2i/d) must fall with i; Llama 2: 10000, Llama 3: 500000)",
  ),
  Field(
    "pairing", "rotate_half", "which features form a pair", _one_of(*PAIRINGS), ", ".join(PAIRINGS)
  ),
  Field("rotary_dim", Unset(int), "features rotated, even (None: head_dim)"),
  Field("scaling", SCALING_DEFAULTS, "a Hugging Face rope_scaling dict, changeable at evaluation"),
)
KERPLE = (
  Field(
    "init",
    "uniform",
    "uniform: r1, r2 from U(0, *_init); constant: at *_init",
    _one_of(*KERPLE_INITS),
    f"one of {KERPLE_INITS}",
  ),
  Field(
    "eps", KERPLE_EPS, "lower bound of r1 and r2", positive, "> 0 (the lower bound of r1 and r2)"
  ),
)


def _kerple(r1: float, r2: float, r2_max: float | None) -> tuple[Field, ...]:
  fields = (
    Field("r1_init", r1, "r1's initial value (per head)", positive, "> 0"),
    Field("r2_init", r2, "r2's initial value (per head)", positive, "> 0"),
    *KERPLE,
  )
  if r2_max is None:
    return fields
  return (
    *fields[:1],
    Field(
      "r2_init",
      r2,
      "r2's initial value (per head), the power's exponent",
      lambda v: 0 < v <= r2_max,
      f"in (0, {r2_max:g}] (the power's exponent)",
    ),
    KERPLE[0],
    Field(
      "eps",
      KERPLE_EPS,
      "lower bound of r1 and r2",
      lambda v: 0 < v <= r2_max,
      f"in (0, {r2_max:g}] (r2 lies in [eps, {r2_max:g}])",
    ),
  )


SCHEMES: dict[str, Section] = {
  "nope": Section("no position signal"),
  "sinusoidal": Section(
    "fixed sinusoidal embeddings added at the input",
    (Field("base", 10000.0, "wavelengths up to 2 pi base"),),
  ),
  "learned": Section(
    "a learned position table added at the input",
    (
      Field(
        "num_positions",
        Unset(int),
        "table rows (None: model.max_len)",
        lambda v: v >= 1,
        ">= 1 (None: model.max_len)",
      ),
      Field(
        "max_len_policy",
        "error",
        "past the table: error, or clamp to the last row",
        _one_of(*MAX_LEN_POLICIES),
        ", ".join(MAX_LEN_POLICIES),
      ),
    ),
  ),
  "alibi": Section("a linear distance penalty, one slope per head"),
  "t5": Section(
    "a learned bias per head and log-spaced distance bucket",
    (
      Field("num_buckets", 32, "distance buckets (per direction when bidirectional)"),
      Field("max_distance", 128, "distances past this share the last bucket"),
      Field("bidirectional", False, "separate buckets for later keys"),
    ),
  ),
  "fire": Section(
    "a learned MLP of the normalized log distance",
    (
      Field("hidden", 32, "the MLP's hidden width", positive, "> 0"),
      Field("c_init", 0.1, "initial c of the log transform", positive, "> 0"),
      Field(
        "threshold_init",
        Unset(float),
        "the learned threshold's initial value (None: L)",
        positive,
        "> 0 (None: the training length model.max_len)",
      ),
      Field(
        "init",
        "linear",
        "linear: nn.Linear's uniform init; normal: zero biases",
        _one_of(*FIRE_INITS),
        f"one of {FIRE_INITS}",
      ),
    ),
  ),
  "kerple_log": Section("-r1 ln(1 + r2 |i-j|), r1, r2 learned per head", _kerple(2.0, 1.0, None)),
  "kerple_power": Section(
    "-r1 |i-j|^r2, r2 <= 2, learned per head", _kerple(1.0, 2.0, KERPLE_POWER_MAX)
  ),
  "sandwich": Section(
    "inner products of sinusoidal embeddings, no parameters",
    (
      Field(
        "dim",
        128,
        "sinusoidal embedding width",
        lambda v: _is(int)(v) and v >= 2 and v % 2 == 0,
        "an even integer >= 2",
      ),
      Field("base", 10000.0, "wavelengths up to 2 pi base", lambda v: v > 1, "> 1"),
      Field("compression", 8.0, "divides the bias, times h/H per head", positive, "> 0"),
    ),
  ),
  "rope": Section("rotary positions", ROTARY),
  "p_rope": Section(
    "RoPE keeping the highest frequencies",
    (
      *ROTARY,
      Field(
        "p",
        0.75,
        "fraction of the pairs rotated",
        lambda v: 0 <= v <= 1,
        "in [0, 1] (0: NoPE, 1: RoPE)",
      ),
    ),
  ),
  "xpos": Section(
    "RoPE with per-position scales",
    (*ROTARY, Field("scale_base", 512.0, "the scales' length unit", positive, "> 0")),
  ),
  "cope": Section(
    "contextual positions: counted sigmoid gates",
    (
      Field(
        "npos_max",
        Unset(int),
        "embeddings (positions clamp below it; None: L + 1)",
        lambda v: v >= 2,
        ">= 2 (None: the training length model.max_len + 1)",
      ),
      Field("shared", False, "one table for all layers (else one per layer)"),
    ),
  ),
  "fox": Section(
    "NoPE plus a forget gate per block, token and head",
    (
      Field("bias_init", 0.0, "the gate's initial bias"),
      Field(
        "weight_std",
        Unset(float),
        "the gate weights' init std (None: 1/sqrt(d_model))",
        positive,
        "> 0 (None: 1/sqrt(model.d_model))",
      ),
    ),
  ),
  "path": Section(
    "Householder transforms between query and key",
    (
      Field(
        "rank",
        32,
        "the low-rank projection's rank (0: full)",
        lambda v: _is(int)(v) and v >= 0,
        "an integer >= 0 (0: a full d_model x kv heads x head_dim projection)",
      ),
      Field(
        "conv_size",
        3,
        "tokens of the short convolution (0: none)",
        lambda v: _is(int)(v) and v >= 0,
        "an integer >= 0 (0: no short convolution)",
      ),
    ),
  ),
}

# The remaps' fields; their checks stay in lcx/model/positions/remaps.py (window, chunk sizes).
REMAPS: dict[str, Section] = {
  "none": Section("positions as they are"),
  "self_extend": Section(
    "neighbours exact, farther keys grouped",
    (Field("window", 128, "exact neighbours"), Field("group", 4, "positions per group")),
  ),
  "rerope": Section(
    "distances past the window fixed at the window",
    (
      Field("window", 128, "exact neighbours"),
      Field("log_n_scaling", True, "queries times max(1, ln(i+1)/ln(L))"),
    ),
  ),
  "compress": Section(
    "positions past start compressed by alpha",
    (Field("alpha", 0.5, "slope past start"), Field("start", Unset(int), "None: L")),
  ),
  "streaming": Section(
    "StreamingLLM's cache slots",
    (Field("sink", 4, "first tokens kept"), Field("window", 128, "last keys kept")),
  ),
  "dual_chunk": Section(
    "Dual Chunk Attention",
    (
      Field("chunk_size", Unset(int), "None: 3L/4"),
      Field("local_window", Unset(int), "None: L/16"),
    ),
  ),
}


def _section(records: dict[str, Section], prefix: str, name: str) -> Section:
  if name not in records:
    raise errors.not_allowed(f"{prefix}.name", name, sorted(records))
  return records[name]


def check(cfg, records: dict[str, Section], prefix: str) -> None:
  """Raises ValueError naming the field: an unknown name, an unknown field, a bad value."""
  section = _section(records, prefix, cfg.name)
  check_fields(cfg, section.defaults, prefix)
  section.check(cfg, prefix)


def default_config(name: str) -> ml_collections.ConfigDict:
  """The scheme's `model.position` sub-dict: `name` plus every field with its default."""
  return to_config({"name": name, **_section(SCHEMES, SCHEME_PREFIX, name).defaults})


def remap_config(name: str = "none") -> ml_collections.ConfigDict:
  """The remap's `model.remap` sub-dict: `name` plus every field with its default."""
  return to_config({"name": name, **_section(REMAPS, REMAP_PREFIX, name).defaults})


def _cell(text: str) -> str:
  return text.replace("|", "\\|")


def _shown(default) -> str:
  if isinstance(default, Unset):
    return "None"
  return "a dict" if isinstance(default, dict) else repr(default)


def markdown() -> str:
  """The scheme table of docs/schemes.md: a row per field (per scheme without fields)."""
  rows = ["| scheme | what | field | default | allowed | field's meaning |", "|---" * 6 + "|"]
  for name, section in SCHEMES.items():
    for i, f in enumerate(section.fields or (None,)):
      head = f"| `{name}` | {_cell(section.doc)} |" if i == 0 else "| | |"
      if f is None:
        rows.append(f"{head} | | | |")
      else:
        cells = (f"`{f.name}`", f"`{_shown(f.default)}`", _cell(f.wording), _cell(f.doc))
        rows.append(f"{head} {' | '.join(cells)} |")
  return "\n".join(rows)


if __name__ == "__main__":
  print(markdown())
