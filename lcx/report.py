"""Plots from results files: the 'train short, test long' curves people would rather look at."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_length_sweep(results_by_name: dict[str, dict], path: str, title: str = "") -> str:
  """Perplexity against eval length (log2 x axis), one line per run, training length marked."""
  fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
  train_len = None
  for name, r in results_by_name.items():
    lengths = sorted(int(n) for n in r["lengths"])
    ax.plot(lengths, [r["lengths"][str(n)]["perplexity"] for n in lengths], marker="o",
            label=name)
    train_len = r["train_len"]
    ax.set_xticks(lengths, [str(n) for n in lengths])
  if train_len:
    ax.axvline(train_len, color="gray", linestyle="--", linewidth=1, label="train length")
  ax.set_xscale("log", base=2)
  ax.set_xlabel("evaluation length (tokens)")
  ax.set_ylabel("perplexity per token")
  ax.set_title(title or "perplexity by evaluation length")
  ax.grid(True, alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)
  return path
