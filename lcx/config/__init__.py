"""A run's config: its fields, one record each (fields.py; the model's in lcx/model/options.py, the
data's beside the data), the defaults built from them (defaults.py), the checks that run before
anything compiles (checks.py), what a resume may change (changes.py), evaluation variants
(variants.py) and protocols (protocols.py), a trained run's own config (run_config.py) and
`./launch.sh config` (listing.py). Jax-free; lcx.run, lcx.tools and the entry points import it,
never the reverse."""
