"""The model judge against the provider double: stages, self-agreement, agreement with labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amber_pipeline.analysis import judge
from amber_pipeline.analysis import statistics as analysis_stats
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.errors import AmberError
from amber_pipeline.paths import PROJECT_ROOT

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
REPLAY = json.loads((PROJECT_ROOT / "examples" / "replays" / "judge-replay.json").read_text())


def failed_trial(tmp_path: Path, task: str, passed: bool = False) -> TrialEvidence:
    folder = tmp_path / f"{task}__1"
    (folder / "agent").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"task": {"path": str(DEMO / task)}}))
    (folder / "agent" / "trajectory.json").write_text(json.dumps(
        {"steps": [{"source": "user", "message": "do it"}, {"source": "agent", "message": "done"}]}))
    return TrialEvidence(
        source="job-x", trial_name=folder.name, task_name=task, agent="terminus-2", model="replay-weak",
        attempt=1, reward=1.0 if passed else 0.0, errored=False, exception_type=None, started_at=None,
        finished_at=None, agent_duration_sec=10.0, agent_timeout_sec=120.0, input_tokens=100, output_tokens=10,
        cost_usd=0.01, model_used=True, trajectory_steps=2, trajectory_ended_with_error=False,
        repeated_tool_error=False, tests_passed=None, tests_total=None, trial_dir=str(folder))


def expected_samples(task: str, n: int) -> list[str]:
    alternatives = [a["stage"] for a in REPLAY["tasks"][task][0]["alternatives"]]
    return [alternatives[k % len(alternatives)] for k in range(n)]


def test_judge_samples_stages_and_alpha(tmp_path: Path) -> None:
    tasks = ["count-log-errors", "csv-region-totals", "fix-off-by-one", "json-settings-update"]
    evidence = [failed_trial(tmp_path, t) for t in tasks] + [failed_trial(tmp_path / "ok", "ini-port-change", True)]
    labels = {"count-log-errors__1": "understand", "csv-region-totals__1": "understand",
              "fix-off-by-one__1": "verify", "json-settings-update__1": "verify"}
    out = judge.judge(evidence, "judge-replay", samples=3, stage_labels=labels)
    assert out.judged == 4  # the passed Trial is not judged
    by_trial = {t.trial: t for t in out.trials}
    for task in tasks:
        assert by_trial[f"{task}__1"].samples == expected_samples(task, 3)
    # majority stage per Trial, by hand
    assert [by_trial[f"{t}__1"].stage for t in tasks] == ["understand", "understand", "write", "verify"]
    assert out.sample_agreement == pytest.approx(2 / 4)
    units = [expected_samples(t, 3) for t in tasks]
    assert out.samples_alpha == pytest.approx(analysis_stats.krippendorff_alpha_nominal(units))
    assert out.samples_guidance == judge.alpha_guidance(out.samples_alpha)
    assert out.labels is not None
    assert out.labels.n_labels == 4 and out.labels.agreement == pytest.approx(3 / 4)
    # Nothing the judge read (the Instruction) is in its report.
    instruction = (DEMO / "count-log-errors" / "instruction.md").read_text().strip()
    assert instruction[:40] not in out.model_dump_json()
    # Without labels there is no labels field in its JSON at all.
    assert "labels" not in judge.judge(evidence, "judge-replay", samples=1).model_dump(mode="json")


def test_guidance_thresholds() -> None:
    assert "do not use" in judge.alpha_guidance(0.5)
    assert "tentatively" in judge.alpha_guidance(0.7)
    assert "usable" in judge.alpha_guidance(0.8)


def test_nothing_to_judge_and_bad_arguments(tmp_path: Path) -> None:
    passed = [failed_trial(tmp_path, "ini-port-change", passed=True)]
    with pytest.raises(AmberError, match="no failed Trial"):
        judge.judge(passed, "judge-replay")
    with pytest.raises(AmberError, match="samples must be from 1 to 10"):
        judge.judge(passed, "judge-replay", samples=0)
    with pytest.raises(AmberError, match="Unknown Model Configuration"):
        judge.judge(passed, "gpt-99")
