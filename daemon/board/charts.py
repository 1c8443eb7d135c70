"""Inline SVG pictures, drawn on the server from :mod:`actors.history`.

Presentation attributes only (``fill=``, ``stroke=``), never ``style``: the
board's Content-Security-Policy allows no inline styles. Each picture is a
``role="img"`` with a ``<title>`` and a ``<desc>`` that say in words what it
shows, so it is not only for those who can see it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720, 160
LEFT, RIGHT, TOP, BOTTOM = 44, 52, 14, 26
INK = "#1b1b1b"
BAR = "#1f5fa8"
LINE = "#6b2fa3"
LIMIT = "#b3261e"
GRID = "#767676"


def _frame(ident: str, title: str, desc: str, body: list[str]) -> Markup:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="100%" role="img" aria-labelledby="{ident}-t {ident}-d" class="chart">',
        f'<title id="{ident}-t">{escape(title)}</title>',
        f'<desc id="{ident}-d">{escape(desc)}</desc>',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        *body,
        "</svg>",
    ]
    return Markup("".join(parts))


def _text(x: float, y: float, s: str, anchor: str = "start", fill: str = INK) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="11" fill="{fill}" '
        f'text-anchor="{anchor}" font-family="sans-serif">{escape(s)}</text>'
    )


def _axes(top_label: str) -> list[str]:
    x0, y0, x1, y1 = LEFT, HEIGHT - BOTTOM, WIDTH - RIGHT, TOP
    return [
        f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="{GRID}" stroke-width="1"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="{GRID}" stroke-width="1"/>',
        _text(x0 - 4, y1 + 8, top_label, "end"),
        _text(x0 - 4, y0, "0", "end"),
    ]


def claims_chart(
    ident: str,
    per_minute: Sequence[int],
    *,
    limit: int | None,
    used_since: int | None,
    used: int | None = None,
    period: str | None = None,
) -> Markup:
    """Claims per minute (bars, left scale) and, for a queue with a window limit,
    the claims used in the current window (line, limit at the top).

    ``used_since`` is how many of the last minutes belong to the current window,
    and ``used`` its usage now (the line ends there; claims of the window from
    before the history began, e.g. before a restart, are its starting level).
    """
    n = len(per_minute)
    peak = max(per_minute, default=0)
    scale = max(peak, 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bar_w = plot_w / max(n, 1)
    body = _axes(f"{scale}/min")
    for i, count in enumerate(per_minute):
        if count:
            h = plot_h * count / scale
            body.append(
                f'<rect x="{LEFT + i * bar_w:.2f}" y="{TOP + plot_h - h:.2f}" '
                f'width="{max(bar_w - 0.5, 0.5):.2f}" height="{h:.2f}" fill="{BAR}"/>'
            )
    hours = n / 60
    body.append(_text(LEFT, HEIGHT - 8, f"{hours:g} h ago"))
    body.append(_text(WIDTH - RIGHT, HEIGHT - 8, "now", "end"))
    total = sum(per_minute)
    desc = f"{total} claims in the last {hours:g} hours; busiest minute {peak}"
    if limit is not None and used_since is not None:
        start = max(n - used_since, 0)
        seen = sum(per_minute[start:])
        level = max((used if used is not None else seen) - seen, 0)
        cap = max(limit, 1)

        def y(v: int) -> float:
            return TOP + plot_h - plot_h * min(v, cap) / cap

        points = [f"{LEFT + start * bar_w:.1f},{y(level):.1f}"]
        for i in range(start, n):
            if per_minute[i]:  # a step where claims were made; flat elsewhere
                points.append(f"{LEFT + i * bar_w:.1f},{y(level):.1f}")
                level += per_minute[i]
                points.append(f"{LEFT + (i + 1) * bar_w:.1f},{y(level):.1f}")
        points.append(f"{LEFT + n * bar_w:.1f},{y(level):.1f}")
        if points:
            body.append(
                f'<polyline points="{" ".join(points)}" fill="none" stroke="{LINE}" '
                f'stroke-width="2"/>'
            )
        body.append(
            f'<line x1="{LEFT}" y1="{TOP}" x2="{WIDTH - RIGHT}" y2="{TOP}" '
            f'stroke="{LIMIT}" stroke-width="1.5" stroke-dasharray="6 4"/>'
        )
        body.append(_text(WIDTH - RIGHT + 4, TOP + 4, f"limit {limit}", fill=LIMIT))
        body.append(_text(WIDTH - RIGHT + 4, TOP + 16, f"per {period or 'window'}"))
        desc += (
            f"; the line shows {level} of {limit} claims used in this {period or 'window'}, "
            "the dashed line the limit"
        )
    return _frame(ident, "Claims per minute", desc, body)


def level_chart(
    ident: str, samples: Sequence[tuple[int, float]], *, since_ms: int, now_ms: int, cap: float
) -> Markup:
    """A budget's available tokens over time (line) under its cap (dashed)."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = max(now_ms - since_ms, 1)
    top = max(cap, max((v for _t, v in samples), default=0), 1)
    body = _axes(f"{top:g}")
    xy = [
        (LEFT + plot_w * (at - since_ms) / span, TOP + plot_h - plot_h * max(v, 0) / top)
        for at, v in samples
    ]
    if len(xy) == 1:  # one sample: a dot, not a line
        body.append(f'<circle cx="{xy[0][0]:.1f}" cy="{xy[0][1]:.1f}" r="3" fill="{LINE}"/>')
    elif xy:
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
        body.append(f'<polyline points="{points}" fill="none" stroke="{LINE}" stroke-width="2"/>')
    y_cap = TOP + plot_h - plot_h * cap / top
    body.append(
        f'<line x1="{LEFT}" y1="{y_cap:.1f}" x2="{WIDTH - RIGHT}" y2="{y_cap:.1f}" '
        f'stroke="{LIMIT}" stroke-width="1.5" stroke-dasharray="6 4"/>'
    )
    body.append(_text(WIDTH - RIGHT + 4, y_cap + 4, f"cap {cap:g}", fill=LIMIT))
    hours = span / 3_600_000
    body.append(_text(LEFT, HEIGHT - 8, f"{hours:g} h ago"))
    body.append(_text(WIDTH - RIGHT, HEIGHT - 8, "now", "end"))
    if samples:
        low = min(v for _t, v in samples)
        desc = (
            f"{len(samples)} samples over the last {hours:g} hours; lowest {low:g}, "
            f"now {samples[-1][1]:g}, cap {cap:g}"
        )
    else:
        desc = "no samples yet"
    return _frame(ident, "Available tokens over time", desc, body)


GROUP_W, GROUP_H = 240, 18
LENT = "#a15c00"


def group_bar(ident: str, row: dict[str, Any], scale: int) -> Markup:
    """One group's slots as a bar of ``scale`` (the queue's ``max_in_flight``):
    in flight (solid), its reservation not in use (outlined) and, of that, the
    part other groups hold now (hatched, marked "lent")."""
    in_flight, reserved, lent = row["in_flight"], row["reserved"], row["lent"]
    idle = max(0, reserved - in_flight)
    unit = GROUP_W / max(scale, in_flight + idle, 1)
    x_lent = in_flight * unit
    x_idle = x_lent + lent * unit
    body = [
        f'<defs><pattern id="{ident}-h" width="6" height="6" patternUnits="userSpaceOnUse" '
        f'patternTransform="rotate(45)"><rect width="3" height="6" fill="{LENT}"/>'
        "</pattern></defs>",
        f'<rect x="0" y="1" width="{GROUP_W}" height="{GROUP_H - 2}" fill="#ffffff" '
        f'stroke="{GRID}" stroke-width="1"/>',
    ]
    if in_flight:
        body.append(f'<rect x="0" y="1" width="{x_lent:.1f}" height="{GROUP_H - 2}" fill="{BAR}"/>')
    if lent:
        body.append(
            f'<rect class="lent" x="{x_lent:.1f}" y="1" width="{lent * unit:.1f}" '
            f'height="{GROUP_H - 2}" fill="url(#{ident}-h)" stroke="{LENT}" stroke-width="1"/>'
        )
        if lent * unit >= 30:  # the word on a white patch, where it fits
            body.append(f'<rect x="{x_lent + 2:.1f}" y="3" width="26" height="12" fill="#ffffff"/>')
            body.append(_text(x_lent + 4, GROUP_H - 5, "lent", fill=INK))
    if idle > lent:
        body.append(
            f'<rect x="{x_idle:.1f}" y="2" width="{(idle - lent) * unit:.1f}" '
            f'height="{GROUP_H - 4}" fill="none" stroke="{BAR}" stroke-width="1.5" '
            f'stroke-dasharray="3 2"/>'
        )
    desc = f"{in_flight} in flight of {scale}"
    if reserved:
        desc += f"; {reserved} reserved, {idle} of them idle, {lent} lent to other groups"
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {GROUP_W} {GROUP_H}" '
        f'width="{GROUP_W}" height="{GROUP_H}" role="img" aria-labelledby="{ident}-d" '
        f'class="group-bar"><title id="{ident}-d">{escape(desc)}</title>{"".join(body)}</svg>'
    )
