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


def line_chart(series: dict[str, list[tuple[int, float]]], n_points: int, *, title: str, desc: str,
               y_label: str = "full-graph share (%)", notes: dict[str, list[str]] | None = None) -> str:
    """series: name -> [(x index 1..n_points, value 0..100)]. x ticks are the set numbers of the table below.
    notes: name -> one text per point (in x order), shown as the marker's tooltip (<title>)."""
    # The legend is as tall as it needs: a line per series, right of the plot.
    w, left, right, top, bottom = 1000, 56, 430, 20, 44
    h = max(300, top + 22 * len(series) + 24)
    pw, ph = w - left - right, h - top - bottom

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
    out.append(f'<text x="{left + pw / 2:.1f}" y="{h - 6}" text-anchor="middle" font-size="12">result set (see the table)</text>'
               f'<text x="14" y="{top + ph / 2:.1f}" transform="rotate(-90 14 {top + ph / 2:.1f})" '
               f'text-anchor="middle" font-size="12">{e(y_label)}</text>')
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
            dy = -7 if k % 2 == 0 else 15  # alternate above/below so close points stay readable
            tip = f"<title>{e(tips[n])}</title>" if n < len(tips) else ""
            out.append(f'<g class="point" data-x="{i}">{tip}' + _marker(k, px(i), py(v), colour)
                       + f'<text x="{px(i) + 7:.1f}" y="{py(v) + dy:.1f}" font-size="11">{v:.1f}%</text></g>')
        ly = top + 14 + 22 * k
        out.append(_marker(k, left + pw + 22, ly - 4, colour)
                   + f'<text class="legend" x="{left + pw + 34}" y="{ly}" font-size="12">{e(name)} '
                   f"({MARKER_NAMES[k % 4]})</text></g>")
    out.append("</svg>")
    return "".join(out)
