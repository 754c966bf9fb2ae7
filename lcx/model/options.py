"""The model's config fields (`model.*`), one record each, declared without jax: lcx.config builds
the defaults and checks a run's fields from them before jax is imported, and the modules that
implement each option (attention, temperature, gating, kernels, the decoder) read its allowed
values from here, below all of them, so no import cycle forms."""

from lcx.field import Field, Section, at_least, boolean, count, positive
from lcx.model import patterns
from lcx.model.positions import fields as position_fields

MLPS = ("gelu", "swiglu")  # model.mlp (lcx/model/decoder.py)
DTYPES = ("float32", "bfloat16")  # model.dtype (lcx/model/decoder.py's DTYPES)
# model.remat: what the backward pass recomputes (lcx/model/decoder.py's REMAT_POLICIES):
#   none     nothing: autodiff keeps every intermediate it needs
#   block    everything: each block keeps only its input and runs again in the backward
#   matmuls  the elementwise steps: each block keeps its matmuls' outputs (q, k, v, the
#            attention's output and log-sum-exp, the output projection, the MLP's
#            pre-activations: decoder.KEPT) and recomputes the norms, the rotations (no rotated q
#            or k is kept), the MLP's activation and, on the XLA path, the T x T probabilities
REMATS = ("none", "block", "matmuls")
# model.qk_norm_over: one RMSNorm per head (Qwen 3, Gemma 3) | one over all heads' features at once
# (OLMo 2; the DroPE reference's recalibration), each with a learned scale from 1
QK_NORM_OVER = ("head", "heads")
TEMPERATURES = ("none", "log_n", "ssmax", "scale_invariant", "llama4")  # lcx/model/temperature.py
SSMAX_N = ("keys", "position")  # model.attention.ssmax_n: what SSMax's n counts
SINKS = ("none", "learned")  # model.attention.sink (lcx/model/attention.py's _softmax)
GATES = ("none", "elementwise", "headwise")  # model.attention.gate (lcx/model/gating.py's GATES)
KINDS = ("softmax", "stick_breaking")  # model.attention.kind: which attend the kernels run
IMPLS = ("auto", "xla", "pallas")  # model.attention.impl (lcx/model/kernels/impl.py)


def is_block_size(value) -> bool:
  """A power of two >= 1 (the GPU lowering's block shapes): model.attention.block_size."""
  return (
    isinstance(value, int)
    and not isinstance(value, bool)
    and value >= 1
    and not value & (value - 1)
  )


def _one_of(values: tuple) -> dict:
  """The options worded "one of ('a', 'b')", as their errors always said."""
  return {"ok": lambda v: v in values, "allowed": f"one of {values}"}


ATTENTION = Section(
  "the attention kernel and its options",
  (
    Field(
      "pattern",
      patterns.default_config,
      "a sparse attention pattern; --config.model.attention.pattern.name=X brings X's fields",
    ),
    Field("chunk_size", 512, "query chunk of the chunked kernel", at_least(1), ">= 1"),
    Field(
      "temperature",
      "none",
      "logit temperature (lcx/model/temperature.py), trained",
      **_one_of(TEMPERATURES),
    ),
    Field(
      "si_tau",
      10.0,
      "scale_invariant's length scale tau (the paper's 10)",
      positive,
      "a number > 0 (scale-invariant attention's tau)",
    ),
    Field(
      "beta_c",
      0.0,
      "C of the eval-time factor 1 + C ln(T/L) past the training length (variant beta@C; 0: off)",
      at_least(0),
      "a number >= 0 (0: off)",
    ),
    Field(
      "ssmax_n",
      "keys",
      "SSMax's n: keys (the keys each query sees, the paper's) | position (position + 1)",
      **_one_of(SSMAX_N),
    ),
    Field("sink", "none", "none | learned: a per-head sink logit (gpt-oss)", **_one_of(SINKS)),
    Field(
      "gate",
      "none",
      "a sigmoid gate from the block input on each head's output (lcx/model/gating.py)",
      **_one_of(GATES),
    ),
    Field(
      "kind",
      "softmax",
      "softmax | stick_breaking (lcx/model/stick_breaking.py: weights summing to <= 1, no sink)",
      **_one_of(KINDS),
    ),
    Field(
      "impl",
      "auto",
      "auto: the Pallas flash kernel on GPU, the XLA kernels on CPU and TPU (lcx/model/kernels)",
      allowed=IMPLS,
    ),
    Field(
      "block_size",
      128,
      "the Pallas kernel's query and key block",
      is_block_size,
      "a power of two >= 1",
    ),
    Field(
      "remainder_bias",
      True,
      "stick_breaking only: the stick's remainder times a learned vector per head joins the output",
      boolean,
      "True or False",
    ),
  ),
)

# The fields of `model`; the size= presets (lcx/config/defaults.py) replace the widths and depths.
MODEL = Section(
  "the decoder: every field but the eval-time ones (lcx/config/variants.py) is trained",
  (
    Field(
      "vocab_size",
      0,
      "0: the tokenizer's vocabulary size",
      at_least(0),
      ">= 0 (0: the tokenizer's)",
    ),
    Field("d_model", 256, "residual width (size=)", at_least(1), ">= 1"),
    Field("num_layers", 4, "decoder blocks (size=)", at_least(1), ">= 1"),
    Field("num_heads", 4, "query heads (size=)", at_least(1), ">= 1"),
    Field("num_kv_heads", 4, "fewer for grouped-query attention", at_least(1), ">= 1"),
    Field("head_dim", 64, "features per head", at_least(1), ">= 1"),
    Field("mlp", "gelu", "gelu | swiglu", allowed=MLPS),
    Field("mlp_dim", 1024, "MLP hidden width (size=)", at_least(1), ">= 1"),
    Field("tie_embeddings", False, "True: the output layer reuses the input embedding"),
    Field("dtype", "float32", "compute dtype; parameters stay float32", allowed=DTYPES),
    Field(
      "remat",
      "none",
      "block: recompute each block in the backward pass (least memory, about a third more "
      "compute); matmuls: keep each block's matmul outputs, recompute the elementwise steps",
      allowed=REMATS,
    ),
    Field("norm_eps", 1e-6, "RMSNorm epsilon", positive, "> 0"),
    Field(
      "qk_norm",
      False,
      "True: RMSNorm (learned scale) on q and k per head, before RoPE",
      boolean,
      "True or False",
    ),
    Field(
      "qk_norm_over",
      "head",
      "head: each head's q and k on their own (Qwen 3, Gemma 3) | heads: all heads' (OLMo 2)",
      **_one_of(QK_NORM_OVER),
    ),
    Field("max_len", 256, "the training length L (data.seq_len)"),
    Field(
      "position",
      lambda: position_fields.default_config("rope"),
      "the position scheme picked by pos=, with its fields",
    ),
    Field(
      "remap",
      position_fields.remap_config,
      "a training-free position remap; --config.model.remap.name=X brings X's fields",
    ),
    Field(
      "nope_every",
      0,
      "every nope_every-th block without positions (0: none)",
      count,
      "an int >= 0 (0: every block has positions)",
    ),
    Field(
      "position_window",
      0,
      "the blocks with positions attend only to the last position_window keys (0: all)",
      count,
      "an int >= 0 (0: no window)",
    ),
    Field("attention", ATTENTION, "the attention kernel and its options"),
  ),
)
