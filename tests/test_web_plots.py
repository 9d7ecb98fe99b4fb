"""The web app's inline SVG plots (web/plots.py), read as a reader would: positions against the printed axis,
intervals against the report's bounds, the frontier line against analysis/frontier.py, and user text escaped."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from markupsafe import Markup

from amber_pipeline.analysis import frontier
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.plot_rows import cost_points
from amber_pipeline.analysis.report import CellComparison, Rate, ReportCell, RoundReport, build_report
from web import plots

NS = {"svg": "http://www.w3.org/2000/svg"}
SCRIPT = "<script>alert(1)</script>"


def cell(route: str, mean: float | None, low: float | None = None, high: float | None = None, *,
         cost: float = 0.1, n_trials: int = 10, model: str | None = "m") -> ReportCell:
    rate = Rate(solved=0, n=0, percent=None, ci95=(None, None))
    return ReportCell(source="job-t", route=route, agent=route.partition("/")[0], model=model, mean_reward=mean,
                      ci95=(low, high), pass_rate=rate, strict_pass_rate=rate, cost_usd=cost, mean_duration_sec=None,
                      errored=0, n_tasks=5, n_trials=n_trials)


def compared(better: str, worse: str, diff: float | None, low: float | None, high: float | None) -> CellComparison:
    close = low is not None and high is not None and low <= 0 <= high
    return CellComparison(better=better, worse=worse, mean_difference=diff, ci95=(low, high), n_shared_tasks=5,
                          too_close_to_call=close)


@pytest.fixture(scope="module")
def base() -> RoundReport:
    """A real report, whose cells and comparisons each test replaces with the ones it draws."""
    return build_report([TrialEvidence(
        source="job-t", trial_name=f"{task}__m", task_name=task, agent="t2", model="m", attempt=1, reward=reward,
        errored=False, exception_type=None, started_at=None, finished_at=None, agent_duration_sec=None,
        agent_timeout_sec=None, input_tokens=10, output_tokens=5, cost_usd=0.01, model_used=True, trajectory_steps=1,
        trajectory_ended_with_error=False, repeated_tool_error=False, tests_passed=None, tests_total=None,
        trial_dir=None) for task, reward in (("t1", 1.0), ("t2", 0.0))])


def report_of(base: RoundReport, cells: list[ReportCell], comparisons: list[CellComparison] = ()) -> RoundReport:
    return base.model_copy(update={"cells": cells, "comparisons": list(comparisons)})


def parse(svg: Markup) -> ET.Element:
    assert isinstance(svg, Markup)
    root = ET.fromstring(str(svg))
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.get("role") == "img" and root.get("aria-label") and root.find("svg:title", NS) is not None
    assert root.get("viewBox", "").startswith("0 0 ") and 560 <= float(root.get("width", 0)) <= 1200
    assert not any(e.get("style") for e in root.iter()), "the CSP forbids style attributes"
    return root


def text(e: ET.Element) -> str:
    return "".join(e.itertext())


def axis(panel: ET.Element) -> tuple[float, float, float, float]:
    """Two printed ticks of a panel's x axis: (value, x) of the first and the last, as a reader uses them."""
    ticks = [(float(text(t).lstrip("$")), float(t.get("x", "nan"))) for t in panel.iter()
             if "tick-label" in (t.get("class") or "") and "y-tick-label" not in (t.get("class") or "")]
    (v0, x0), (v1, x1) = ticks[0], ticks[-1]
    return v0, x0, v1, x1


def at(value: float, scale: tuple[float, float, float, float]) -> float:
    v0, p0, v1, p1 = scale
    return p0 + (value - v0) / (v1 - v0) * (p1 - p0)


def rows(root: ET.Element) -> dict[str, ET.Element]:
    """Each row (or point) group by the full label its tooltip names."""
    return {text(g.find("svg:title", NS)).split(": ")[0]: g for g in root.iter("{http://www.w3.org/2000/svg}g")
            if (g.get("class") or "").split()[0] in ("row", "point")}


def panels(root: ET.Element) -> list[list[ET.Element]]:
    """The forest plot's panels: the elements after each heading, up to the next."""
    out: list[list[ET.Element]] = []
    for e in root:
        if e.get("class") == "panel-heading":
            out.append([])
        elif out:
            out[-1].append(e)
    return out


def wrap(elements: list[ET.Element]) -> ET.Element:
    g = ET.Element("g")
    g.extend(elements)
    return g


# ---------------------------------------------------------------- forest


def test_forest_puts_each_point_and_interval_where_the_axis_says(base: RoundReport) -> None:
    cells = [cell("t2/a", 0.72, 0.61, 0.80), cell("t2/b", 0.35, 0.20, 0.52), cell("oracle", 1.0, 1.0, 1.0, model=None)]
    report = report_of(base, cells, [compared("t2/a", "t2/b", 0.37, 0.21, 0.52)])
    root = parse(plots.forest(report))
    cell_panel, difference_panel = panels(root)
    scale = axis(wrap(cell_panel))
    assert scale[0] == 0 and scale[2] == 1  # Rewards on a 0..1 axis
    by_label = rows(root)
    for c in cells:
        g = by_label[c.route]
        assert float(g.find("svg:circle", NS).get("cx")) == pytest.approx(at(c.mean_reward, scale), abs=0.01)
        ci = g.find("svg:line[@class='ci']", NS)
        assert float(ci.get("x1")) == pytest.approx(at(c.ci95[0], scale), abs=0.01)
        assert float(ci.get("x2")) == pytest.approx(at(c.ci95[1], scale), abs=0.01)
        assert text(g.find("svg:text[@class='label']", NS)) == c.route
    # The best on top.
    ys = [float(by_label[r].find("svg:circle", NS).get("cy")) for r in ("oracle", "t2/a", "t2/b")]
    assert ys == sorted(ys)
    # The difference panel: labelled a - b (agent), around a zero line, on its own axis.
    diff_scale = axis(wrap(difference_panel))
    zero = wrap(difference_panel).find("svg:line[@class='zero']", NS)
    assert float(zero.get("x1")) == pytest.approx(at(0.0, diff_scale), abs=0.01)
    g = by_label["a - b (t2)"]
    assert float(g.find("svg:circle", NS).get("cx")) == pytest.approx(at(0.37, diff_scale), abs=0.01)
    ci = g.find("svg:line[@class='ci']", NS)
    assert (float(ci.get("x1")), float(ci.get("x2"))) == pytest.approx((at(0.21, diff_scale), at(0.52, diff_scale)),
                                                                       abs=0.01)
    assert "too close" not in text(g)


def test_forest_marks_a_difference_too_close_to_call(base: RoundReport) -> None:
    report = report_of(base, [cell("t2/a", 0.5, 0.4, 0.6), cell("t2/b", 0.45, 0.35, 0.55)],
                       [compared("t2/a", "t2/b", 0.05, -0.08, 0.17)])
    root = parse(plots.forest(report))
    g = rows(root)["a - b (t2)"]
    assert "too-close-to-call" in g.get("class", "")
    assert "too close to call" in text(g.find("svg:text[@class='value']", NS))
    ci = g.find("svg:line[@class='ci']", NS)
    zero = root.find(".//svg:line[@class='zero']", NS)
    assert float(ci.get("x1")) < float(zero.get("x1")) < float(ci.get("x2"))  # the interval crosses the zero line
    assert ci.get("stroke-dasharray")


def test_forest_shows_undefined_numbers_as_words_not_marks(base: RoundReport) -> None:
    report = report_of(base, [cell("t2/a", 0.5, 0.4, 0.6), cell("t2/none", None), cell("t2/half", 0.3, None, 0.4)],
                       [compared("t2/a", "t2/none", None, None, None)])
    root = parse(plots.forest(report))
    by_label = rows(root)
    assert by_label["t2/none"].find("svg:circle", NS) is None and by_label["t2/none"].find("svg:line", NS) is None
    assert "no score" in text(by_label["t2/none"])
    half = by_label["t2/half"]
    assert half.find("svg:circle", NS) is not None and half.find("svg:line[@class='ci']", NS) is None
    assert "interval undefined" in text(half)
    assert "no shared Task scored" in text(by_label["a - none (t2)"])
    # The unscored row comes last.
    ys = [float(g.find("svg:text", NS).get("y")) for g in (by_label["t2/a"], by_label["t2/half"], by_label["t2/none"])]
    assert ys == sorted(ys)


def test_forest_of_one_cell_has_no_difference_panel(base: RoundReport) -> None:
    root = parse(plots.forest(report_of(base, [cell("t2/a", 0.5, 0.4, 0.6)])))
    assert len(panels(root)) == 1 and root.find(".//svg:line[@class='zero']", NS) is None
    assert "1 cell" in root.get("aria-label", "")


def test_forest_of_many_cells_gives_each_its_own_row(base: RoundReport) -> None:
    cells = [cell(f"t2/m{i}", i / 14, max(0, i / 14 - 0.1), min(1, i / 14 + 0.1)) for i in range(14)]
    root = parse(plots.forest(report_of(base, cells)))
    ys = [float(g.find("svg:circle", NS).get("cy")) for g in rows(root).values()]
    assert len(set(ys)) == 14 and min(b - a for a, b in zip(sorted(ys), sorted(ys)[1:], strict=False)) >= 20
    assert float(root.get("height")) >= 14 * 20


def test_long_names_are_cut_with_the_full_name_in_the_tooltip(base: RoundReport) -> None:
    long = "t2/" + "very-long-model-configuration-name-" * 4
    root = parse(plots.forest(report_of(base, [cell(long, 0.5, 0.4, 0.6)])))
    g = rows(root)[long]
    shown = text(g.find("svg:text[@class='label']", NS))
    head, _, tail = shown.partition("…")
    assert len(shown) <= 30 and head and tail and long.startswith(head) and long.endswith(tail)
    assert text(g.find("svg:title", NS)).startswith(long + ": ")


def test_user_text_is_escaped_in_every_plot(base: RoundReport) -> None:
    route = f"t2/{SCRIPT}\"'&"
    report = report_of(base, [cell(route, 0.5, 0.4, 0.6), cell("t2/b", 0.4, 0.3, 0.5, cost=0.2)],
                       [compared(route, "t2/b", 0.1, -0.02, 0.2)])
    for svg in (plots.forest(report), plots.cost_score(report), plots.timing_bar([(SCRIPT, 3.0), ("ok", 1.0)])):
        assert "<script" not in str(svg) and "&lt;script&gt;" in str(svg)
        root = parse(svg)
        assert not any(e.tag.endswith("script") for e in root.iter())
        assert any(SCRIPT in text(e) for e in root.iter() if e.tag.endswith(("text", "title")))  # shown as text
        assert str(Markup("{}").format(svg)) == str(svg)  # Jinja-style interpolation does not escape it twice
    assert route in rows(parse(plots.forest(report)))


def test_characters_xml_cannot_carry_do_not_break_the_svg(base: RoundReport) -> None:
    parse(plots.forest(report_of(base, [cell("t2/a\x00b\x1b", 0.5, 0.4, 0.6)])))


def test_empty_inputs_give_a_sentence(base: RoundReport) -> None:
    empty = report_of(base, [])
    bounds_only = report_of(base, [cell("oracle", 1.0, 1.0, 1.0, model=None), cell("nop", 0.0, 0.0, 0.0, model=None)])
    unscored = report_of(base, [cell("t2/a", None)])
    for out in (plots.forest(empty), plots.cost_score(empty), plots.cost_score(bounds_only),
                plots.cost_score(unscored), plots.timing_bar([]), plots.timing_bar([("agent setup", None)]),
                plots.timing_bar([("agent setup", 0.0)])):
        assert isinstance(out, Markup)
        p = ET.fromstring(str(out))
        assert p.tag == "p" and text(p).endswith(".") and text(p)[0].isupper() and "svg" not in str(out)


# ---------------------------------------------------------------- cost against score


def cost_report(base: RoundReport) -> RoundReport:
    cells = [cell("t2/cheap", 0.40, 0.30, 0.50, cost=0.10), cell("t2/mid", 0.70, 0.60, 0.80, cost=0.20),
             cell("t2/dear", 0.72, 0.62, 0.82, cost=0.40), cell("t2/dominated", 0.60, 0.50, 0.70, cost=0.30),
             cell("t2/tie", 0.70, 0.60, 0.80, cost=0.20), cell("t2/unscored", None, cost=0.01),
             cell("t2/no-trials", 0.9, 0.8, 1.0, n_trials=0), cell("oracle", 1.0, 1.0, 1.0, cost=0.0, model=None)]
    return report_of(base, cells)


def point_positions(root: ET.Element) -> dict[str, tuple[float, float, bool]]:
    return {label: (float(g.find("svg:circle", NS).get("cx")), float(g.find("svg:circle", NS).get("cy")),
                    "on-frontier" in g.get("class", "")) for label, g in rows(root).items()}


def y_axis(root: ET.Element) -> tuple[float, float, float, float]:
    ticks = [(float(text(t)), float(t.get("y", "nan")) - 4) for t in root.iter()
             if "y-tick-label" in (t.get("class") or "")]
    (v0, y0), (v1, y1) = ticks[0], ticks[-1]
    return v0, y0, v1, y1


def test_cost_score_places_points_and_intervals_on_the_axes(base: RoundReport) -> None:
    report = cost_report(base)
    root = parse(plots.cost_score(report))
    xs, ys = axis(root), y_axis(root)
    assert xs[0] == 0 and ys[0] == 0 and ys[2] == 1
    shown = rows(root)
    for point in cost_points(report):
        if not math.isfinite(point.score):
            assert point.label not in shown
            continue
        g = shown[point.label]
        circle, ci = g.find("svg:circle", NS), g.find("svg:line[@class='ci']", NS)
        assert float(circle.get("cx")) == pytest.approx(at(point.cost_usd, xs), abs=0.01)  # cost per Trial
        assert float(circle.get("cy")) == pytest.approx(at(point.score, ys), abs=0.01)
        assert float(ci.get("x1")) == float(ci.get("x2")) == float(circle.get("cx"))  # a vertical bar
        assert sorted([float(ci.get("y1")), float(ci.get("y2"))]) == pytest.approx(
            sorted([at(point.low, ys), at(point.high, ys)]), abs=0.01)
        assert text(g.find("svg:text[@class='label']", NS)) == point.label
    # The bounds and a cell without Trials are left out, as frontier.py says; the note says so.
    assert "oracle" not in shown and "t2/no-trials" not in shown
    assert "without a Model Configuration" in text(root.find(".//svg:text[@class='note']", NS))


def test_the_frontier_step_line_passes_through_exactly_the_frontier_points(base: RoundReport) -> None:
    report = cost_report(base)
    points = cost_points(report)
    marks = dict(zip((p.label for p in points), frontier.on_frontier(points), strict=True))
    root = parse(plots.cost_score(report))
    shown = point_positions(root)
    for label, (_, _, highlighted) in shown.items():
        assert highlighted == marks[label]
    [line] = root.findall(".//svg:polyline[@class='frontier']", NS)
    vertices = [tuple(map(float, v.split(","))) for v in line.get("points", "").split()]
    frontier_xy = sorted({(x, y) for x, y, best in shown.values() if best})
    assert vertices[::2] == frontier_xy  # through every frontier point, cheapest first
    for (x0, y0), (x1, y1) in zip(vertices, vertices[1:], strict=False):
        assert x0 == x1 or y0 == y1  # a step line: only horizontal and vertical runs
    for x, y in vertices[1::2]:  # the corners between them: right at one's score, then up to the next
        assert (x, y) not in {(px, py) for px, py, _ in shown.values()}
    for x, y, best in shown.values():
        assert ((x, y) in vertices) == best


def test_cost_score_of_one_cell_or_zero_costs(base: RoundReport) -> None:
    one = parse(plots.cost_score(report_of(base, [cell("t2/a", 0.5, 0.4, 0.6)])))
    assert point_positions(one)["t2/a"][2] and one.find(".//svg:polyline", NS) is None
    free = report_of(base, [cell("t2/a", 0.5, 0.4, 0.6, cost=0.0), cell("t2/b", 0.7, 0.6, 0.8, cost=0.0)])
    root = parse(plots.cost_score(free))
    shown = point_positions(root)
    assert shown["t2/b"][2] and not shown["t2/a"][2]  # same cost, better score
    assert shown["t2/a"][0] == shown["t2/b"][0] == pytest.approx(at(0.0, axis(root)), abs=0.01)
    assert all(math.isfinite(float(v)) for e in root.iter() for k, v in e.attrib.items() if k in ("x", "cx", "y"))


def test_cost_score_labels_of_many_cells_do_not_pile_up(base: RoundReport) -> None:
    cells = [cell(f"t2/model-{i}", 0.5 + 0.01 * (i % 3), 0.4, 0.7, cost=0.1 + 0.001 * i) for i in range(12)]
    root = parse(plots.cost_score(report_of(base, cells)))
    labels = [(float(t.get("x")), float(t.get("y"))) for t in root.iter() if t.get("class") == "label"]
    assert len(labels) == 12 and len(set(labels)) == 12


# ---------------------------------------------------------------- timing


def test_timing_bar_widths_are_proportional_and_labelled() -> None:
    phases = [("environment setup", 12.0), ("agent setup", 3.0), ("agent execution", 120.0), ("verifier", 0.5)]
    root = parse(plots.timing_bar(phases))
    segments = root.findall(".//svg:g[@class='phase']", NS)
    assert len(segments) == 4
    widths = [float(g.find("svg:rect", NS).get("width")) for g in segments]
    assert [w / s for w, (_, s) in zip(widths, phases, strict=True)] == pytest.approx([widths[2] / 120.0] * 4,
                                                                                      rel=1e-3)
    xs = [float(g.find("svg:rect", NS).get("x")) for g in segments]
    assert all(x0 + w == pytest.approx(x1, abs=0.02) for x0, w, x1 in zip(xs, widths, xs[1:], strict=False))
    for g, (name, _) in zip(segments, phases, strict=True):
        assert text(g.find("svg:title", NS)).startswith(name + ": ")
    # The long phase carries its name and time; the half second is too narrow for any label, but the legend has it.
    assert text(segments[2].find("svg:text", NS)) == "agent execution 2 min 00 s"
    assert segments[3].find("svg:text", NS) is None
    legend = [text(t) for t in root.findall(".//svg:g[@class='legend-item']/svg:text", NS)]
    assert legend == ["environment setup: 12.0 s (9%)", "agent setup: 3.0 s (2%)", "agent execution: 2 min 00 s (89%)",
                      "verifier: 0.5 s (0%)"]


def test_timing_bar_lists_a_phase_without_a_time() -> None:
    root = parse(plots.timing_bar([("environment setup", 10.0), ("agent setup", None), ("agent execution", 30.0)]))
    assert len(root.findall(".//svg:g[@class='phase']", NS)) == 2
    legend = [text(t) for t in root.findall(".//svg:g[@class='legend-item']/svg:text", NS)]
    assert legend[1] == "agent setup: not recorded"
    assert "agent setup not recorded" in root.get("aria-label", "")
