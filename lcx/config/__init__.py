"""A run's config: its fields' declarations and defaults (defaults.py), the checks that run before
anything compiles (checks.py), evaluation variants (variants.py) and protocols (protocols.py), a
trained run's own config (run_config.py) and `./launch.sh config` (listing.py). Jax-free; lcx.run,
lcx.tools and the entry points import it, never the reverse."""
