"""Fitting the pre-ranker's students, offline: W of serving.model.student.Student by weighted ridge least
squares to a trained network's calibrated log pCTR (fit_student) or log pCVR (fit_conversion_student), over
users of the training data crossed with random ads of the snapshot: the candidates a pre-ranker sees, not only
the ads that won. Calls the networks in batches; never runs on the request path."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from serving.model.examples import ExampleTable
from serving.model.features import (CPA_INDEX, AdFeatureTable, FeatureSpec, conversion_inputs, example_inputs,
                                    user_matrix)
from serving.model.student import LOG_FLOOR, Student, ad_matrix, request_matrix


@dataclass(frozen=True)
class StudentFit:
    """The size of a student's fit: up to `users` example rows, each crossed with `ads_per_user` random ads, the
    ridge penalty, and the pairs accumulated per chunk."""

    users: int = 1_000
    ads_per_user: int = 100
    ridge: float = 1.0
    chunk: int = 20_000


def fit_student(model, examples: ExampleTable, table: AdFeatureTable, *, seed: int = 1,
                fit: StudentFit = StudentFit()) -> Student:
    """Fit W to `model` (a ClickModel: raw network output, down-sampling correction, segment calibration)
    on up to `fit.users` example rows (their user features and context at their own slot position), each
    crossed with `fit.ads_per_user` random ads of `table`. Weighted ridge least squares on the pairs' outer
    products, accumulated chunk by chunk (100,000 pairs fit in seconds); each pair weighs its model pCTR
    over the chunk's mean, so the fit is closest where the auction's winners come from (unweighted, the
    pre-ranker's recall on the simulated world was 96.6-99 % for two trainings; weighted, 98.1-100 % for
    five). fit_rmse is the plain (unweighted) rms error over the pairs."""
    def pctr(pairs: ExampleTable, examples_of_pairs: np.ndarray, ads: np.ndarray) -> np.ndarray:
        q = model.corrected(model.raw_probabilities(example_inputs(model.spec, pairs, {table.version: table})))
        return model.calibration.apply(q, examples.placement[examples_of_pairs], examples.country[examples_of_pairs],
                                       table.billing_type[ads])

    known = len(table.embedding) - 1  # the last row is the unknown ad, which no candidate of the index is
    return _fit_bilinear(model.spec, examples, table, pctr, np.arange(max(known, 1)), fit=fit, seed=seed)


def fit_conversion_student(spec: FeatureSpec, conversion, examples: ExampleTable, table: AdFeatureTable, *,
                           seed: int = 1, fit: StudentFit = StudentFit()) -> Student | None:
    """W fitted to the conversion model's (a ConversionModel's) calibrated log pCVR at position 1, over users
    of `examples` crossed with random CPA ads of `table` (the only bids pCVR prices), weighted as fit_student
    weighs. None when the snapshot has no CPA ad."""
    cpa = np.flatnonzero(table.bid_type[:-1] == CPA_INDEX)
    if len(cpa) == 0:
        return None

    def pcvr(pairs: ExampleTable, examples_of_pairs: np.ndarray, ads: np.ndarray) -> np.ndarray:
        raw = conversion.raw_probabilities(conversion_inputs(spec, pairs, {table.version: table}))
        return conversion.calibration.apply(raw, examples.placement[examples_of_pairs],
                                            examples.country[examples_of_pairs], table.billing_type[ads])

    return _fit_bilinear(spec, examples, table, pcvr, cpa, fit=fit, seed=seed, position=1)


def _fit_bilinear(spec: FeatureSpec, examples: ExampleTable, table: AdFeatureTable, probability: Callable,
                  ad_pool: np.ndarray, *, fit: StudentFit, seed: int, position: int | None = None) -> Student:
    """The weighted ridge fit of r' W a to log probability(pairs) (see fit_student) over users of `examples`
    (at their own slot position, or `position`) crossed with random ads of `ad_pool`. `probability` gets the
    pairs (each example with another ad, an ExampleTable), the example row of each pair and its ad row."""
    users, ads_per_user, ridge, chunk = fit.users, fit.ads_per_user, fit.ridge, fit.chunk
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(examples), size=min(users, len(examples)), replace=False)
    positions = examples.slot_position[picked] if position is None else np.full(len(picked), position)
    r_all = request_matrix(spec, user_matrix(spec, [examples.user_features[i] for i in picked]),
                           examples.placement[picked], examples.country[picked], examples.device[picked], positions)
    a_all = ad_matrix(spec, table)
    pairs_user = np.repeat(np.arange(len(picked)), ads_per_user)
    pairs_ad = ad_pool[rng.integers(0, len(ad_pool), size=len(pairs_user))]
    dr, da = r_all.shape[1], a_all.shape[1]
    gram = np.zeros((dr * da, dr * da))
    rhs = np.zeros(dr * da)
    targets, designs = [], []
    for begin in range(0, len(pairs_user), chunk):
        u, a = pairs_user[begin:begin + chunk], pairs_ad[begin:begin + chunk]
        ex = picked[u]
        # the example's user and context with another ad: the model's inputs through the one encoder
        pairs = replace(examples.take(ex), ad_id=table.snapshot.ad_id[a],
                        ad_snapshot_version=np.full(len(a), table.version, dtype=np.int64))
        p = probability(pairs, ex, a)
        target = np.log(np.maximum(p, LOG_FLOOR))
        wt = p / max(float(p.mean()), LOG_FLOOR)
        z = (r_all[u][:, :, None] * a_all[a][:, None, :]).reshape(len(u), dr * da).astype(np.float64)
        gram += (z * wt[:, None]).T @ z
        rhs += (z * wt[:, None]).T @ target
        targets.append(target)
        designs.append((u, a))
    weights = np.linalg.solve(gram + ridge * np.eye(dr * da), rhs).reshape(dr, da)
    squared, count = 0.0, 0
    for target, (u, a) in zip(targets, designs):
        estimate = np.einsum("ij,jk,ik->i", r_all[u], weights, a_all[a])
        squared += float(((estimate - target) ** 2).sum())
        count += len(target)
    return Student(weights.astype(np.float32), count, (squared / max(count, 1)) ** 0.5)
