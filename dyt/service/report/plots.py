"""The report's PNG plots, drawn with matplotlib (Agg) from a perf JSON's kernel and model rows.

The contract: each function takes a perf report (dyt.service.records' dict, or None) and a folder, writes
its figures there whole or not at all (files.write_atomic) and returns the paths written, in the order
the page shows them; no rows, no files. matplotlib is imported on the first plot, so reading and the
Markdown need none. The Markdown that links the plots is dyt.service.report.markdown's.
"""

from __future__ import annotations

from pathlib import Path

from dyt.service.files import write_atomic
from dyt.service.report.read import (
    MODE_ORDER,
    finite_float,
    is_bandwidth,
    is_small,
    measured_kernels,
    measured_models,
    model_cases,
    model_variants,
    providers_in,
    row_ok,
    short_dtype,
)


def _save(fig, path: Path) -> None:
    """A figure as PNG into path, whole or not at all (files.write_atomic)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    write_atomic(path, buf.getvalue())


def make_plots(perf: dict | None, plot_dir: Path) -> list[Path]:
    """Bandwidth against width (one per dtype x mode, ceiling drawn) and small-shape latency bars."""
    if not perf or not perf.get("records"):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    records = perf["records"]
    providers = providers_in(records)
    ceiling = finite_float(perf.get("ceiling_gbps"))
    source = measured_kernels(perf).short()
    written: list[Path] = []

    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        if is_bandwidth(rec) and row_ok(rec) and finite_float(rec.get("gbps")) is not None:
            groups.setdefault((rec["dtype"], rec.get("param_dtype") or rec["dtype"], rec["mode"]), []).append(
                rec
            )
    for (dtype, pdt, mode), recs in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for provider in providers:
            pts = sorted((r["N"], r["gbps"]) for r in recs if r["provider"] == provider)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=provider)
        if ceiling:
            ax.axhline(
                ceiling, color="black", linestyle="--", linewidth=1, label=f"copy ceiling {ceiling:.0f}"
            )
        ax.set_xscale("log", base=2)
        widths = sorted({r["N"] for r in recs})
        ax.set_xticks(widths, [str(w) for w in widths], rotation=45)
        ax.set_xlabel("width C (rows x C = 2^26 elements)")
        ax.set_ylabel("GB/s (minimal bytes)")
        ax.set_ylim(bottom=0)
        params = "" if pdt == dtype else f", params {short_dtype(pdt)}"
        ax.set_title(f"{source}: {short_dtype(dtype)}{params} {mode}")
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        suffix = "" if pdt == dtype else "-p" + short_dtype(pdt)
        path = plot_dir / f"bandwidth-{short_dtype(dtype)}{suffix}-{mode}.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)

    small: dict[tuple, list[dict]] = {}
    for rec in records:
        if is_small(rec) and row_ok(rec):
            small.setdefault((rec["dtype"], rec.get("param_dtype") or rec["dtype"]), []).append(rec)
    for (dtype, pdt), recs in sorted(small.items()):
        modes = sorted({r["mode"] for r in recs}, key=lambda m: (MODE_ORDER.get(m, 9), m))
        shapes = sorted({(r["M"], r["N"]) for r in recs}, key=lambda s: s[0] * s[1])
        fig, axes = plt.subplots(1, len(modes), figsize=(4.5 * len(modes), 4), squeeze=False)
        width = 0.8 / max(1, len(providers))
        for ax, mode in zip(axes[0], modes, strict=True):
            for i, provider in enumerate(providers):
                by_shape = {
                    (r["M"], r["N"]): r["median_ms"]
                    for r in recs
                    if r["provider"] == provider and r["mode"] == mode
                }
                xs = [j + i * width for j, s in enumerate(shapes) if s in by_shape]
                ys = [by_shape[s] * 1e3 for s in shapes if s in by_shape]
                if xs:
                    ax.bar(xs, ys, width=width, label=provider)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], [f"{m}x{n}" for m, n in shapes])
            ax.tick_params(axis="x", labelrotation=30)
            ax.set_ylabel("median latency (us)")
            ax.set_title(f"{short_dtype(dtype)} {mode}")
            ax.grid(True, axis="y", alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(source)
        fig.tight_layout()
        suffix = "" if pdt == dtype else "-p" + short_dtype(pdt)
        path = plot_dir / f"small-latency-{short_dtype(dtype)}{suffix}.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    return written


def make_model_plots(perf: dict | None, plot_dir: Path) -> list[Path]:
    """Step time per variant per model/batch (one panel per mode) and dyt's speedup over each other
    variant (median of rounds, whiskers from the slowest to the fastest round)."""
    rows = (perf or {}).get("model_records") or []
    rows = [r for r in rows if finite_float(r.get("median_ms")) is not None]
    if not rows:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    source = measured_models(perf).short()
    variants = model_variants(rows)
    modes = [m for m in ("train", "infer") if any(r["mode"] == m for r in rows)]
    written = []
    fig, axes = plt.subplots(len(modes), 1, figsize=(12, 4.2 * len(modes)), squeeze=False)
    for ax, mode in zip(axes[:, 0], modes, strict=True):
        cases = [c for c in model_cases(rows) if c[2] == mode]
        width = 0.8 / max(1, len(variants))
        for i, variant in enumerate(variants):
            by_case = {
                (r["model"], r["batch"], r["mode"], bool(r.get("compiled"))): r["median_ms"]
                for r in rows
                if r["variant"] == variant and r["mode"] == mode
            }
            xs = [j + i * width for j, c in enumerate(cases) if c in by_case]
            if xs:
                ax.bar(xs, [by_case[c] for c in cases if c in by_case], width=width, label=variant)
        labels = [f"{m}/{b}" + (" (compiled)" if comp else "") for m, b, _, comp in cases]
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))], labels, rotation=30, ha="right")
        ax.set_ylabel(f"{mode} step, median ms")
        ax.set_title(f"{source}: {mode} (bf16 autocast)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    path = plot_dir / "models-step-time.png"
    _save(fig, path)
    plt.close(fig)
    written.append(path)

    pairs = [
        (r, other, s)
        for r in rows
        for other, s in (r.get("speedup_vs") or {}).items()
        if finite_float(s.get("median"))
    ]
    if pairs:
        others = [v for v in variants if any(o == v for _, o, _ in pairs)]
        keys = []
        for r, _, _ in pairs:
            key = (r["model"], r["batch"], r["mode"], r["variant"])
            if key not in keys:
                keys.append(key)
        fig, ax = plt.subplots(figsize=(max(12, 0.2 * len(keys)), 5))  # a readable label per group
        width = 0.8 / max(1, len(others))
        for i, other in enumerate(others):
            pts = [
                (keys.index((r["model"], r["batch"], r["mode"], r["variant"])), s)
                for r, o, s in pairs
                if o == other
            ]
            xs = [k + i * width for k, _ in pts]
            med = [s["median"] for _, s in pts]
            err = [[s["median"] - s["min"] for _, s in pts], [s["max"] - s["median"] for _, s in pts]]
            ax.bar(xs, med, width=width, yerr=err, capsize=2, label=f"over {other}")
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        names = [f"{m}/{b} {mode} {v}" for m, b, mode, v in keys]
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], names, rotation=90, fontsize=7)
        ax.set_ylabel("dyt speedup (median of rounds)")
        ax.set_title(f"{source}: dyt's speedup over each variant (above 1: dyt faster; whiskers: rounds)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = plot_dir / "models-speedup.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    return written
