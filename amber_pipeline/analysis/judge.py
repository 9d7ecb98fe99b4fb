"""A model judge: sorts failed Trials into the stage where they went wrong.

Stages (evaluation-analysis.md, section 3): understand (misread the goal),
write (the work itself was wrong), verify (did the work but never checked
it), other. The judge calls a Model Configuration the way Amber's Agents do
(litellm, OpenAI wire format, the Model Configuration's endpoint) several
times per Trial. Its own consistency comes first: Krippendorff's alpha over
its samples (< 0.667 unusable, 0.667-0.8 tentative, >= 0.8 usable); then,
given stage labels, its agreement with them. The judge reads the Task's
Instruction and the Trial's trajectory to decide, but its report holds only
stages and numbers, never what it read.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from amber_pipeline.analysis import statistics as analysis_stats
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.report import absent
from amber_pipeline.errors import AmberError
from amber_pipeline.models.configurations import ModelConfiguration, model_configuration
from amber_pipeline.models.endpoint import Upstream, offline_litellm, serving

Stage = Literal["understand", "write", "verify", "other"]
STAGES: tuple[Stage, ...] = ("understand", "write", "verify", "other")
TRAJECTORY_CHARS = 6_000
PROMPT = """You review a failed attempt of an AI agent at a task. Say at which stage it went wrong:
"understand" (it misread the goal), "write" (its work was wrong), "verify" (it did not check its work),
or "other". Answer with JSON only: {{"stage": "<stage>"}}.

Task instruction:
{instruction}

What the agent did (last steps of its trajectory):
{trajectory}
"""


@dataclass(frozen=True)
class Judgement:
    trial_name: str
    task_name: str
    samples: tuple[Stage, ...]

    @property
    def stage(self) -> Stage:
        """The most common sample; ties go to the earlier stage in STAGES."""
        counts = Counter(self.samples)
        return max(STAGES, key=lambda s: (counts[s], -STAGES.index(s)))


class JudgedTrial(BaseModel):
    trial: str
    task: str
    stage: Stage = Field(description="The commonest of its samples (a tie: the earlier stage).")
    samples: list[Stage]


class LabelAgreement(BaseModel):
    """The judge's stages against the stage labels given."""

    n_labels: int = Field(description="Judged Trials with a label.")
    agreement: float = Field(description="The share of them where the judge's stage is the label.")
    cohen_kappa: float | None
    krippendorff_alpha: float | None


class JudgeReport(BaseModel):
    """A model judge's stages of a round's failed scored attempts, and how far to trust them: first its agreement
    with itself over its samples, then, given labels, with them. Stages and numbers only: nothing it read."""

    model_configuration: str = Field(description="The judge's Model Configuration.")
    samples: int = Field(description="Judgements per Trial.")
    judged: int
    skipped: int = Field(description="Failed Trials without their Task folder at hand.")
    stages: dict[Stage, int] = Field(description="Trials per stage, commonest first.")
    sample_agreement: float = Field(description="The share of Trials whose samples all agree.")
    samples_alpha: float | None = Field(description="Krippendorff's alpha over the samples; null when undefined.")
    samples_guidance: str
    trials: list[JudgedTrial]
    labels: LabelAgreement | None = Field(None, exclude_if=absent, description="Only when stage labels were "
                                                                               "given and name a judged Trial.")


def alpha_guidance(alpha: float) -> str:
    if alpha != alpha:
        return "The samples cannot be compared (too few, or all one stage): alpha is undefined."
    if alpha < 0.667:
        return "The judge disagrees with itself too often (alpha < 0.667): do not use its stages."
    if alpha < 0.8:
        return "The judge is tentatively consistent (0.667 <= alpha < 0.8): use its stages with care."
    return "The judge is consistent (alpha >= 0.8): its stages are usable."


def judge(evidence: list[TrialEvidence], model: str, samples: int = 3,
          stage_labels: dict[str, str] | None = None) -> JudgeReport:
    """Judge every failed scored attempt `samples` times; report stages, self-agreement and label agreement."""
    if not 1 <= samples <= 10:
        raise AmberError(f"--samples must be from 1 to 10, not {samples}.")
    mc = model_configuration(model)
    failed = [e for e in evidence if e.scored and not e.passed and e.model is not None]  # bounds call no model
    cases = [(e, _instruction(e), _trajectory(e)) for e in failed]
    cases = [(e, i, t) for e, i, t in cases if i is not None]
    if not cases:
        raise AmberError("There is no failed Trial with its Task folder at hand to judge.")
    with serving(mc, {e.task_name: i for e, i, _ in cases if i}) as upstream:
        judgements = [Judgement(e.trial_name, e.task_name,
                                tuple(_ask(mc, upstream, PROMPT.format(instruction=i, trajectory=t))
                                      for _ in range(samples)))
                      for e, i, t in cases]
    units = [list(j.samples) for j in judgements]
    alpha = analysis_stats.krippendorff_alpha_nominal(units) if samples > 1 else float("nan")
    out = JudgeReport(
        model_configuration=model, samples=samples, judged=len(judgements), skipped=len(failed) - len(judgements),
        stages=dict(Counter(j.stage for j in judgements).most_common()),
        sample_agreement=sum(len(set(j.samples)) == 1 for j in judgements) / len(judgements),
        samples_alpha=analysis_stats.defined(alpha), samples_guidance=alpha_guidance(alpha),
        trials=[JudgedTrial(trial=j.trial_name, task=j.task_name, stage=j.stage, samples=list(j.samples))
                for j in judgements],
    )
    if stage_labels:
        labelled = [j for j in judgements if j.trial_name in stage_labels]
        if labelled:
            judged = [j.stage for j in labelled]
            truth = [stage_labels[j.trial_name] for j in labelled]
            kappa = analysis_stats.cohen_kappa(judged, truth)
            pairs = [[a, b] for a, b in zip(judged, truth, strict=True)]
            label_alpha = analysis_stats.krippendorff_alpha_nominal(pairs)
            out.labels = LabelAgreement(
                n_labels=len(labelled),
                agreement=sum(a == b for a, b in zip(judged, truth, strict=True)) / len(labelled),
                cohen_kappa=analysis_stats.defined(kappa),
                krippendorff_alpha=analysis_stats.defined(label_alpha))
    return out


def _instruction(e: TrialEvidence) -> str | None:
    """The Task's Instruction, from the Trial folder's config (the Task folder it ran)."""
    if not e.trial_dir:
        return None
    try:
        config = json.loads((Path(e.trial_dir) / "config.json").read_text())
        return (Path(config["task"]["path"]) / "instruction.md").read_text().strip()
    except (OSError, KeyError, TypeError, ValueError):
        return None


def _trajectory(e: TrialEvidence) -> str:
    try:
        steps = json.loads((Path(e.trial_dir or "") / "agent" / "trajectory.json").read_text())["steps"]
    except (OSError, KeyError, ValueError):
        return "(no trajectory)"
    text = "\n".join(f"[{s.get('source')}] {str(s.get('message', ''))[:800]}" for s in steps)
    return text[-TRAJECTORY_CHARS:]


def _ask(mc: ModelConfiguration, upstream: Upstream, prompt: str) -> Stage:
    offline_litellm()
    import litellm

    try:
        settings = mc.settings.model_dump(exclude_none=True, exclude={"max_output_tokens", "reasoning_effort"})
        reply = litellm.completion(model=f"{mc.provider_spec.litellm_prefix}/{mc.model}", api_base=upstream.url,
                                   api_key=upstream.key or "none", messages=[{"role": "user", "content": prompt}],
                                   **settings)
        stage = json.loads(reply.choices[0].message.content).get("stage")
    except (ValueError, AttributeError, litellm.exceptions.APIError) as e:
        raise AmberError(f"The judge {mc.name} did not answer ({type(e).__name__}): check the Model "
                         "Configuration and try again.") from None
    return stage if stage in STAGES else "other"
