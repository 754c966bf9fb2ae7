"""Inside a trained model, at and past its training length L: attention maps, entropy, attention
sinks, head types, logit statistics and the norm of q and k per rotary frequency pair.

Every function takes a restored checkpoint (`load`: the run's config and parameters, nothing
else) and a batch of tokens, and works for every scheme and remap because nothing here
re-derives attention: q and k are what the model's own blocks hand to the kernel (`qk` records
them), and the logits come from `lcx.model.attention`'s public logits (`attention.logits` of a
`prepare_dense` plan; for chosen query rows, its parts over a `prepare_chunked` plan: `rotate`,
`scores`, `add_prefix`, `visible`, `with_contextual`), with an input hook's prefix sums as the
block handed them and PaTH's Householders as the kernel received them, so they are the numbers
the kernels compute.
Up to `DENSE_MAX` tokens
every query row is computed; beyond, only chosen rows (`default_rows`), in blocks, so memory
stays O(rows x T).
The statistics are numpy functions of those maps.

Thresholds (`classify_heads`), mean attention mass over queries with at least `min_context`
tokens of their document before them:
  previous-token  mass on the key one token back >= 0.5
  sink            mass on the document's first token >= 0.5 (attention sink)
  positional      mass on one fixed offset other than 1 (0: itself, 2, 3, ...) >= 0.5: a
                  diagonal in the attention map
  content         none of these: where it looks depends on the tokens

The package, by concern: `capture` restores a model (`load`, `with_params`) and records q and k
(`qk`); `maps` computes the attention maps; `stats` their statistics and head types; `bands` the
rotary frequency bands. The names below are what notebooks, tests and other modules use; the
constants are read where they are defined (patch `lcx.tools.analysis.maps.ROW_BLOCK`, not this
package's copy).
"""

from lcx.tools.analysis.bands import (
  Bands,
  frequency_bands,
  pair_norms,
  rotary_frequencies,
  wavelengths,
)
from lcx.tools.analysis.capture import QK, Model, load, qk, with_params
from lcx.tools.analysis.maps import (
  DEFAULT_ROWS,
  DENSE_MAX,
  ROW_BLOCK,
  Maps,
  attention_maps,
  default_rows,
)
from lcx.tools.analysis.stats import (
  MAX_OFFSET,
  MIN_CONTEXT,
  THRESHOLD,
  Heads,
  by_position,
  classify_heads,
  entropy,
  head_table,
  length_sweep,
  logit_samples,
  logit_stats,
  mean_over_queries,
  offset_mass,
  query_stats,
)

__all__ = [
  "Bands",
  "DEFAULT_ROWS",
  "DENSE_MAX",
  "Heads",
  "MAX_OFFSET",
  "MIN_CONTEXT",
  "Maps",
  "Model",
  "QK",
  "ROW_BLOCK",
  "THRESHOLD",
  "attention_maps",
  "by_position",
  "classify_heads",
  "default_rows",
  "entropy",
  "frequency_bands",
  "head_table",
  "length_sweep",
  "load",
  "logit_samples",
  "logit_stats",
  "mean_over_queries",
  "offset_mass",
  "pair_norms",
  "qk",
  "query_stats",
  "rotary_frequencies",
  "wavelengths",
  "with_params",
]
