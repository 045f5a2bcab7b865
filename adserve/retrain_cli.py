"""`adserve model retrain` and `adserve model registry`: the click model learned continuously from the platform's
own streams, and the registry that names what the fleet scores with: the flags, the log lines and the loop's
pace around learning.retrainer (which reads the topics, writes the model folders and publishes registry
entries) and serving.model.registry."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import AdserveError

if TYPE_CHECKING:
    from learning.retrainer import RetrainSettings

RETRAIN_HELP = """Runs continuously (or once with --once): each run reads the training join's output (topic
training.examples) and the registry (topic model.registry), then judges the canary, trains a new model, refits
the current model's calibration, or waits (learning.retrain):

  judge   a canary is published: its served traffic (ad.served since it was published) joined with its labels
          goes through the promotion rule of `adserve model promote` (calibration 0.95-1.05 over --min-clicks
          clicks, revenue per request within --tolerance of the current model's). "promote" makes it CURRENT;
          "hold" takes it off; "not enough data" waits (at most --canary-max-age of event time).
  full    daily (--full-every), or when no model exists yet: a model trained from scratch on the last --window
          of examples, written to --models/click-vN, published as the CANARY on --canary-share of requests.
  update  hourly (--every): the current model's per-segment calibration refit on the last --update-window of
          examples, written as a new version and canaried the same way.

Every version it writes holds evaluation.json (the run's kind, examples and validation figures). The ad
servers and prediction services follow the registry and swap without a restart. Event time throughout: "every
hour" is an hour of the examples' event time, so a replayed or simulated day retrains on its own clock; the
loop itself wakes every --poll seconds of wall clock."""


def register(msub) -> None:
    from learning.canary import PromotionRule
    from learning.retrain import RetrainPolicy

    policy, rule = RetrainPolicy(), PromotionRule()
    p = msub.add_parser("retrain", help="train, canary and promote click models from the platform's own streams, "
                                        "continuously", description=RETRAIN_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=Path, help="models folder (default $ADSERVE_HOME/models)")
    p.add_argument("--ad-features", type=Path, help="the features job's snapshot folder (default: the folder the "
                                                    "registry's FEATURES entry names)")
    p.add_argument("--every", type=_duration, default=policy.every_s, help="update cadence in event time, e.g. 1h "
                                                                           "(default 1h)")
    p.add_argument("--full-every", type=_duration, default=policy.full_every_s,
                   help="full training cadence in event time (default 24h)")
    p.add_argument("--window", type=_duration, default=policy.window_s,
                   help="examples a full training reads, back from the newest (default 24h)")
    p.add_argument("--update-window", type=_duration, default=policy.update_window_s,
                   help="examples an update refits the calibration on (default 1h)")
    p.add_argument("--min-examples", type=int, default=policy.min_examples,
                   help=f"click examples needed to train (default {policy.min_examples:,})")
    p.add_argument("--min-train-clicks", type=int, default=policy.min_clicks,
                   help=f"clicks needed to train (default {policy.min_clicks:,})")
    p.add_argument("--canary-share", type=float, default=policy.canary_share,
                   help=f"share of requests a new version scores before its verdict (default {policy.canary_share})")
    p.add_argument("--canary-max-age", type=_duration, default=policy.canary_max_age_s,
                   help="event time a canary may wait for a verdict before it is taken off (default 6h)")
    p.add_argument("--min-clicks", type=int, default=rule.min_clicks,
                   help=f"labelled clicks of the canary before its verdict (default {rule.min_clicks:,})")
    p.add_argument("--min-segment-clicks", type=int, default=rule.min_segment_clicks,
                   help="clicks from which a segment's (placement, country, billing type) calibration is judged "
                        f"too (default {rule.min_segment_clicks:,})")
    p.add_argument("--tolerance", type=float, default=rule.revenue_tolerance,
                   help="how far below the current's revenue per request the canary's may be (default 0.02)")
    p.add_argument("--epochs", type=int, default=10, help="most epochs of a full training (default 10)")
    p.add_argument("--calibration-band", default=f"{rule.calibration_low},{rule.calibration_high}",
                   help="predicted over observed clicks the canary must stay within, LOW,HIGH (default "
                        f"{rule.calibration_low},{rule.calibration_high}, the design's alert band)")
    p.add_argument("--examples-topic", default=None, help="the training join's output (default training.examples)")
    p.add_argument("--served-topic", default=None, help="the served log (default ad.served)")
    p.add_argument("--registry-topic", default=None, help="the model registry (default model.registry)")
    p.add_argument("--poll", type=float, default=60.0, help="wall-clock seconds between runs (default 60)")
    p.add_argument("--once", action="store_true", help="one run, then exit (0: it trained, judged or waited; "
                                                       "2: it could not read its inputs)")
    p.add_argument("--json", action="store_true", help="one JSON object per run on stdout (learning.retrain."
                                                       "RunReport: action, examples, model_version, verdict, ...)")
    p.set_defaults(handler=cmd_model_retrain)

    r = msub.add_parser("registry", help="show the model registry, or set its current model by hand (a rollback)",
                        description="Shows the registry's CURRENT, CANARY and FEATURES entries (topic model.registry)."
                                    " --set-current DIR publishes DIR as the current model after its checks "
                                    "(serving.model.registry.model_refusal) and removes the canary: a rollback. "
                                    "--clear-canary only removes the canary.")
    r.add_argument("--set-current", type=Path, help="a model directory (models/click-vN) to make current")
    r.add_argument("--clear-canary", action="store_true", help="take the canary off")
    r.add_argument("--json", action="store_true", help="print the registry as one JSON object")
    r.set_defaults(handler=cmd_model_registry)


def _duration(text: str) -> float:
    """Seconds of '90', '90s', '5m', '1h' or '1d'."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
    text = text.strip().lower()
    try:
        return float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 90s, 5m, 1h, 1d)") from None


def _log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} retrain: {line}", file=sys.stderr, flush=True)


def _bootstrap() -> str:
    from infra.platform.environ import platform_environ

    return platform_environ()["ADSERVE_KAFKA_BOOTSTRAP"]


def _home_models() -> Path:
    from infra.platform.environ import platform_environ
    from infra.platform.settings import PlatformSettings

    return PlatformSettings.from_env(platform_environ()).home / "models"


def retrain_settings(args: argparse.Namespace) -> RetrainSettings:
    """The retraining process's settings from the command's flags (the models under $ADSERVE_HOME by default)."""
    from learning.canary import PromotionRule
    from learning.retrain import RetrainPolicy
    from learning.retrainer import RetrainSettings
    from schemas import topics

    models: Path = args.models or _home_models()
    policy = RetrainPolicy(every_s=args.every, full_every_s=args.full_every, window_s=args.window,
                           update_window_s=args.update_window, min_examples=args.min_examples,
                           min_clicks=args.min_train_clicks, canary_share=args.canary_share,
                           canary_max_age_s=args.canary_max_age)
    try:
        low, high = (float(x) for x in args.calibration_band.split(","))
    except ValueError:
        raise AdserveError(f"--calibration-band: expected LOW,HIGH, got {args.calibration_band!r}") from None
    rule = PromotionRule(revenue_tolerance=args.tolerance, min_clicks=args.min_clicks,
                         min_segment_clicks=args.min_segment_clicks, calibration_low=low, calibration_high=high)
    return RetrainSettings(models, policy, rule, ad_features=args.ad_features, epochs=args.epochs,
                           examples_topic=args.examples_topic or topics.TRAINING_EXAMPLES,
                           served_topic=args.served_topic or topics.AD_SERVED,
                           registry_topic=args.registry_topic or topics.MODEL_REGISTRY)


def _say(report, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_dict()), flush=True)
        return
    line = f"{report.action}"
    if report.model_version:
        line += f" {report.model_version}"
    if report.verdict:
        line += f": verdict {report.verdict}"
    if report.examples:
        line += f" ({report.examples:,} examples, {report.examples_without_snapshot:,} without their snapshot)"
    if report.published:
        line += f"; published {', '.join(report.published)}"
    if report.reason:
        line += f"; {report.reason}"
    _log(line)


def cmd_model_retrain(args: argparse.Namespace) -> int:
    from learning.retrainer import Retrainer

    try:
        bootstrap = _bootstrap()
        retrainer = Retrainer(retrain_settings(args), bootstrap, log=_log)
    except (AdserveError, OSError, ValueError) as exc:
        print(f"adserve model retrain: {exc}", file=sys.stderr)
        return 2
    _log(f"models in {retrainer.models}; update every {args.every:.0f} s, full training every "
         f"{args.full_every:.0f} s of event time; canary on {args.canary_share:.1%}")
    while True:
        try:
            _say(retrainer.run(), args.json)
        except AdserveError as exc:
            _log(f"run failed: {exc}")
            if args.once:
                return 2
        except KeyboardInterrupt:
            return 0
        if args.once:
            return 0
        try:
            time.sleep(args.poll)
        except KeyboardInterrupt:
            return 0


def cmd_model_registry(args: argparse.Namespace) -> int:
    from serving.model.registry import CANARY, CURRENT, model_entry, model_refusal, publish, read_registry

    try:
        bootstrap = _bootstrap()
        if args.set_current is not None:
            directory = args.set_current.resolve()
            refusal = model_refusal(directory)
            if refusal is not None:
                print(f"adserve model registry: refused: {refusal}", file=sys.stderr)
                return 2
            publish(bootstrap, model_entry(CURRENT, directory.name, directory, reason="set by hand"))
            publish(bootstrap, model_entry(CANARY, None, None, reason="set by hand"))
        elif args.clear_canary:
            publish(bootstrap, model_entry(CANARY, None, None, reason="cleared by hand"))
        registry = read_registry(bootstrap)
    except (AdserveError, OSError, ValueError) as exc:
        print(f"adserve model registry: {exc}", file=sys.stderr)
        return 2
    described = registry.describe()
    if args.json:
        print(json.dumps(described))
        return 0
    for role, name in (("current", "CURRENT"), ("canary", "CANARY"), ("features", "FEATURES")):
        entry = described[role]
        print(f"{name:<9} {json.dumps(entry) if entry else '(none)'}  {registry.reasons.get(name, '')}")
    return 0
