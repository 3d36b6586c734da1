"""An inline SVG line chart for the trend: light, no script, readable without colour
(every series has its own marker and dash pattern, and every point carries its value)."""

from __future__ import annotations

import html

# Okabe-Ito colours (distinguishable with the common colour-vision deficiencies).
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4", "4 4")


def _marker(i: int, x: float, y: float, colour: str) -> str:
    shape = i % 4
    if shape == 0:
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{colour}"/>'
    if shape == 1:
        return f'<rect x="{x - 4.5:.1f}" y="{y - 4.5:.1f}" width="9" height="9" fill="{colour}"/>'
    if shape == 2:
        return f'<polygon points="{x:.1f},{y - 6:.1f} {x - 5.5:.1f},{y + 4.5:.1f} {x + 5.5:.1f},{y + 4.5:.1f}" fill="{colour}"/>'
    return f'<polygon points="{x:.1f},{y - 6:.1f} {x + 6:.1f},{y:.1f} {x:.1f},{y + 6:.1f} {x - 6:.1f},{y:.1f}" fill="{colour}"/>'


MARKER_NAMES = ("circle", "square", "triangle", "diamond")


def _free_y(taken: list[float], y: float, first: int, gap: float = 11.0) -> float:
    """A value label's baseline near its marker at y: above or below (first: 0 above, 1 below), then
    further out, the first place no label at the same x is within gap of, so lines that meet stay readable."""
    offsets = (-7, 15, -18, 26, -29, 37)
    order = tuple(o for pair in zip(offsets[first::2], offsets[1 - first::2]) for o in pair)
    for dy in order:
        if all(abs(y + dy - t) >= gap for t in taken):
            return y + dy
    return y + order[0]


def line_chart(series: dict[str, list[tuple[int, float]]], n_points: int, *, title: str, desc: str,
               y_label: str = "full-graph share (%)", notes: dict[str, list[str]] | None = None) -> str:
    """series: name -> [(x index 1..n_points, value 0..100)]. x ticks are the set numbers of the table below.
    notes: name -> one text per point (in x order), shown as the marker's tooltip (<title>)."""
    # The legend goes under the plot, a line per series, so long line names (a subset's runs) fit
    # and the plot keeps the full width.
    w, left, right, top, plot_h, axis = 1000, 56, 56, 20, 240, 44
    h = top + plot_h + axis + 22 * len(series) + 8
    pw, ph = w - left - right, plot_h

    def px(i: int) -> float:
        return left + (pw * (i - 1) / (n_points - 1) if n_points > 1 else pw / 2)

    def py(v: float) -> float:
        return top + ph * (1 - v / 100)

    e = html.escape
    out = [f'<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-labelledby="trend-title trend-desc" '
           f'xmlns="http://www.w3.org/2000/svg"><title id="trend-title">{e(title)}</title>'
           f'<desc id="trend-desc">{e(desc)}</desc>']
    for v in (0, 25, 50, 75, 100):
        y = py(v)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="12">{v}</text>')
    for i in range(1, n_points + 1):
        out.append(f'<text x="{px(i):.1f}" y="{top + ph + 18}" text-anchor="middle" font-size="12">#{i}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph + 36}" text-anchor="middle" font-size="12">result set (see the table)</text>'
               f'<text x="14" y="{top + ph / 2:.1f}" transform="rotate(-90 14 {top + ph / 2:.1f})" '
               f'text-anchor="middle" font-size="12">{e(y_label)}</text>')
    placed: dict[int, list[float]] = {i: [] for i in range(1, n_points + 1)}  # value labels per x
    for k, (name, pts) in enumerate(sorted(series.items())):
        colour, dash = COLOURS[k % len(COLOURS)], DASHES[k % len(DASHES)]
        pts = sorted(pts)
        tips = (notes or {}).get(name, [])
        out.append(f'<g class="line" data-name="{e(name)}">')
        if len(pts) > 1:
            path = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"'
                       + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        for n, (i, v) in enumerate(pts):
            ty = _free_y(placed[i], py(v), k % 2)  # alternate above/below by series
            placed[i].append(ty)
            tip = f"<title>{e(tips[n])}</title>" if n < len(tips) else ""
            out.append(f'<g class="point" data-x="{i}">{tip}' + _marker(k, px(i), py(v), colour)
                       + f'<text x="{px(i) + 7:.1f}" y="{ty:.1f}" font-size="11">{v:.1f}%</text></g>')
        ly = top + ph + axis + 16 + 22 * k
        out.append(_marker(k, left + 8, ly - 4, colour)
                   + (f'<line x1="{left + 18}" x2="{left + 48}" y1="{ly - 4}" y2="{ly - 4}" stroke="{colour}" '
                      f'stroke-width="2"' + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
                   + f'<text class="legend" x="{left + 56}" y="{ly}" font-size="12">{e(name)} '
                   f"({MARKER_NAMES[k % 4]})</text></g>")
    out.append("</svg>")
    return "".join(out)
