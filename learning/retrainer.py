"""The retraining process behind `adserve model retrain`: each run reads the training join's output and the
model registry, then judges the canary, trains a new model, refits the current model's calibration, or waits
(the rules are learning.retrain's). It reads the topics, writes the model folders with their evaluation.json and
publishes registry entries; it never parses flags or prints a report (the command does)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from learning import retrain
from learning.canary import PromotionRule
from learning.retrain import RetrainPolicy, RetrainState, RunReport
from schemas import topics

TRAINING_EXAMPLE, SERVED_RECORD = (topics.record_type(topic) for topic in (topics.TRAINING_EXAMPLES, topics.AD_SERVED))


@dataclass(frozen=True)
class RetrainSettings:
    """What a retraining process runs with: where its models live, its cadences and canary rule, its topics."""

    models: Path
    policy: RetrainPolicy = field(default_factory=RetrainPolicy)
    rule: PromotionRule = field(default_factory=PromotionRule)
    ad_features: Path | None = None  # the features job's snapshot folder; else the registry's FEATURES entry's
    epochs: int = 10  # most epochs of a full training
    examples_topic: str = topics.TRAINING_EXAMPLES
    served_topic: str = topics.AD_SERVED
    registry_topic: str = topics.MODEL_REGISTRY


class Retrainer:
    """One retraining process: its settings, its state file (retrain-state.json beside the models) and its runs."""

    def __init__(self, settings: RetrainSettings, bootstrap: str, log: Callable[[str], None] = print):
        self.settings, self.bootstrap, self.log = settings, bootstrap, log
        self.models, self.policy, self.rule = settings.models, settings.policy, settings.rule
        self.examples_topic = settings.examples_topic
        self.served_topic = settings.served_topic
        self.registry_topic = settings.registry_topic
        self.state_file = self.models / "retrain-state.json"
        self.state = RetrainState(**json.loads(self.state_file.read_text())) if self.state_file.exists() \
            else RetrainState()

    def save_state(self) -> None:
        self.models.mkdir(parents=True, exist_ok=True)
        partial = self.state_file.with_suffix(".partial")
        partial.write_text(json.dumps(self.state.as_dict()))
        partial.replace(self.state_file)

    def run(self) -> RunReport:
        """One run: judge, train, refit or wait, as learning.retrain.next_action decides; the state saved."""
        from streams.kafka import read_records
        from serving.model.registry import read_registry

        registry = read_registry(self.bootstrap, topic=self.registry_topic)
        since = 0
        if self.state.last_full_ms:
            since = int(min(self.state.last_full_ms, self.state.canary_since_ms or self.state.last_full_ms)
                        - max(self.policy.window_s, self.policy.canary_max_age_s) * 1000)
        examples = read_records(self.bootstrap, self.examples_topic, TRAINING_EXAMPLE, max(0, since))
        newest = max((int(r["served_time"]) for r in examples), default=0)
        action = retrain.next_action(self.state, has_current=registry.current is not None,
                                     has_canary=registry.canary is not None, newest_event_ms=newest,
                                     policy=self.policy)
        report = RunReport(action, newest)
        if action == retrain.JUDGE:
            self._judge(registry, examples, report)
        elif action in (retrain.FULL, retrain.UPDATE):
            self._train(action, registry, examples, newest, report)
        self.state.runs += 1
        self.save_state()
        return report

    def _snapshots(self, registry, records):
        from serving.model import ad_features

        folder = self.settings.ad_features or (Path(registry.features.directory) if registry.features else None)
        if folder is None:
            return {}, None
        available = set(ad_features.versions(folder))
        needed = {int(r["ad_snapshot_version"]) for r in records} & available
        return {v: ad_features.load(folder, v) for v in sorted(needed)}, folder

    def _train(self, action: str, registry, examples, newest: int, report) -> None:
        from learning.dataset import harmonise_keep_rate
        from serving.model.click_model import ClickModel, save_versioned
        from serving.model.registry import CANARY, model_entry, model_refusal, publish

        window = self.policy.window_s if action == retrain.FULL else self.policy.update_window_s
        records = retrain.in_window(examples, newest, window)
        snapshots, folder = self._snapshots(registry, records)
        records, report.examples_without_snapshot = retrain.with_snapshots(records, set(snapshots))
        report.examples = len(records)
        too_few = retrain.trainable(records, self.policy)
        if too_few is not None:
            report.action, report.reason = retrain.WAIT, f"not trained: {too_few}"
            return
        began = time.monotonic()
        if action == retrain.FULL:
            from learning.network import TrainConfig
            from learning.trainer import train_click_model

            records, keep_rate = harmonise_keep_rate([records])
            model = train_click_model(records, snapshots, keep_rate, TrainConfig(epochs=self.settings.epochs),
                                      log=self.log)
            report.figures = {"validation_metrics": model.metadata["validation_metrics"]}
        else:
            model = ClickModel.load(Path(registry.current.directory))
            report.figures = retrain.recalibrate(model, records, snapshots)
            model.metadata["validation_metrics"] = {**model.metadata.get("validation_metrics", {}),
                                                    "model": report.figures["model"]}
            model.metadata["updated_from"] = registry.current.version
        model.metadata.update(trained_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), retrain_kind=action,
                              training_seconds=round(time.monotonic() - began, 1), newest_event_ms=newest)
        directory = save_versioned(model, self.models, export_saved_model=False)
        report.model_version = directory.name
        (directory / "evaluation.json").write_text(json.dumps(
            {"kind": action, "examples": report.examples, "examples_without_snapshot": report.examples_without_snapshot,
             "newest_event_ms": newest, "ad_features": str(folder), **report.figures}, indent=1))
        refusal = model_refusal(directory)
        if refusal is not None:
            report.reason = f"not published: {refusal}"
            return
        publish(self.bootstrap, model_entry(CANARY, directory.name, directory, share=self.policy.canary_share,
                                            reason=f"{action} retrain on {report.examples:,} examples"),
                topic=self.registry_topic)
        report.published.append(f"CANARY {directory.name} on {self.policy.canary_share:.1%}")
        self.state.canary_since_ms = newest
        self.state.last_trained_ms = newest
        if action == retrain.FULL:
            self.state.last_full_ms = newest

    def _judge(self, registry, examples, report) -> None:
        from learning.canary import canary_report
        from serving.decision.prediction import PriorPredictor
        from serving.model.canary import HOLD, NOT_ENOUGH_DATA, PROMOTE
        from serving.model.registry import CANARY, CURRENT, model_entry, publish
        from streams.kafka import read_records

        candidate = registry.canary.version
        current = registry.current.version if registry.current else PriorPredictor.version
        since = self.state.canary_since_ms
        served = [r for r in read_records(self.bootstrap, self.served_topic, SERVED_RECORD, since)
                  if r.get("model_version") in (candidate, current)]
        judged = [r for r in examples if int(r["served_time"]) >= since]
        verdict = canary_report(served, judged, current=current, candidate=candidate, rule=self.rule)
        report.model_version, report.verdict = candidate, verdict["verdict"]
        report.figures = {"canary_report": verdict}
        newest = report.newest_event_ms
        if verdict["verdict"] == PROMOTE:
            publish(self.bootstrap, model_entry(CURRENT, candidate, registry.canary.directory,
                                                reason=f"promoted over {current}: canary verdict promote"),
                    topic=self.registry_topic)
            publish(self.bootstrap, model_entry(CANARY, None, None, reason=f"{candidate} promoted"),
                    topic=self.registry_topic)
            report.published += [f"CURRENT {candidate}", "CANARY none"]
            self._record_verdict(registry.canary.directory, verdict)
        elif verdict["verdict"] == HOLD or (verdict["verdict"] == NOT_ENOUGH_DATA and since
                                            and newest - since > self.policy.canary_max_age_s * 1000):
            why = "; ".join(verdict.get("reasons") or []) or "no verdict within the canary's time"
            publish(self.bootstrap, model_entry(CANARY, None, None, reason=f"{candidate} held: {why}"),
                    topic=self.registry_topic)
            report.published.append("CANARY none")
            report.reason = f"{candidate} taken off ({current} stays): {why}"
            self._record_verdict(registry.canary.directory, verdict)
        else:
            report.reason = f"waiting for canary traffic: {verdict.get('reasons') or verdict['verdict']}"

    def _record_verdict(self, directory: str, verdict: dict[str, Any]) -> None:
        path = Path(directory) / "evaluation.json"
        try:
            evaluation = json.loads(path.read_text()) if path.exists() else {}
            evaluation["canary_report"] = verdict
            path.write_text(json.dumps(evaluation, indent=1))
        except (OSError, ValueError) as exc:
            self.log(f"could not add the canary report to {path}: {exc}")
