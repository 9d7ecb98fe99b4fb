"""A report's plots as inline SVG, drawn on the server.

Why SVG strings rather than the matplotlib PNGs of ``amber_pipeline.analysis.plots``: the page's CSP allows no
inline script or style and the app serves no generated files, while an inline SVG scales with the page, keeps its
text selectable and carries a tooltip per mark. Everything a reader needs is printed (values beside each row,
labels beside each point); the ``<title>`` tooltips only repeat it in full, so nothing needs a click.

What is drawn (which rows, in which order, which cells weigh cost against score, and which are on the frontier)
comes from ``analysis.plot_rows`` and ``analysis.frontier``, so the web page and the PNG files always agree.

The CSP forbids ``style=`` attributes, so colours and sizes are SVG presentation attributes (``fill=``,
``font-size=``); classes name the parts for the stylesheet and the tests. Every piece of text (route names,
phase names) comes from users and is escaped here, and the result is ``Markup`` so Jinja does not escape it twice.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from amber_pipeline.analysis import frontier
from amber_pipeline.analysis.plot_rows import Row, best_first, cell_rows, cost_points, difference_rows
from amber_pipeline.analysis.report import RoundReport
from web.render import reward, seconds

SVG_NS = "http://www.w3.org/2000/svg"
FONT = "system-ui, -apple-system, Segoe UI, sans-serif"
INK, MUTED, GRID, ACCENT, WARN, HOLLOW = "#1d1d1f", "#6b6b70", "#dedee3", "#1f4e79", "#b86b00", "#ffffff"
PHASE_COLOURS = ("#1f4e79", "#b86b00", "#1f7a3a", "#6a3d9a", "#8c2d19", "#3d6f8a")
CHAR_WIDTH = 0.6  # a character's width per unit of font size: enough to keep estimated labels from overlapping

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# ---------------------------------------------------------------- SVG text and elements


def _text(value: object) -> str:
    """User text made safe for an SVG in HTML and as XML: escaped, and characters XML cannot carry replaced."""
    return html.escape(_NOT_XML.sub("\ufffd", str(value)), quote=True)


def _fit(label: str, limit: int) -> str:
    """A label cut to ``limit`` characters, an ellipsis in the middle showing where; the full one goes in a
    ``<title>``. The middle, because routes share their start (the Agent) and differ at the end (a model's
    version), so both ends are what tells two of them apart."""
    if len(label) <= limit:
        return label
    tail = (limit - 1) * 3 // 5
    return label[: limit - 1 - tail] + "…" + label[-tail:]


def _num(x: float) -> str:
    return f"{x:.2f}"


def _attrs(attrs: dict[str, object]) -> str:
    out = []
    for name, value in attrs.items():
        if value is None:
            continue
        shown = _num(value) if isinstance(value, float) else str(value)
        out.append(f' {name.rstrip("_").replace("_", "-")}="{_text(shown)}"')
    return "".join(out)


def _el(tag: str, content: str = "", **attrs: object) -> str:
    """One element; ``content`` is SVG already built (escape text with ``_text`` first). ``class_`` is class,
    ``font_size`` is font-size."""
    return f"<{tag}{_attrs(attrs)}>{content}</{tag}>" if content else f"<{tag}{_attrs(attrs)}/>"


def _label(x: float, y: float, text: str, **attrs: object) -> str:
    return _el("text", _text(text), x=x, y=y, **attrs)


def _svg(width: int, height: float, title: str, body: list[str], *, class_: str) -> Markup:
    """The figure: it scales to its container through the viewBox, and names itself to screen readers."""
    head = _el("title", _text(title))
    return Markup(f'<svg xmlns="{SVG_NS}" viewBox="0 0 {width} {_num(height)}" width="{width}" '
                  f'height="{_num(height)}" role="img" aria-label="{_text(title)}" class="plot {class_}" '
                  f'font-family="{FONT}" font-size="13" fill="{INK}">{head}{"".join(body)}</svg>')


def _sentence(text: str) -> Markup:
    """What an empty plot shows instead: a sentence saying why there is nothing to draw."""
    return Markup(f'<p class="muted plot-empty">{_text(text)}</p>')


# ---------------------------------------------------------------- scales


@dataclass(frozen=True)
class Scale:
    """A linear map from values (lo..hi) to pixels (start..end), with the ticks printed on its axis."""

    lo: float
    hi: float
    start: float
    end: float
    ticks: tuple[float, ...]
    decimals: int

    def __call__(self, value: float) -> float:
        return self.start + (value - self.lo) / (self.hi - self.lo) * (self.end - self.start)

    def tick_label(self, value: float, prefix: str = "") -> str:
        return f"{prefix}{value + 0.0:.{self.decimals}f}"  # + 0.0: no "-0"


def nice_scale(lo: float, hi: float, start: float, end: float, count: int = 5) -> Scale:
    """A scale widened to round ticks (steps of 1, 2, 2.5 or 5 times a power of ten), about ``count`` of them."""
    if not hi > lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    ticks = tuple(round(i * step, 12) for i in range(first, last + 1))
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) + (1 if round(step / magnitude, 6) == 2.5 else 0)
    return Scale(ticks[0], ticks[-1], start, end, ticks, decimals)


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


def _x_axis(scale: Scale, top: float, bottom: float, *, prefix: str = "") -> list[str]:
    """Vertical grid lines at the ticks from ``top`` to ``bottom``, the axis line and the tick labels under it."""
    out = [_el("line", x1=scale.start, x2=scale.end, y1=bottom, y2=bottom, stroke=MUTED, class_="axis")]
    for t in scale.ticks:
        x = scale(t)
        out.append(_el("line", x1=x, x2=x, y1=top, y2=bottom, stroke=GRID, class_="grid"))
        out.append(_el("line", x1=x, x2=x, y1=bottom, y2=bottom + 4, stroke=MUTED, class_="tick"))
        out.append(_label(x, bottom + 16, scale.tick_label(t, prefix), text_anchor="middle", font_size=11,
                          fill=MUTED, class_="tick-label"))
    return out


# ---------------------------------------------------------------- forest plot

FOREST_WIDTH = 760
LABEL_RIGHT, PLOT_LEFT, PLOT_RIGHT, VALUE_LEFT = 204.0, 216.0, 490.0, 502.0
LABEL_CHARS = 26  # at 13 px, what fits left of LABEL_RIGHT
ROW_HEIGHT = 26.0
PANEL_HEAD, PANEL_FOOT, PANEL_GAP = 24.0, 34.0, 14.0
POINT_RADIUS = 4.5


def _signed(value: float) -> str:
    return reward(value) if value < 0 else "+" + reward(value)


def _row_values(row: Row, difference: bool) -> str:
    """The printed numbers of a row: the estimate and its interval, as the report's tables show them."""
    if not math.isfinite(row.estimate):
        return "no score" if not difference else "no shared Task scored"
    show = _signed if difference else reward
    interval = f"[{show(row.low)}, {show(row.high)}]" if _finite(row.low, row.high) else "(interval undefined)"
    return f"{show(row.estimate)} {interval}"


def _forest_panel(rows: list[Row], top: float, heading: str, scale_of: Scale, *, difference: bool) -> list[str]:
    """One panel: a heading, a row per estimate (label, interval, point, numbers), and its axis below."""
    body = [_label(8, top + 14, heading, font_weight="600", class_="panel-heading")]
    first = top + PANEL_HEAD
    bottom = first + ROW_HEIGHT * len(rows)
    body.extend(_x_axis(scale_of, first, bottom))
    if difference:
        zero = scale_of(0.0)
        body.append(_el("line", x1=zero, x2=zero, y1=first, y2=bottom, stroke=INK, stroke_width=1.5,
                        class_="zero"))
    for i, row in enumerate(best_first(rows)):
        y = first + ROW_HEIGHT * (i + 0.5)
        close = difference and row.too_close_to_call
        colour = WARN if close else ACCENT
        values = _row_values(row, difference)
        parts = [_el("title", _text(f"{row.label}: {values}" + (" (too close to call)" if close else ""))),
                 _label(LABEL_RIGHT, y + 4, _fit(row.label, LABEL_CHARS), text_anchor="end", class_="label")]
        if _finite(row.low, row.high):
            x1, x2 = scale_of(row.low), scale_of(row.high)
            parts.append(_el("line", x1=x1, x2=x2, y1=y, y2=y, stroke=colour, stroke_width=2,
                             stroke_dasharray="5 3" if close else None, class_="ci"))
            parts.extend(_el("line", x1=x, x2=x, y1=y - 4, y2=y + 4, stroke=colour, stroke_width=1.5,
                             class_="cap") for x in (x1, x2))
        if math.isfinite(row.estimate):
            parts.append(_el("circle", cx=scale_of(row.estimate), cy=y, r=POINT_RADIUS, fill=colour,
                             class_="estimate"))
        value_text = _text(values)
        if close:
            value_text += _el("tspan", "  too close to call", fill=WARN, font_weight="600", class_="too-close")
        parts.append(_el("text", value_text, x=VALUE_LEFT, y=y + 4, font_size=12,
                         fill=INK if math.isfinite(row.estimate) else MUTED, class_="value"))
        body.append(_el("g", "".join(parts), class_="row too-close-to-call" if close else "row"))
    return body


def _extent(rows: list[Row]) -> list[float]:
    return [v for r in rows for v in (r.estimate, r.low, r.high) if math.isfinite(v)]


def forest(report: RoundReport) -> Markup:
    """Each cell's mean Reward with its 95% bootstrap interval on a 0..1 axis, the best on top, and below, when the
    report compares cells, each paired difference (better minus worse) around a zero line; an interval crossing zero
    is dashed and marked "too close to call". The numbers are printed beside every row."""
    cells, differences = cell_rows(report), difference_rows(report)
    if not cells:
        return _sentence("No cell has been scored yet, so there is no forest plot to draw.")
    values = _extent(cells)
    # Rewards live in 0..1: keep that scale honest, widening it only if an interval leaves it.
    cell_scale = nice_scale(min([0.0, *values]), max([1.0, *values]), PLOT_LEFT + 6, PLOT_RIGHT - 6)
    body = _forest_panel(cells, 4, "Mean Reward per cell (95% CI)", cell_scale, difference=False)
    height = 4 + PANEL_HEAD + ROW_HEIGHT * len(cells) + PANEL_FOOT
    if differences:
        reach = max([abs(v) for v in _extent(differences)], default=0.0) or 0.1
        difference_scale = nice_scale(-reach, reach, PLOT_LEFT + 6, PLOT_RIGHT - 6, count=4)
        top = height + PANEL_GAP
        body += _forest_panel(differences, top, "Paired difference in mean Reward, better minus worse (95% CI)",
                              difference_scale, difference=True)
        height = top + PANEL_HEAD + ROW_HEIGHT * len(differences) + PANEL_FOOT
    title = (f"Forest plot: mean Reward with its 95% CI for {len(cells)} cell{'s' * (len(cells) != 1)}"
             + (f" and {len(differences)} paired difference{'s' * (len(differences) != 1)}" if differences else ""))
    return _svg(FOREST_WIDTH, height, title, body, class_="forest")


# ---------------------------------------------------------------- cost against score

COST_WIDTH, COST_HEIGHT = 760, 440
COST_LEFT, COST_RIGHT, COST_TOP, COST_BOTTOM = 64.0, 744.0, 52.0, 372.0
POINT_CHARS = 26
LABEL_FONT = 12


@dataclass(frozen=True)
class _Box:
    left: float
    top: float
    right: float
    bottom: float

    def overlaps(self, other: _Box) -> bool:
        return not (self.right <= other.left or other.right <= self.left
                    or self.bottom <= other.top or other.bottom <= self.top)


def _place_label(x: float, y: float, text: str, taken: list[_Box]) -> tuple[float, float, str]:
    """Where a point's label goes: the first spot around it that stays in the plot and clear of the labels and
    points already placed, so ten cells stay readable; when none is clear, the first that stays in the plot."""
    width, height = len(text) * LABEL_FONT * CHAR_WIDTH, LABEL_FONT + 2.0
    spots = [(dx, dy) for dy in (-7, 14, -19, 26, -31) for dx in (8, -8)]
    choices = []
    for dx, dy in spots:
        left = x + dx if dx > 0 else x + dx - width
        box = _Box(left, y + dy - LABEL_FONT, left + width, y + dy - LABEL_FONT + height)
        inside = box.left >= COST_LEFT and box.right <= COST_RIGHT + 12 and box.top >= COST_TOP - 14
        choices.append((inside and not any(box.overlaps(t) for t in taken), inside, box, dx, dy))
    _, _, box, dx, dy = next((c for c in choices if c[0]), next((c for c in choices if c[1]), choices[0]))
    taken.append(box)
    return x + dx, y + dy, "start" if dx > 0 else "end"


def _cost_tick_decimals(scale: Scale) -> Scale:
    """Costs are dollars: at least two decimals on the axis."""
    return Scale(scale.lo, scale.hi, scale.start, scale.end, scale.ticks, max(2, scale.decimals))


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 or value == 0 else f"${value:,.4f}"


def _step_line(points: Sequence[frontier.Point]) -> list[tuple[float, float]]:
    """The frontier as a staircase in (cost, score): from each frontier point right at its score to the next one's
    cost, then up to its score. Between two frontier points the best one can buy is the cheaper one's score."""
    corners = sorted({(p.cost_usd, p.score) for p in points})
    line: list[tuple[float, float]] = []
    for cost, score in corners:
        if line:
            line.append((cost, line[-1][1]))
        line.append((cost, score))
    return line


def cost_score(report: RoundReport) -> Markup:
    """Each cell's mean Reward (with its 95% CI as a vertical bar) against its cost per Trial; the cells on the
    frontier (no other cell is cheaper and better) filled and joined by a step line, the others hollow, each point
    labelled with its route. Cells without a Model Configuration (the bounds) are left out, as ``frontier`` says."""
    points = cost_points(report)
    shown = [p for p in points if _finite(p.score, p.cost_usd)]
    if not shown:
        return _sentence("No cell with a Model Configuration has a score yet, so there is no cost to weigh "
                         "against it.")
    marks = dict(zip(map(id, points), frontier.on_frontier(points), strict=True))
    costs = [p.cost_usd for p in shown]
    scores = [v for p in shown for v in (p.score, p.low, p.high) if math.isfinite(v)]
    x = _cost_tick_decimals(nice_scale(0.0, max([*costs, 0.0]) or 0.01, COST_LEFT + 10, COST_RIGHT - 10))
    y = nice_scale(min([0.0, *scores]), max([1.0, *scores]), COST_BOTTOM - 8, COST_TOP + 8)

    body = _x_axis(x, COST_TOP, COST_BOTTOM, prefix="$")
    body.append(_el("line", x1=COST_LEFT, x2=COST_LEFT, y1=COST_TOP, y2=COST_BOTTOM, stroke=MUTED, class_="axis"))
    for t in y.ticks:
        body.append(_el("line", x1=COST_LEFT, x2=COST_RIGHT, y1=y(t), y2=y(t), stroke=GRID, class_="grid"))
        body.append(_label(COST_LEFT - 6, y(t) + 4, y.tick_label(t), text_anchor="end", font_size=11, fill=MUTED,
                           class_="tick-label y-tick-label"))
    body.append(_label((COST_LEFT + COST_RIGHT) / 2, COST_BOTTOM + 34, "cost per Trial (USD)", text_anchor="middle",
                       class_="axis-label"))
    body.append(_label(14, (COST_TOP + COST_BOTTOM) / 2, "mean Reward (95% CI)", text_anchor="middle",
                       transform=f"rotate(-90 14 {_num((COST_TOP + COST_BOTTOM) / 2)})", class_="axis-label"))
    # The legend: what filled, hollow and the line mean.
    body += [_el("circle", cx=COST_LEFT + 6, cy=16, r=POINT_RADIUS, fill=ACCENT, stroke=ACCENT),
             _label(COST_LEFT + 16, 20, "on the frontier: no other cell is cheaper and better", font_size=12),
             _el("circle", cx=COST_LEFT + 6, cy=34, r=POINT_RADIUS, fill=HOLLOW, stroke=ACCENT),
             _label(COST_LEFT + 16, 38, "another cell costs no more and scores no less", font_size=12)]

    line = _step_line([p for p in shown if marks[id(p)]])
    if len(line) > 1:
        body.append(_el("polyline", points=" ".join(f"{_num(x(c))},{_num(y(s))}" for c, s in line), fill="none",
                        stroke=ACCENT, stroke_width=1.5, stroke_opacity="0.7", class_="frontier"))
    taken = [_Box(x(p.cost_usd) - 5, y(p.score) - 5, x(p.cost_usd) + 5, y(p.score) + 5) for p in shown]
    # Frontier points first, the best first: when labels crowd, theirs get the clear spots.
    for p in sorted(shown, key=lambda p: (not marks[id(p)], -p.score, p.cost_usd, p.label)):
        best = marks[id(p)]
        px, py = x(p.cost_usd), y(p.score)
        interval = f"[{reward(p.low)}, {reward(p.high)}]" if _finite(p.low, p.high) else "(interval undefined)"
        summary = (f"{p.label}: {_usd(p.cost_usd)} per Trial, mean Reward {reward(p.score)} {interval}, "
                   + ("on the frontier" if best else "not on the frontier"))
        parts = [_el("title", _text(summary))]
        if _finite(p.low, p.high):
            parts.append(_el("line", x1=px, x2=px, y1=y(p.low), y2=y(p.high), stroke=ACCENT if best else "#999999",
                             stroke_width=1.5, class_="ci"))
        parts.append(_el("circle", cx=px, cy=py, r=POINT_RADIUS + 0.5, fill=ACCENT if best else HOLLOW,
                         stroke=ACCENT, stroke_width=1.5, class_="estimate"))
        short = _fit(p.label, POINT_CHARS)
        lx, ly, anchor = _place_label(px, py, short, taken)
        parts.append(_label(lx, ly, short, text_anchor=anchor, font_size=LABEL_FONT,
                            font_weight="600" if best else None, class_="label"))
        body.append(_el("g", "".join(parts), class_="point on-frontier" if best else "point"))

    left_out = [c for c in report.cells if not c.model]
    unscored = len(points) - len(shown)
    notes = ([f"{len(left_out)} cell{'s' * (len(left_out) != 1)} without a Model Configuration (the bounds) "
              "left out: they cost nothing"] if left_out else [])
    notes += [f"{unscored} cell{'s' * (unscored != 1)} without a score not shown"] if unscored else []
    if notes:
        body.append(_label(COST_LEFT, COST_HEIGHT - 10, "; ".join(notes) + ".", font_size=12, fill=MUTED,
                           class_="note"))
    title = (f"Cost per Trial against mean Reward for {len(shown)} cell{'s' * (len(shown) != 1)}, "
             f"{sum(marks[id(p)] for p in shown)} on the frontier")
    return _svg(COST_WIDTH, COST_HEIGHT, title, body, class_="cost-score")


# ---------------------------------------------------------------- a Trial's phases

TIMING_WIDTH = 960
BAR_LEFT, BAR_RIGHT, BAR_TOP, BAR_HEIGHT = 8.0, 952.0, 26.0, 30.0
LEGEND_ROW = 20.0


def _share(part: float, total: float) -> str:
    return f"{100 * part / total:.0f}%"


def _known(secs: float | None) -> float | None:
    """A phase's seconds when they were recorded and make sense; None otherwise."""
    return secs if secs is not None and math.isfinite(secs) and secs >= 0 else None


def timing_bar(phases: Sequence[tuple[str, float | None]]) -> Markup:
    """A Trial's phases (environment setup, agent setup, agent execution, verifier) as one bar split in proportion
    to their seconds, each segment labelled where the label fits, and a legend under it naming every phase with its
    time, so a phase too short to label is still read. A phase without a time (None) is listed as not recorded."""
    timed = [(i, name, secs) for i, (name, s) in enumerate(phases) if (secs := _known(s)) is not None]
    total = sum(secs for _, _, secs in timed)
    if not total > 0:
        return _sentence("No phase of this Trial has a recorded time, so there is no timing to draw.")
    body = [_label(BAR_LEFT, 16, f"Total {seconds(total)}", font_weight="600", class_="total")]
    scale = (BAR_RIGHT - BAR_LEFT) / total
    left = BAR_LEFT
    for i, name, secs in timed:
        width = secs * scale
        if width <= 0:
            continue
        parts = [_el("title", _text(f"{name}: {seconds(secs)} ({_share(secs, total)})")),
                 _el("rect", x=left, y=BAR_TOP, width=width, height=BAR_HEIGHT,
                     fill=PHASE_COLOURS[i % len(PHASE_COLOURS)], stroke=HOLLOW, stroke_width=1, class_="segment")]
        for text in (f"{_fit(name, 40)} {seconds(secs)}", seconds(secs)):
            if len(text) * 13 * CHAR_WIDTH + 8 <= width:
                parts.append(_label(left + width / 2, BAR_TOP + BAR_HEIGHT / 2 + 4, text, text_anchor="middle",
                                    fill=HOLLOW, class_="segment-label"))
                break
        body.append(_el("g", "".join(parts), class_="phase"))
        left += width
    # The legend, every phase with its time, flowing onto more lines as it needs.
    x, y = BAR_LEFT, BAR_TOP + BAR_HEIGHT + 22
    described = []
    for i, (name, raw) in enumerate(phases):
        secs = _known(raw)
        time = "not recorded" if secs is None else f"{seconds(secs)} ({_share(secs, total)})"
        described.append(f"{name} {time}")
        text = f"{_fit(name, 40)}: {time}"
        width = 16 + len(text) * 13 * CHAR_WIDTH + 18
        if x > BAR_LEFT and x + width > BAR_RIGHT:
            x, y = BAR_LEFT, y + LEGEND_ROW
        colour = PHASE_COLOURS[i % len(PHASE_COLOURS)]
        body.append(_el("g", _el("title", _text(f"{name}: {time}"))
                        + _el("rect", x=x, y=y - 10, width=11.0, height=11.0,
                              fill=HOLLOW if secs is None else colour, stroke=colour)
                        + _label(x + 16, y, text, fill=INK if secs is not None else MUTED),
                        class_="legend-item"))
        x += width
    return _svg(TIMING_WIDTH, y + 10, "Timing of the Trial: " + ", ".join(described), body, class_="timing")
