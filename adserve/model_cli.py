"""`adserve model train|evaluate|canary-report`: the click model from TrainingExample files (the shell: reads
the files, calls learning.trainer or learning.canary, writes the model and prints figures).

  adserve model train --examples day/examples.avro [--examples other.avro] --ad-features day/ad-features \\
      --out models/ [--epochs 20]
    writes models/click-v{N}/ (N one more than the highest there): model.keras, saved_model/ (a TensorFlow
    SavedModel with a `serve` signature), feature_spec.json, calibration.json, metadata.json (keep rate,
    rows, validation metrics, snapshot version, architecture, history).

  adserve model evaluate --model models/click-vN --examples heldout/examples.avro \\
      --ad-features heldout/ad-features [--truth heldout/truth.json] [--json]
    NE, log loss, AUC and calibration per (placement, country, billing type) of the model, beside NE of the
    priors-only baseline (the snapshot's ctr prior x position effect, PriorPredictor's formula), of the
    logged pCTR, and of the true click probabilities when --truth is given. Every metric is weighted by
    sample_weight, so a down-sampled file evaluates as the full population.

  adserve model canary-report --served served.avro --examples examples.avro [--json]
    per model version of the served log: requests, revenue per request, calibration overall and per segment,
    and whether the candidate (the canary) may replace the current model: promote, hold or not enough data.

The keep rate of the training data is read from the negatives' sample weight (1 / w); files of different
keep rates are brought to the smallest (core.training.keeps_negative). Training drops impressions served on
fallback scores. Progress goes to stderr; --json prints one JSON object on stdout."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from core.errors import AdserveError


def register(sub) -> None:
    model = sub.add_parser("model", help="train and evaluate the click model from TrainingExample files",
                           description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    msub = model.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    _add_train(msub)
    _add_evaluate(msub)
    _add_canary(msub)
    from adserve import retrain_cli
    retrain_cli.register(msub)


def _add_train(msub) -> None:
    p = msub.add_parser("train", help="train, calibrate and save a versioned click model",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", type=Path, action="append", required=True,
                   help="an Avro container file of TrainingExample records (repeat for several)")
    p.add_argument("--ad-features", type=Path, required=True,
                   help="the ad-feature snapshot folder (ad-features-v{N}.npz) the examples were served with")
    p.add_argument("--out", type=Path, default=Path("models"), help="models folder (default ./models)")
    p.add_argument("--epochs", type=int, default=20, help="most epochs (early stopping ends sooner; default 20)")
    p.add_argument("--batch-size", type=int, default=512, help="default 512")
    p.add_argument("--learning-rate", type=float, default=3e-3, help="Adam's learning rate (default 0.003)")
    p.add_argument("--patience", type=int, default=2,
                   help="epochs without a better validation loss before stopping (default 2)")
    p.add_argument("--hidden", default="64,32", help="widths of the MLP's hidden layers (default 64,32)")
    p.add_argument("--validation-share", type=float, default=0.3,
                   help="share of requests held out for early stopping and calibration (default 0.3)")
    p.add_argument("--min-segment-clicks", type=int, default=50,
                   help="clicks (and non-clicks) a calibration segment needs to be fitted (default 50)")
    p.add_argument("--min-segment-conversions", type=int, default=30,
                   help="conversions (and non-conversions) a segment of the conversion model's calibration needs "
                        "(default 30)")
    p.add_argument("--seed", type=int, default=1, help="random seed of the initialisation and shuffling")
    p.add_argument("--no-saved-model", action="store_true",
                   help="skip the TensorFlow SavedModel export (model.keras is always written)")
    p.add_argument("--json", action="store_true", help="print one JSON object of what was written")
    p.set_defaults(handler=cmd_model_train)


def _add_evaluate(msub) -> None:
    p = msub.add_parser("evaluate", help="NE, log loss, AUC and calibration of a model on held-out examples",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="a model directory (models/click-vN)")
    p.add_argument("--examples", type=Path, action="append", required=True,
                   help="an Avro container file of TrainingExample records (repeat for several)")
    p.add_argument("--ad-features", type=Path, required=True, help="the ad-feature snapshot folder of those days")
    p.add_argument("--truth", type=Path, help="truth.json of a simulated day: impression id -> true click "
                                              "probability (adds the oracle's NE)")
    p.add_argument("--min-segment-clicks", type=int, default=100,
                   help="clicks a segment needs to count in calibration_min/max (default 100)")
    p.add_argument("--conversion-truth", type=Path,
                   help="truth_conversions.json of a simulated day: clicked impression id -> true conversion "
                        "probability (adds the conversion oracle's NE)")
    p.add_argument("--min-segment-conversions", type=int, default=50,
                   help="conversions a segment needs to count in cvr_calibration_min/max (default 50)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (ne_model, ne_baseline, ne_oracle, calibration_min, "
                        "calibration_max, log_loss, auc, segments, ...)")
    p.set_defaults(handler=cmd_model_evaluate)


def _add_canary(msub) -> None:
    """canary-report and promote: both judge the served traffic by the same rule."""
    from learning import canary

    p = msub.add_parser("canary-report", help="whether a canary model may replace the current one (calibration, "
                                              "revenue per request)",
                        description=CANARY_HELP + canary.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _canary_arguments(p, canary.PromotionRule.min_clicks)
    p.add_argument("--current", help="the current model version (default: the most served one)")
    p.add_argument("--candidate", help="the candidate's version (default: the next most served one)")
    p.add_argument("--json", action="store_true", help="print one JSON object (verdict, reasons, versions, ...)")
    p.set_defaults(handler=cmd_model_canary_report)

    p = msub.add_parser("promote", help="make a prediction service's canary its current model, only if the canary "
                                        "report on the served traffic says promote",
                        description=PROMOTE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--service", required=True, help="the prediction service's URL (http://127.0.0.1:8090)")
    _canary_arguments(p, canary.PromotionRule.min_clicks)
    p.add_argument("--json", action="store_true", help="print one JSON object (promoted, report, service answer)")
    p.set_defaults(handler=cmd_model_promote)


def _canary_arguments(p: argparse.ArgumentParser, min_clicks: int) -> None:
    """The traffic a canary report judges, and its rule (canary-report and promote)."""
    p.add_argument("--served", type=Path, action="append", required=True,
                   help="ServedRecord Avro file: a container of ServedRecord records (learning-day's served.avro) or "
                        "an archive file of ad.served (repeat for several)")
    p.add_argument("--examples", type=Path, action="append", required=True,
                   help="TrainingExample Avro file of the same traffic (repeat for several)")
    p.add_argument("--tolerance", type=float, default=0.02,
                   help="how far below the current's revenue per request the candidate's may be (default 0.02)")
    p.add_argument("--min-clicks", type=int, default=min_clicks,
                   help=f"labelled clicks the candidate needs before a verdict (default {min_clicks:,}: +-5 %% "
                        f"calibration)")
    p.add_argument("--min-segment-clicks", type=int, default=min_clicks,
                   help="clicks from which a segment's (placement, country, billing type) calibration is judged too "
                        f"(default {min_clicks:,})")


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _snapshots(folder: Path, records: list[dict[str, Any]]) -> dict:
    from serving.model import ad_features

    versions = sorted({int(r["ad_snapshot_version"]) for r in records})
    return {v: ad_features.load(folder, v) for v in versions}


def _read(paths: list[Path]) -> list[list[dict[str, Any]]]:
    from learning.dataset import read_examples

    parts = []
    for path in paths:
        began = time.monotonic()
        parts.append(read_examples(path))
        _log(f"read {len(parts[-1]):,} examples from {path} ({time.monotonic() - began:.1f} s)")
    return parts


def cmd_model_train(args: argparse.Namespace) -> int:
    try:
        return _train(args)
    except AdserveError as exc:
        print(f"adserve model train: {exc}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace) -> int:
    from learning.dataset import harmonise_keep_rate
    from learning.network import Architecture, TrainConfig
    from learning.trainer import train_click_model
    from serving.model.click_model import save_versioned

    records, keep_rate = harmonise_keep_rate(_read(args.examples))
    hidden = tuple(int(x) for x in args.hidden.split(",") if x.strip())
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate,
                         patience=args.patience, seed=args.seed, architecture=Architecture(hidden=hidden))
    began = time.monotonic()
    model = train_click_model(records, _snapshots(args.ad_features, records), keep_rate, config,
                              validation_share=args.validation_share, min_segment_clicks=args.min_segment_clicks,
                              min_segment_conversions=args.min_segment_conversions, log=_log)
    model.metadata["training_seconds"] = round(time.monotonic() - began, 1)
    model.metadata["trained_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    model.metadata["examples_files"] = [str(p) for p in args.examples]
    folder = save_versioned(model, args.out, export_saved_model=not args.no_saved_model)
    meta = model.metadata
    summary = {"model_dir": str(folder), "model_version": meta["model_version"], "parameters": meta["parameters"],
               "keep_rate": keep_rate, "training_rows": meta["training_rows"],
               "validation_rows": meta["validation_rows"], "epochs_run": meta["epochs_run"],
               "training_seconds": meta["training_seconds"], "snapshot_version": meta["snapshot_version"],
               "validation_metrics": meta["validation_metrics"], "pcvr": meta["pcvr"],
               "conversion_validation_metrics": None if model.conversion is None else
               model.conversion.metadata["validation_metrics"]}
    if args.json:
        print(json.dumps(summary))
        return 0
    v = meta["validation_metrics"]
    print(f"wrote {folder} ({meta['parameters']:,} parameters, {meta['epochs_run']} epochs, "
          f"{meta['training_seconds']} s; {meta['training_rows']:,} training rows, keep rate {keep_rate:g})")
    for name, label in (("model", "model (calibrated)"), ("model_before_segment_calibration",
                                                          "model before segment calibration"),
                        ("priors_baseline", "priors-only baseline")):
        m = v[name]
        print(f"  validation {label:<34} NE {m['ne']:.4f}  log loss {m['log_loss']:.4f}  AUC {m['auc']:.4f}  "
              f"predicted/observed {m['calibration']:.3f}")
    if model.conversion is None:
        print(f"  pCVR: {meta['pcvr']}")
        return 0
    for name, label in (("model", "conversion model (calibrated)"), ("constant_prior", "constant pCVR prior")):
        m = model.conversion.metadata["validation_metrics"][name]
        print(f"  validation {label:<34} NE {m['ne']:.4f}  log loss {m['log_loss']:.4f}  AUC {m['auc']:.4f}  "
              f"predicted/observed {m['calibration']:.3f}")
    return 0


def cmd_model_evaluate(args: argparse.Namespace) -> int:
    try:
        return _evaluate(args)
    except AdserveError as exc:
        print(f"adserve model evaluate: {exc}", file=sys.stderr)
        return 2


def _evaluate(args: argparse.Namespace) -> int:
    from serving.model.click_model import ClickModel
    from learning.trainer import evaluate_click_model

    model = ClickModel.load(args.model)
    records = [r for part in _read(args.examples) for r in part]
    truths = {}
    for flag, path in (("--truth", args.truth), ("--conversion-truth", args.conversion_truth)):
        if path is None:
            continue
        try:
            truths[flag] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            print(f"adserve model evaluate: cannot read {flag} {path}: {exc}", file=sys.stderr)
            return 2
    result = evaluate_click_model(model, records, _snapshots(args.ad_features, records), truths.get("--truth"),
                                  min_segment_clicks=args.min_segment_clicks,
                                  conversion_truth=truths.get("--conversion-truth"),
                                  min_segment_conversions=args.min_segment_conversions)
    print(json.dumps(result) if args.json else render_evaluation(result))
    return 0


def _fmt(value, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def render_evaluation(r: dict[str, Any]) -> str:
    lines = [f"{r['model_version']} on {r['examples']:,} examples ({r['clicks']:,} clicks, "
             f"{r['weighted_impressions']:,.0f} impressions weighted, base rate {r['base_rate']:.4f})",
             f"  NE      model {_fmt(r['ne_model'])}   priors-only baseline {_fmt(r['ne_baseline'])}   "
             f"logged pCTR {_fmt(r['ne_logged'])}   oracle {_fmt(r['ne_oracle'])}",
             f"  AUC     model {_fmt(r['auc'])}   priors-only baseline {_fmt(r['auc_baseline'])}   "
             f"logged pCTR {_fmt(r['auc_logged'])}   oracle {_fmt(r['auc_oracle'])}",
             f"  log loss {_fmt(r['log_loss'])}; predicted/observed clicks {_fmt(r['calibration'], '.3f')} "
             f"(oracle {_fmt(r.get('calibration_oracle'), '.3f')})",
             f"  calibration per segment with >= {r['min_segment_clicks']} clicks "
             f"({r['calibration_segments_judged']} segments): min {_fmt(r['calibration_min'], '.3f')} "
             f"max {_fmt(r['calibration_max'], '.3f')}"
             + (f" (the oracle on the same segments: {_fmt(r.get('calibration_oracle_min'), '.3f')}"
                f"-{_fmt(r.get('calibration_oracle_max'), '.3f')}, the noise of the counts alone)"
                if r.get("calibration_oracle_min") is not None else "")]
    if r.get("calibration_expected_min") is not None:
        lines.append(f"  against the true probabilities (predicted / expected clicks): overall "
                     f"{_fmt(r['calibration_expected'], '.3f')}, per segment min "
                     f"{_fmt(r['calibration_expected_min'], '.3f')} max {_fmt(r['calibration_expected_max'], '.3f')}")
    lines.append("  segment (placement/country/billing)        impressions   clicks  predicted/observed  "
                 "calibrated by (* judged)")
    for s in r["segments"]:
        key = "/".join(v or "-" for v in s["segment"].values())
        lines.append(f"    {key:<42} {s['impressions']:>11,.0f} {s['clicks']:>8,}  {_fmt(s['ratio'], '.3f'):>18}  "
                     f"{s['calibrated_by']}{' *' if s['judged'] else ''}")
    c = r.get("conversion")
    if c is None:
        lines.append("  pCVR: no conversion examples here, or the model has no conversion model (constant prior)")
        return "\n".join(lines)
    lines += [f"  pCVR on {c['clicks']:,} clicked impressions ({c['conversions']:,} converted, "
              f"rate {c['base_rate']:.4f})",
              f"    NE      conversion model {_fmt(c['ne_cvr_model'])}   constant prior {_fmt(c['ne_cvr_baseline'])}   "
              f"oracle {_fmt(c['ne_cvr_oracle'])}",
              f"    AUC {_fmt(c['auc_cvr_model'])}; predicted/observed conversions "
              f"{_fmt(c['cvr_calibration'], '.3f')}; "
              f"per segment with >= {c['min_segment_conversions']} conversions ({c['cvr_segments_judged']}): min "
              f"{_fmt(c['cvr_calibration_min'], '.3f')} max {_fmt(c['cvr_calibration_max'], '.3f')}"]
    if c.get("cvr_calibration_expected") is not None:
        lines.append(f"    against the true probabilities: overall {_fmt(c['cvr_calibration_expected'], '.3f')}, per "
                     f"segment min {_fmt(c['cvr_calibration_expected_min'], '.3f')} max "
                     f"{_fmt(c['cvr_calibration_expected_max'], '.3f')}")
    return "\n".join(lines)


CANARY_HELP = """`adserve model canary-report --served served.avro --examples examples.avro [--json]`: exit 0 on
"promote", 1 on "hold" or "not enough data", 2 on unreadable input.

"""


def _served_records(paths: list[Path]) -> list[dict[str, Any]]:
    """ServedRecords from Avro container files of the records themselves or of the archiver's envelopes."""
    import fastavro

    from pipelines.avro_files import is_envelope, normalise
    from schemas.codec import AvroCodec

    codec, records = AvroCodec(), []
    for path in paths:
        try:
            with open(path, "rb") as f:
                for row in fastavro.reader(f):
                    records.append(codec.decode(row["v"]) if is_envelope(row) else normalise(row))
        except OSError as exc:
            raise AdserveError(f"cannot read served records {path}: {exc.strerror or exc}") from exc
        except (ValueError, EOFError, KeyError) as exc:
            raise AdserveError(f"{path} is not an Avro file of ServedRecord records: {exc}") from exc
    return records


PROMOTE_HELP = """`adserve model promote --service URL --served served.avro --examples examples.avro`: the gate
before a new model version takes all traffic (design: "ships nothing until a canary passes").

It asks the service which model is current and which is its canary (GET /v1/model), judges the canary on the
served log and its labelled examples exactly as `adserve model canary-report --current C --candidate K` does
(calibration within 0.95-1.05 over at least --min-clicks clicks, revenue per request not more than
--tolerance below the current model's), prints the report and, only on a "promote" verdict, posts it to the
service (POST /v1/promote), which swaps the canary in as the current model and re-checks that the report is
for exactly its two versions. Exit 0 when promoted; 1 when the verdict is "hold" or "not enough data", or the
service refused (nothing changes); 2 when the files or the service cannot be read."""


def _http_json(url: str, body: dict[str, Any] | None = None, timeout_s: float = 10.0) -> tuple[int, Any]:
    """(status, decoded JSON answer) of a GET, or of a POST of `body`; OSError when the service cannot be reached."""
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def cmd_model_promote(args: argparse.Namespace) -> int:
    from learning.canary import PromotionRule, canary_report, render_report
    from serving.model.canary import PROMOTE

    service = args.service.rstrip("/")
    try:
        served = _served_records(args.served)
        examples = [r for part in _read(args.examples) for r in part]
        status, described = _http_json(f"{service}/v1/model")
    except (AdserveError, OSError, ValueError) as exc:
        print(f"adserve model promote: {exc}", file=sys.stderr)
        return 2
    if status != 200 or not described.get("canary"):
        print(f"adserve model promote: the service at {service} has no canary model to promote "
              f"(GET /v1/model answered {status}: {json.dumps(described)[:300]})", file=sys.stderr)
        return 1
    rule = PromotionRule(revenue_tolerance=args.tolerance, min_clicks=args.min_clicks,
                         min_segment_clicks=args.min_segment_clicks)
    report = canary_report(served, examples, current=described["model_version"],
                           candidate=described["canary"]["model_version"], rule=rule)
    answer: Any = None
    promoted = False
    if report["verdict"] == PROMOTE:
        try:
            status, answer = _http_json(f"{service}/v1/promote",
                                        {"model_version": report["candidate"], "report": report})
        except (OSError, ValueError) as exc:
            print(f"adserve model promote: the service could not be asked to promote: {exc}", file=sys.stderr)
            return 2
        promoted = status == 200
    if args.json:
        print(json.dumps({"promoted": promoted, "report": report, "service_answer": answer}))
    else:
        print(render_report(report))
        if promoted:
            print(f"promoted {answer['promoted']} over {answer['previous']} at {service}")
        elif answer is not None:
            print(f"the service refused: {answer.get('error')}")
        else:
            print(f"not promoted: the verdict is {report['verdict']}")
    return 0 if promoted else 1


def cmd_model_canary_report(args: argparse.Namespace) -> int:
    from learning.canary import PromotionRule, canary_report, render_report
    from serving.model.canary import PROMOTE

    try:
        served = _served_records(args.served)
        examples = [r for part in _read(args.examples) for r in part]
    except AdserveError as exc:
        print(f"adserve model canary-report: {exc}", file=sys.stderr)
        return 2
    rule = PromotionRule(revenue_tolerance=args.tolerance, min_clicks=args.min_clicks,
                         min_segment_clicks=args.min_segment_clicks)
    report = canary_report(served, examples, current=args.current, candidate=args.candidate, rule=rule)
    print(json.dumps(report) if args.json else render_report(report))
    return 0 if report["verdict"] == PROMOTE else 1
