"""Plots of eval reports as inline SVG (no plotting library, no script: the page shows them as is).

>>> svg = bars("gap", [("left", 1.0, (0.74, 1.0), 11), ("right", 0.5, (0.2, 0.8), 9)])
>>> svg.count('class="bar"'), svg.count('class="ci"')
(2, 2)
"""
from __future__ import annotations

from html import escape

from embodia.agent.viewing.page import num

W, H, PAD_L, PAD_B, PAD_T = 520, 240, 44, 46, 14
COLORS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")


def _frame(kind: str, title: str, body: list[str]) -> str:
    ph = H - PAD_B - PAD_T
    grid = []
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = PAD_T + ph * (1 - v)
        grid.append(f'<line x1="{PAD_L}" x2="{W - 8}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                    f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{v:.2f}</text>')
    return (f'<svg class="plot plot-{kind}" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
            f'aria-label="{escape(title)}"><title>{escape(title)}</title>' + "".join(grid) + "".join(body) + "</svg>")


def bars(title: str, cells: list[tuple[str, float, tuple[float, float] | None, int]], kind: str = "splits") -> str:
    """Success rates as bars with their 95% Wilson interval as error bars; cells: (label, rate, (lo, hi), n)."""
    ph, pw = H - PAD_B - PAD_T, W - PAD_L - 8
    step = pw / max(1, len(cells))
    bw = min(60.0, step * 0.6)
    body = []
    for i, (label, rate, ci, n) in enumerate(cells):
        x = PAD_L + step * (i + 0.5)
        y = PAD_T + ph * (1 - rate)
        body.append(f'<rect class="bar" x="{x - bw / 2:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{ph * rate:.1f}" '
                    f'fill="{COLORS[i % len(COLORS)]}"><title>{escape(label)}: {rate:.3f} (n={num(n)})</title></rect>')
        if ci is not None:
            lo, hi = (PAD_T + ph * (1 - v) for v in ci)
            body.append(f'<path class="ci" d="M{x:.1f},{lo:.1f}V{hi:.1f}M{x - 6:.1f},{lo:.1f}h12M{x - 6:.1f},{hi:.1f}h12"/>')
        body.append(f'<text x="{x:.1f}" y="{H - PAD_B + 16}" text-anchor="middle" class="label">{escape(label)}</text>'
                    f'<text x="{x:.1f}" y="{H - PAD_B + 30}" text-anchor="middle" class="tick">'
                    f'{rate:.2f} n={num(n)}</text>')
    return _frame(kind, title, body)


def lines(title: str, series: dict[str, list[float]], xlabels: list[str], kind: str = "curve") -> str:
    """One polyline per series over the x labels, with a legend."""
    ph, pw = H - PAD_B - PAD_T, W - PAD_L - 8
    n = max(len(v) for v in series.values()) if series else 0
    xs = [PAD_L + pw * (i + 0.5) / max(1, n) for i in range(n)]
    body = [f'<text x="{x:.1f}" y="{H - PAD_B + 16}" text-anchor="middle" class="label">{escape(lab)}</text>'
            for x, lab in zip(xs, xlabels)]
    for k, (name, vals) in enumerate(series.items()):
        color = COLORS[k % len(COLORS)]
        pts = " ".join(f"{xs[i]:.1f},{PAD_T + ph * (1 - v):.1f}" for i, v in enumerate(vals))
        body.append(f'<polyline class="series" data-series="{escape(name)}" points="{pts}" fill="none" '
                    f'stroke="{color}" stroke-width="2"/>')
        body += [f'<circle cx="{xs[i]:.1f}" cy="{PAD_T + ph * (1 - v):.1f}" r="3" fill="{color}">'
                 f'<title>{escape(name)} {escape(str(xlabels[i] if i < len(xlabels) else i))}: {v:.3f}</title></circle>'
                 for i, v in enumerate(vals)]
        body.append(f'<text x="{PAD_L + 8 + 110 * k}" y="{H - 8}" class="legend" fill="{color}">&#9632; '
                    f'{escape(name)}</text>')
    return _frame(kind, title, body)


def eval_plots(rep: dict) -> list[dict]:
    """The plots of an `embodia eval` report: overall and per-split success (Wilson 95%); for memory
    reports, success per arm and the learning curve per stream quarter (and per window)."""
    out = []
    if rep.get("success_rate") is not None:
        out.append({"title": "success, all episodes (95% Wilson)", "svg": bars(
            "success", [("all", rep["success_rate"], tuple(rep["wilson95"]), rep.get("verified_episodes", 0))],
            kind="overall")})
    for key, cells in (rep.get("by") or {}).items():
        rows = [(str(v), c["success_rate"], tuple(c["wilson95"]), c["episodes"]) for v, c in sorted(cells.items())]
        out.append({"title": f"success by {key} (95% Wilson)", "svg": bars(f"success by {key}", rows)})
    arms = rep.get("arms") or {}
    if arms:
        n = rep.get("streams", 0) * rep.get("episodes_per_stream", 0)
        out.append({"title": "success per memory arm (95% Wilson)", "svg": bars("success per arm", [
            (a, r["success_rate"], tuple(r["wilson95"]) if r.get("wilson95") else None, n) for a, r in arms.items()],
            kind="arms")})
        quarters = {a: r["quarters"] for a, r in arms.items() if r.get("quarters")}
        if quarters:
            out.append({"title": "memory learning curve: success per stream quarter", "svg": lines(
                "success per stream quarter", quarters, ["Q1", "Q2", "Q3", "Q4"], kind="quarters")})
        curves = {a: r["learning_curve"] for a, r in arms.items() if r.get("learning_curve")}
        if curves and max(len(v) for v in curves.values()) > 1:
            m = max(len(v) for v in curves.values())
            out.append({"title": "memory learning curve: success per window of 10 episodes", "svg": lines(
                "success per window", curves, [str(i + 1) for i in range(m)], kind="curve")})
    return out
