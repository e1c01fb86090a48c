"""Charts written by the server as SVG (no charting library): a computer's CPU and memory over
the last hour, from what the guest reports to the usage meter (`GET /v1/computers/{ref}/metrics`).
Every value is a number the server formats, so nothing a tenant wrote reaches the markup."""

from __future__ import annotations

import time
from collections.abc import Sequence

from markupsafe import Markup, escape

from ..control.usage.meter import Sample

WIDTH, HEIGHT, PAD = 600, 140, 28
HOUR = 3600.0


def line(
    points: Sequence[tuple[float, float]], top: float, title: str, unit: str, now: float
) -> Markup:
    """A line over the last hour: x is seconds ago, y is 0..top."""
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    top = top if top > 0 else 1.0

    def xy(at: float, value: float) -> str:
        x = PAD + inner_w * (1 - min(max(now - at, 0.0), HOUR) / HOUR)
        y = PAD + inner_h * (1 - min(max(value / top, 0.0), 1.0))
        return f"{x:.1f},{y:.1f}"

    path = " ".join(xy(at, value) for at, value in points)
    last = f"{points[-1][1]:.1f} {unit}" if points else "no samples yet"
    svg = (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{title} over the last hour: now {last}">'
        f'<rect x="{PAD}" y="{PAD}" width="{inner_w}" height="{inner_h}" fill="#f6f8fa" '
        f'stroke="#d0d7de"/>'
        f'<text x="{PAD}" y="{PAD - 8}" font-size="13">{title}: {last}</text>'
        f'<text x="{WIDTH - PAD}" y="{PAD - 8}" font-size="11" text-anchor="end">'
        f"max {top:.0f} {unit}</text>"
        f'<text x="{PAD}" y="{HEIGHT - 8}" font-size="11">1 h ago</text>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 8}" font-size="11" text-anchor="end">now</text>'
        f'<polyline points="{path}" fill="none" stroke="#0969da" stroke-width="2"/></svg>'
    )
    return Markup(svg)


def bars(values: Sequence[tuple[str, float]], title: str, unit: str) -> Markup:
    """One bar a labelled value (a day), scaled to the largest; labels and values are written
    by the server (the labels are dates it made)."""
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    top = max([v for _, v in values] + [0.0]) or 1.0
    step = inner_w / max(len(values), 1)
    parts = []
    for i, (label, value) in enumerate(values):
        h = inner_h * min(max(value / top, 0.0), 1.0)
        x = PAD + i * step
        parts.append(
            f'<rect x="{x + step * 0.15:.1f}" y="{PAD + inner_h - h:.1f}" '
            f'width="{step * 0.7:.1f}" height="{h:.1f}" fill="#0969da">'
            f"<title>{escape(label)}: {value:.2f} {unit}</title></rect>"
        )
    total = sum(v for _, v in values)
    first, last = (values[0][0], values[-1][0]) if values else ("", "")
    svg = (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{title}: {total:.2f} {unit} in all">'
        f'<rect x="{PAD}" y="{PAD}" width="{inner_w}" height="{inner_h}" fill="#f6f8fa" '
        f'stroke="#d0d7de"/>'
        f'<text x="{PAD}" y="{PAD - 8}" font-size="13">{title}: {total:.2f} {unit} in all</text>'
        f'<text x="{WIDTH - PAD}" y="{PAD - 8}" font-size="11" text-anchor="end">'
        f"max {top:.2f} {unit}</text>"
        f'<text x="{PAD}" y="{HEIGHT - 8}" font-size="11">{escape(first)}</text>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 8}" font-size="11" text-anchor="end">'
        f"{escape(last)}</text>{''.join(parts)}</svg>"
    )
    return Markup(svg)


def computer_charts(samples: Sequence[Sample], memory_mib: int) -> list[Markup]:
    now = time.time()
    cpu = [(s.time, s.cpu_percent) for s in samples if s.cpu_percent is not None]
    memory = [(s.time, s.memory_used / 2**20) for s in samples]
    top = max([float(memory_mib), *(s.memory_total / 2**20 for s in samples)])
    return [line(cpu, 100, "CPU", "%", now), line(memory, top, "Memory", "MiB", now)]
