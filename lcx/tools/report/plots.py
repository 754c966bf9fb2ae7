"""The PNG plots: matplotlib only here, imported only when a plot is drawn."""

from __future__ import annotations

import os
from collections.abc import Sequence

from lcx import files
from lcx.tools.report import lengths, tables, tasks


def _pyplot():
  import matplotlib  # only the plots need it; tables and CSV do not

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


MANY_LINES = 10  # more lines than this: 20 colors x line styles, legend outside the axes
MANY_BANDS = 4  # more variants than this in a panel: one CI band (the first's), legend outside


def _subplots(n: int, width: float = 6.0, height: float = 4.0, cols: int = 2):
  plt = _pyplot()
  cols = min(n, cols)
  rows = -(-n // cols)
  fig, axes = plt.subplots(
    rows, cols, figsize=(width * cols, height * rows), dpi=110, squeeze=False
  )
  for ax in axes.flat[n:]:
    ax.set_visible(False)
  return fig, list(axes.flat[:n])


def _line_panels(groups):
  """A panel per group of lines: two columns, or past MANY_LINES one wider column tall enough
  for the legend outside the axes."""
  most = max(map(len, groups))
  many = most > MANY_LINES
  height = max(4.0, 0.18 * (most + 1))  # room for an outside legend
  return _subplots(len(groups), width=8.0 if many else 6.0, height=height, cols=1 if many else 2)


def _band_alpha(count: int) -> float:
  """CI band opacity: many overlapping bands turn to mud."""
  return 0.2 if count <= MANY_LINES else 0.06


def _save(fig, path: str) -> str:
  """The PNG whole or not at all, as report.md: a kill mid-savefig leaves the earlier plot."""
  fig.tight_layout()
  with files.atomic_open(path, "wb") as f:
    kind = os.path.splitext(path)[1][1:] or None  # savefig cannot read it from a file object
    # bbox_inches="tight" keeps outside legends
    fig.savefig(f, format=kind, metadata={"Software": None}, bbox_inches="tight")
  _pyplot().close(fig)
  return path


def _mark_train_lengths(ax, train_lens) -> None:
  for i, n in enumerate(sorted(set(train_lens))):
    ax.axvline(
      n, color="gray", linestyle="--", linewidth=1, label=f"train length {n}" if i < 3 else None
    )


def length_tick(n: int) -> str:
  """A length axis label short enough that neighbours on a log2 axis do not run together in a
  narrow panel: 1024 -> 1k, 1536 -> 1536."""
  return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _length_axes(ax, ticks, ylabel: str, values, legend_outside: bool = False) -> None:
  ax.set_xscale("log", base=2)
  ax.set_xticks(ticks, [length_tick(n) for n in ticks])
  ax.minorticks_off()
  values = [v for v in values if v and v > 0]
  if values and max(values) / min(values) > 20:  # a blown-up scheme would flatten the rest
    from matplotlib import ticker

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
  ax.set_xlabel("evaluation length (tokens)")
  ax.set_ylabel(ylabel)
  ax.grid(True, alpha=0.3)
  if legend_outside or len(ax.get_lines()) > MANY_LINES:
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
  else:
    ax.legend(fontsize=7)


def _line_style(i: int, count: int) -> dict:
  """Matplotlib's 10 default colors up to MANY_LINES lines; past that tab20's 20 colors, each
  round of 20 in the next line style, so no two lines of a panel look alike."""
  if count <= MANY_LINES:
    return {}
  color = _pyplot().get_cmap("tab20")(i % 20)
  return {"color": color, "linestyle": ("-", "--", ":", "-.")[(i // 20) % 4]}


def _plot_metric_lines(ax, results, metric: str, row_label, crowded: bool = False) -> None:
  """One line per result over its lengths, with its CI band where recorded (crowded: only the
  first result's band, the reference the others are read against, and the legend outside)."""
  seen, values = set(), []
  band = _band_alpha(len(results))
  for i, r in enumerate(results):
    ns = sorted(int(n) for n in r["lengths"] if r["lengths"][n].get(metric) is not None)
    ys = [r["lengths"][str(n)][metric] for n in ns]
    (line,) = ax.plot(
      ns, ys, marker="o", markersize=3, label=row_label(r), **_line_style(i, len(results))
    )
    cis = [r["lengths"][str(n)].get(f"{metric}_ci") for n in ns]
    if ns and all(ci and ci[0] is not None for ci in cis) and not (crowded and i):
      ax.fill_between(
        ns,
        [c[0] for c in cis],
        [c[1] for c in cis],
        color=line.get_color(),
        alpha=band,
        linewidth=0,
      )
      values += [c[0] for c in cis] + [c[1] for c in cis]
    seen.update(ns)
    values += ys
  _mark_train_lengths(ax, [r["train_len"] for r in results if r.get("train_len")])
  _length_axes(
    ax,
    sorted(seen),
    metric.replace("_", " ") + " per token" if metric == "perplexity" else metric.replace("_", " "),
    values,
    legend_outside=crowded,
  )


def plot_perplexity(results: Sequence[dict], path: str, title: str = "") -> str | None:
  """Perplexity against eval length (log2 x), a line and 95% CI band per result, training
  length dashed; one panel per protocol. Where runs have seeds (STEM-s<seed>), a line per stem
  instead: the seeds' mean with bars over their range (`length_lines`), so 3 seeds of 25 rows
  stay 25 lines."""
  groups = tables.groups(tables.of_kind(results, "lengths"), lengths.group_key)
  if not groups:
    return None
  per_group = [length_lines(group) for group in groups]
  fig, axes = _line_panels(per_group)  # sized for the lines drawn
  for ax, group, lines in zip(axes, groups, per_group):
    if len(lines) == len(group):  # no seeds to fold: bands of 95% CI
      _plot_metric_lines(ax, group, "perplexity", tables.label)
      what = "95% CI"
    else:
      for i, (label, xs, ys, lo, hi) in enumerate(lines):
        style = _line_style(i, len(lines))
        ax.errorbar(
          xs, ys, yerr=[lo, hi], marker="o", markersize=3, capsize=2, label=label, **style
        )
      _mark_train_lengths(ax, [r["train_len"] for r in group if r.get("train_len")])
      ticks = sorted({x for _, xs, *_ in lines for x in xs})
      values = [y for *_, ys, _, _ in lines for y in ys]
      _length_axes(
        ax, ticks, "perplexity per token", values, legend_outside=len(lines) > MANY_LINES
      )
      what = "seeds' mean, bars min-max; single runs 95% CI"
    ax.set_title(
      title or f"perplexity by length, {lengths.short_protocol(group[0])} ({what})", fontsize=9
    )
  return _save(fig, path)


def plot_length_sweep(results_by_name: dict[str, dict], path: str, title: str = "") -> str:
  """{name: lengths result} as one perplexity plot (the quickstart's two runs); older results
  without run/variant/CI fields plot too."""
  results = [
    {"kind": "lengths", **r, "run": name, "variant": ""} for name, r in results_by_name.items()
  ]
  fig, (ax,) = _subplots(1)
  _plot_metric_lines(ax, results, "perplexity", tables.label)
  ax.set_title(title or "perplexity by evaluation length", fontsize=9)
  return _save(fig, path)


def plot_variants(results: Sequence[dict], path: str) -> str | None:
  """Per run with several variants: perplexity against length, one line per variant."""
  runs = [
    g
    for g in tables.groups(
      tables.of_kind(results, "lengths"), lambda r: (r["run"], tables.protocol_key(r))
    )
    if len({r["variant"] for r in g}) > 1
  ]
  if not runs:
    return None
  crowded = max(map(len, runs)) > MANY_BANDS  # one column: the legends go right of the axes
  fig, axes = _subplots(len(runs), width=8.0 if crowded else 6.0, cols=1 if crowded else 2)
  for ax, group in zip(axes, runs):
    _plot_metric_lines(ax, group, "perplexity", lambda r: str(r["variant"]), crowded)
    band = f"95% CI of {group[0]['variant']}" if crowded else "95% CI"
    ax.set_title(
      f"{group[0]['run']}: variants, {lengths.short_protocol(group[0])} ({band})", fontsize=9
    )
  return _save(fig, path)


def plot_loss_by_position(results: Sequence[dict], path: str) -> str | None:
  """Loss per position bucket at each result's longest length, a step line per result (log2
  x: bucket [0, L) drawn from 1), CI band, training length dashed; one panel per protocol."""
  chosen = [
    r
    for r in tables.of_kind(results, "lengths")  # a single bucket (last_k) is no curve
    if r["lengths"] and len(r["lengths"][lengths.longest(r)].get("loss_by_position") or []) > 1
  ]
  groups = tables.groups(chosen, lengths.group_key)
  if not groups:
    return None
  fig, axes = _line_panels(groups)
  for ax, group in zip(axes, groups):
    edges_all, values = set(), []
    band = _band_alpha(len(group))
    for i, r in enumerate(group):
      buckets = sorted(
        r["lengths"][lengths.longest(r)]["loss_by_position"], key=lambda b: b["start"]
      )
      edges = [max(1, buckets[0]["start"])] + [b["end"] for b in buckets]
      ys = [b["loss"] for b in buckets]
      (line,) = ax.step(
        edges,
        ys + ys[-1:],
        where="post",
        label=f"{tables.label(r)} @{lengths.longest(r)}",
        **_line_style(i, len(group)),
      )
      if all(b.get("loss_ci") for b in buckets):
        ax.fill_between(
          edges,
          [b["loss_ci"][0] for b in buckets] + [buckets[-1]["loss_ci"][0]],
          [b["loss_ci"][1] for b in buckets] + [buckets[-1]["loss_ci"][1]],
          step="post",
          color=line.get_color(),
          alpha=band,
          linewidth=0,
        )
      edges_all.update(edges)
      values += ys
    _mark_train_lengths(ax, [r["train_len"] for r in group])
    top = max(edges_all)  # ticks at powers of two: every bucket edge would overprint
    ticks = [2**k for k in range(top.bit_length()) if 2**k >= min(edges_all)] + [top]
    _length_axes(ax, sorted(set(ticks)), "loss (nats/token)", values)
    ax.set_xlabel("position (tokens of context before the target)")
    ax.set_title(
      f"loss by position at the longest length, {lengths.short_protocol(group[0])}", fontsize=9
    )
  return _save(fig, path)


def _bars(value: float, bounds) -> tuple[float, float]:
  """Error bar lengths below and above `value` to `bounds` (low, high), never negative: the
  float mean of seeds that scored the same can pass them, and matplotlib refuses the plot."""
  return max(0.0, value - bounds[0]), max(0.0, bounds[1] - value)


def seed_lines(group: Sequence[dict], points: Sequence[tuple], value, ci) -> list[tuple]:
  """(label, xs, ys, lower, upper) per line over `points` ((x, key) pairs; value(r, key) and
  ci(r, key) read a result there): a result alone is its value with its 95% CI; runs named
  STEM-s<seed> of one (stem, variant) with two or more seeds are one line, their mean with bars
  from the lowest seed to the highest (as the across-seed tables). A point some run lacks is
  left out of its line."""
  by_line: dict = {}  # "stem/variant" (or a result's place, unseeded) -> [results]
  for i, r in enumerate(group):
    match = tables.SEEDED_RUN.match(str(r["run"]))
    by_line.setdefault(f"{match['stem']}/{r['variant']}" if match else i, []).append(r)
  lines = []
  for key, rs in by_line.items():
    if len(rs) == 1:
      key, spread = tables.label(rs[0]), False
    else:
      seeds = sorted(int(tables.SEEDED_RUN.match(str(r["run"]))["seed"]) for r in rs)
      key, spread = f"{key} (seeds {','.join(map(str, seeds))})", True
    xs, ys, lo, hi = [], [], [], []
    for x, name in points:
      values = [value(r, name) for r in rs]
      if any(v is None for v in values):
        continue
      mean = sum(values) / len(values)
      bounds = [min(values), max(values)] if spread else ci(rs[0], name)
      bounds = bounds or [mean, mean]
      xs.append(x)
      ys.append(mean)
      below, above = _bars(mean, bounds)
      lo.append(below)
      hi.append(above)
    lines.append((key, xs, ys, lo, hi))
  return lines


def task_lines(group: Sequence[dict], buckets: Sequence[str]) -> list[tuple]:
  """`seed_lines` of exact match over the size buckets (x: the bucket's index)."""
  return seed_lines(
    group,
    list(enumerate(buckets)),
    lambda r, b: r["buckets"].get(b, {}).get("accuracy"),
    lambda r, b: r["buckets"][b].get("accuracy_ci"),
  )


def length_lines(group: Sequence[dict], metric: str = "perplexity") -> list[tuple]:
  """`seed_lines` of `metric` over the evaluated lengths (x: the length)."""
  ns = sorted({int(n) for r in group for n in r["lengths"]})
  return seed_lines(
    group,
    [(n, str(n)) for n in ns],
    lambda r, n: r["lengths"].get(n, {}).get(metric),
    lambda r, n: r["lengths"][n].get(f"{metric}_ci"),
  )


def plot_tasks(results: Sequence[dict], path: str) -> str | None:
  """Exact match against task-size bucket, one panel per task, the last trained bucket dashed: a
  line per result with 95% CI bars, or per run stem with its seeds' mean and range
  (`task_lines`), so three seeds of eight schemes stay eight lines."""
  groups = tables.groups(tables.of_kind(results, "tasks"), tasks.group_key)
  if not groups:
    return None
  fig, axes = _subplots(len(groups))
  for ax, group in zip(axes, groups):
    buckets = sorted({b for r in group for b in r["buckets"]}, key=tasks.bucket_order)
    for label, xs, ys, lo, hi in task_lines(group, buckets):
      ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", markersize=3, capsize=3, label=label)
    trained = [
      i
      for i, name in enumerate(buckets)
      if tasks.bucket_order(name)[1] <= group[0]["train_sizes"][1]
    ]
    if trained:
      ax.axvline(
        trained[-1] + 0.5, color="gray", linestyle="--", linewidth=1, label="trained sizes end"
      )
    for i, name in enumerate(buckets):
      if any(r["buckets"].get(name, {}).get("skipped") for r in group):
        ax.text(i, 0.02, "skipped", ha="center", fontsize=7, color="gray")
    ax.set_xticks(range(len(buckets)), buckets, rotation=30, fontsize=7)
    ax.set_xlim(-0.5, len(buckets) - 0.5)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("task size bucket")
    ax.set_ylabel("exact match")
    ax.set_title(f"task {group[0]['task']}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
  return _save(fig, path)


def plot_task_errors(results: Sequence[dict], path: str) -> str | None:
  """Error rate on the scored tokens at the trained sizes, one column per task (flip-flop's test
  mixes), a color per system (`tasks.system`: the run without its task and seed, with its
  variant; one dot with 95% CI bars per seed, a bar at their mean), so seeds' spread and each
  seed's interval show side by side; rows of TASKS_PER_ROW tasks."""
  points = {}  # (task, system) -> [(error, ci)]
  for r in tables.of_kind(results, "tasks"):
    trained = r["buckets"].get("-".join(map(str, r["train_sizes"]))) or {}
    if trained.get("error_rate") is None:
      continue
    points.setdefault((r["task"], tasks.system(r)), []).append(
      (trained["error_rate"], trained["error_rate_ci"])
    )
  if not points:
    return None
  tasks_ = sorted({t for t, _ in points})
  systems = list(dict.fromkeys(s for _, s in points))
  per_row = TASKS_PER_ROW if len(systems) > 4 else 2 * TASKS_PER_ROW
  rows = [tasks_[i : i + per_row] for i in range(0, len(tasks_), per_row)]
  fig, axes = _subplots(
    len(rows), width=min(18.0, max(6.0, 1.2 * per_row * len(systems) ** 0.5)), cols=1
  )
  for ax, row in zip(axes, rows):
    _task_error_panel(ax, row, systems, points, per_row)
  axes[0].set_title(
    "error rate at the trained sizes: dots are seeds (95% CI), bars their mean", fontsize=9
  )
  axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # off the dots
  return _save(fig, path)


TASKS_PER_ROW = 4  # plot_task_errors: tasks side by side in a panel (8 with four systems or fewer)


def _task_error_panel(ax, tasks_: Sequence[str], systems, points: dict, slots: int) -> None:
  """One row of `plot_task_errors`: `slots` task columns wide, so every row has one scale."""
  width = 0.8 / len(systems)
  for j, system in enumerate(systems):
    color = _line_style(j, len(systems)).get("color", f"C{j}")  # past 10: tab20's 20
    for i, task in enumerate(tasks_):
      values = points.get((task, system), [])
      x = i - 0.4 + width * (j + 0.5)
      for k, (value, ci) in enumerate(values):
        ci = ci or [value, value]
        ax.errorbar(
          x + width * 0.6 * (k / max(1, len(values) - 1) - 0.5) * (len(values) > 1),
          value,
          yerr=[[bar] for bar in _bars(value, ci)],
          fmt="o",
          markersize=3,
          capsize=2,
          color=color,
        )
      if values:
        mean = sum(v for v, _ in values) / len(values)
        ax.hlines(mean, x - width * 0.45, x + width * 0.45, color=color, linewidth=2)
    ax.plot([], [], "o-", color=color, label=system)
  ax.set_xticks(range(len(tasks_)), tasks_, fontsize=8)
  ax.set_xlim(-0.5, slots - 0.5)
  ax.set_ylim(bottom=0)
  ax.set_ylabel("error rate on scored tokens")
  ax.grid(True, axis="y", alpha=0.3)


def plot_passkey(results: Sequence[dict], path: str) -> str | None:
  """Passkey accuracy heatmaps, length (rows) x needle depth (columns), one per result."""
  chosen = tables.of_kind(results, "passkey")
  if not chosen:
    return None
  fig, axes = _subplots(len(chosen), width=5.0, height=4.0)
  for ax, r in zip(axes, chosen):
    depths = sorted({float(d) for d in r["depths"]})
    sizes = sorted({int(n) for n in r["lengths"]})
    cells = {(int(c["length"]), float(c["depth"])): c["accuracy"] for c in r["cells"]}
    grid = [[cells.get((n, d), float("nan")) for d in depths] for n in sizes]
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
    for i, row in enumerate(grid):
      for j, v in enumerate(row):
        if v == v:
          ax.text(
            j,
            i,
            f"{v:.2f}",
            ha="center",
            va="center",
            fontsize=7,
            color="white" if v < 0.6 else "black",
          )
    ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths])
    ax.set_yticks(range(len(sizes)), [tables.times(n, r["train_len"]) for n in sizes])
    ax.set_xlabel("needle depth")
    ax.set_ylabel("length")
    ax.set_title(f"{tables.label(r)}: passkey accuracy", fontsize=9)
    fig.colorbar(image, ax=ax)
  return _save(fig, path)
