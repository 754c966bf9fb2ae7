"""The tools users call on runs and results: evaluation, reports, sweeps, the LongRoPE
search, generation, analysis, export, notebooks, the quickstart and the benchmarks. Each reads
checkpoints or result files and builds on lcx.model.decoder and lcx.run."""
