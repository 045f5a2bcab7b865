"""`adserve learning-day`: a simulated day for the learning loop (sim.learning_day), written as the files
the trainer and the joins read.

  adserve learning-day --out days/train --requests 60000 --seed 1
  adserve learning-day --out days/held --requests 30000 --seed 2 --keep-rate 1
  adserve learning-day --out days/day3 --seed 3 --model models/click-v1     (served by the learned model)

The world (ads, users, their true click and conversion probabilities) depends only on --world-seed and its
sizes, so days with other --seed values are the same world on other days: train on one, evaluate on another."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from core import training


def register(sub) -> None:
    p = sub.add_parser("learning-day", help="simulate a day of traffic with known click probabilities (the "
                                            "learning loop's data)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True,
                   help="folder for served.avro, events.avro, conversions.avro, examples.avro (click and conversion "
                        "examples), truth.json, truth_conversions.json, ad-features/, day.json")
    p.add_argument("--requests", type=int, default=60_000, help="requests over the day (default 60,000)")
    p.add_argument("--seed", type=int, default=1, help="the day's seed (default 1)")
    p.add_argument("--world-seed", type=int, default=7, help="the world's seed (default 7)")
    p.add_argument("--campaigns", type=int, default=100, help="campaigns in the world, 4 ads each (default 100)")
    p.add_argument("--users", type=int, default=20_000, help="users in the world (default 20,000)")
    p.add_argument("--keep-rate", type=float, default=training.DEFAULT_KEEP_RATE,
                   help=f"share of non-clicks kept in examples.avro (default {training.DEFAULT_KEEP_RATE})")
    p.add_argument("--model", type=Path, help="serve the day with this click model (default: the priors baseline)")
    p.add_argument("--exploration-share", type=float, default=0.01, help="exploration slice (default 0.01)")
    p.add_argument("--recall-share", type=float, default=0.0,
                   help="share of requests checked by the pre-ranker's recall monitor (default 0)")
    p.add_argument("--prerank-weights", type=Path,
                   help="serve with these pre-ranker weights (a JSON file by feature name, from --fit-prerank)")
    p.add_argument("--fit-prerank", type=Path,
                   help="fit the pre-ranker's weights to the model's scores of the recall-checked requests' "
                        "candidates and write them here (needs --model and --recall-share)")
    p.add_argument("--json", action="store_true", help="print day.json's content as one JSON object")
    p.set_defaults(handler=cmd_learning_day)


def cmd_learning_day(args: argparse.Namespace) -> int:
    from sim import learning_day
    from sim.progress import Progress
    from serving.decision import prerank

    if args.fit_prerank is not None and (args.model is None or args.recall_share <= 0):
        print("adserve learning-day: --fit-prerank needs --model and --recall-share > 0", file=sys.stderr)
        return 2
    weights = prerank.load_weights(args.prerank_weights) if args.prerank_weights else None
    world = learning_day.make_world(args.world_seed, campaigns=args.campaigns, users=args.users)
    predictor = None
    if args.model is not None:
        from serving.model.click_model import ClickModel
        from serving.model.predictor import ModelPredictor

        predictor = ModelPredictor(ClickModel.load(args.model),
                                   world.snapshot(learning_day.day_start_ms(learning_day.DAY)))
    bar = Progress("requests", args.requests)
    done = [0]

    def progress(n: int) -> None:
        done[0] += n
        bar.update(done[0])

    began = time.monotonic()
    options = learning_day.EngineOptions(exploration_share=args.exploration_share, recall_share=args.recall_share,
                                         prerank_weights=weights)
    log = learning_day.simulate_day(world, requests=args.requests, seed=args.seed, predictor=predictor,
                                    options=options, collect_prerank=args.fit_prerank is not None, progress=progress)
    bar.close()
    meta = learning_day.write_day(log, args.out, keep_rate=args.keep_rate)
    if args.fit_prerank is not None and log.prerank_samples:
        import numpy as np

        x, prior, pctr = (np.concatenate(parts) for parts in zip(*log.prerank_samples))
        prerank.save_weights(prerank.fit_weights(x, prior, pctr), args.fit_prerank)
        meta["prerank_fit_rows"] = int(len(x))
        print(f"pre-ranker weights fitted on {len(x):,} candidates -> {args.fit_prerank}", file=sys.stderr)
    meta["seconds"] = round(time.monotonic() - began, 1)
    if args.json:
        print(json.dumps(meta))
    else:
        for key, value in meta.items():
            print(f"  {key:<18} {value}")
        print(f"written to {args.out}", file=sys.stderr)
    return 0
