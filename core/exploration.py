"""New-ad exploration: Thompson sampling over each ad's uncertain click-rate estimate, the probability it logs,
and how many impressions an estimate needs to learn an ad's rate.

Each ad carries a Beta posterior of its normalised click rate (the ad-feature snapshot's `ctr_alpha`, `ctr_beta`;
mean `ctr_prior`). On a request of the auction's exploration slice, an ad whose posterior is still uncertain
(fewer than `certain_at` pseudo-impressions, alpha + beta) ranks on its model pCTR times draw / mean(Beta): the
draw's relative deviation carried onto the model's prediction for that ad and slot, so the ranking pCTR keeps the
model's mean. A certain ad ranks on its model pCTR. The probability each winner logs is the share of further
draws (Monte Carlo) that put it in the same slot, floored so inverse-propensity weights stay bounded.
Docs: docs/decision-engine.md ("New ads: Thompson sampling in the exploration slice").

Pure: numpy only, randomness comes in as a `numpy.random.Generator`; no clock, no I/O. It never prices: the
auction (core.auction) prices every winner on the model's values."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from core.errors import InvalidArgument

# An ad whose posterior holds this many pseudo-impressions ranks on its model pCTR. At a 1 % click rate that is
# ~30 clicks, a relative standard deviation of ~18 %: the design's "a few thousand impressions are enough to
# learn its rate".
CERTAIN_AT_PSEUDO_IMPRESSIONS = 3_000.0
THOMPSON_DRAWS = 100  # Monte Carlo draws behind each logged placement probability
WEAK_PRIOR_PSEUDO_IMPRESSIONS = 10.0  # the posterior of an ad known only by its ctr_prior


def weak_posterior(ctr_prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(alpha, beta) of a Beta with mean ctr_prior and WEAK_PRIOR_PSEUDO_IMPRESSIONS behind it, as float32."""
    prior = np.asarray(ctr_prior, dtype=np.float32)
    return ((prior * WEAK_PRIOR_PSEUDO_IMPRESSIONS).astype(np.float32),
            ((1 - prior) * WEAK_PRIOR_PSEUDO_IMPRESSIONS).astype(np.float32))


@dataclass(frozen=True)
class CtrPosterior:
    """The candidates' Beta posteriors of their normalised click rate, in the auction's candidate order.

    `certain_at`: pseudo-impressions (alpha + beta) from which an ad ranks on its model pCTR; `draws`: the Monte
    Carlo draws behind each logged probability, whose floor is 1 / (2 draws)."""

    alpha: np.ndarray
    beta: np.ndarray
    certain_at: float = CERTAIN_AT_PSEUDO_IMPRESSIONS
    draws: int = THOMPSON_DRAWS

    def __post_init__(self) -> None:
        if np.shape(self.alpha) != np.shape(self.beta) or np.ndim(self.alpha) != 1:
            raise InvalidArgument(f"ctr posterior: alpha {np.shape(self.alpha)} and beta {np.shape(self.beta)} "
                                  "must be one value per candidate")
        if not self.certain_at > 0:
            raise InvalidArgument(f"certain_at: {self.certain_at} pseudo-impressions; it must be above 0")
        if self.draws < 1:
            raise InvalidArgument(f"draws: {self.draws}; at least 1 Monte Carlo draw")

    @property
    def propensity_floor(self) -> float:
        """The least probability a winner logs: inverse-propensity weights stay at most 2 x draws."""
        return 1.0 / (2 * self.draws)

    def uncertain(self) -> np.ndarray:
        """Which candidates rank on a draw: a proper posterior (alpha, beta finite and above 0) with fewer than
        `certain_at` pseudo-impressions. A zero or missing alpha has no mean to rescale by: that ad keeps its
        model pCTR."""
        alpha, beta = np.asarray(self.alpha, np.float64), np.asarray(self.beta, np.float64)
        proper = np.isfinite(alpha) & np.isfinite(beta) & (alpha > 0) & (beta > 0)
        return proper & (alpha + beta < self.certain_at)


def ctr_multipliers(posterior: CtrPosterior, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Per draw and candidate, the factor its model pCTR ranks at: Beta draw / Beta mean for an uncertain ad
    (mean 1), exactly 1 for a certain one. Shape (draws, candidates)."""
    uncertain = posterior.uncertain()
    factors = np.ones((draws, len(uncertain)))
    if uncertain.any():
        alpha = np.asarray(posterior.alpha, np.float64)[uncertain]
        beta = np.asarray(posterior.beta, np.float64)[uncertain]
        factors[:, uncertain] = rng.beta(alpha, beta, size=(draws, len(alpha))) * ((alpha + beta) / alpha)
    return factors


def sampled_totals(totals: np.ndarray, bid_values: np.ndarray, pctr: np.ndarray, scales_with_ctr: np.ndarray,
                   multipliers: np.ndarray) -> np.ndarray:
    """The totals each draw ranks by, shape (draws, slots, candidates) (candidates innermost, so each slot's
    argmax reads contiguous rows). The first three arguments are (candidates, slots), as the auction holds them.
    A click or conversion bid's bid value follows its pCTR, taken at min(pCTR x factor, 1); an impression bid's
    and every quality term stay."""
    pctr = np.asarray(pctr, np.float64).T
    bid_values = np.asarray(bid_values, np.float64).T
    quality = np.asarray(totals, np.float64).T - bid_values
    scales = np.asarray(scales_with_ctr, bool)
    # bid value is linear in pCTR for click and conversion bids: it scales by min(factor, 1 / pCTR). An
    # impression bid's factor is clamped to exactly 1; a zero pCTR has no cap (its bid value is 0 anyway).
    low = np.where(scales, 0.0, 1.0)
    safe = np.where(pctr > 0, pctr, 1.0)
    high = np.where(scales[None, :] & (pctr > 0), 1.0 / safe, np.where(scales[None, :], np.inf, 1.0))
    scale = np.minimum(np.maximum(multipliers, low[None, :])[:, None, :], high[None, :, :])
    scale *= bid_values[None, :, :]
    scale += quality[None, :, :]
    return scale


def thompson_fill(sampled: np.ndarray, allowed: np.ndarray, campaigns: np.ndarray,
                  categories: np.ndarray) -> np.ndarray:
    """Every draw's page at once (`sampled`: (draws, slots, candidates); `allowed`: (candidates, slots)): slot
    by slot the best sampled total among the candidates allowed there, one ad per campaign and per exclusion
    category (0: none), ties to the lower candidate index; a slot nobody may take ends the page. Returns the
    chosen candidate per draw and slot, -1 where empty; shape (draws, slots)."""
    draws, slots, n = sampled.shape
    chosen = np.full((draws, slots), -1, dtype=np.int64)
    available = np.ones((draws, n), dtype=bool)
    campaigns, categories = np.asarray(campaigns), np.asarray(categories)
    for slot in range(slots):
        ok = available & allowed[None, :, slot]
        filled = ok.any(axis=1)
        if not filled.any():
            break
        pick = np.argmax(np.where(ok, sampled[:, slot, :], -np.inf), axis=1)
        chosen[:, slot] = np.where(filled, pick, -1)
        available &= campaigns[None, :] != campaigns[pick][:, None]
        category = categories[pick][:, None]
        available &= (category == 0) | (categories[None, :] != category)
        available[~filled] = False
    return chosen


def placement_probabilities(chosen: np.ndarray, floor: float) -> np.ndarray:
    """Per slot, the estimated probability that Thompson sampling puts draw 0's ad there: the share of the other
    draws (independent of draw 0) that do, at least `floor`. Shape (slots,)."""
    if len(chosen) < 2:
        raise InvalidArgument("placement probabilities need draw 0 and at least one more draw")
    agree = (chosen[1:] == chosen[0][None, :]).mean(axis=0)
    return np.maximum(agree, floor)


# ------------------------------------------------------------------------------------------- learning speed
def _check_rates(true_ctr: float, prior_mean: float, prior_strength: float, rel_tol: float) -> None:
    if not 0 < true_ctr <= 1:
        raise InvalidArgument(f"true_ctr: {true_ctr}; a click rate in (0, 1]")
    if not 0 <= prior_mean <= 1:
        raise InvalidArgument(f"prior_mean: {prior_mean}; a click rate in [0, 1]")
    if not prior_strength >= 0:
        raise InvalidArgument(f"prior_strength: {prior_strength} pseudo-impressions; at least 0")
    if not rel_tol > 0:
        raise InvalidArgument(f"rel_tol: {rel_tol}; a relative tolerance above 0")


def shrunk_estimates(prior_mean: float, prior_strength: float, impressions: np.ndarray,
                     clicks: np.ndarray) -> np.ndarray:
    """(prior_mean x prior_strength + clicks) / (prior_strength + impressions), element by element (cumulative
    counts); the prior mean where nothing weighs yet (no prior strength and no impressions)."""
    weight = prior_strength + impressions
    return np.where(weight > 0, (prior_mean * prior_strength + clicks) / np.where(weight > 0, weight, 1.0),
                    prior_mean)


def settled_after(estimates: np.ndarray, impressions: np.ndarray, true_ctr: float, rel_tol: float) -> float:
    """Impressions after which every later estimate lies within rel_tol x true_ctr of true_ctr.

    `estimates[i]` is the estimate after `impressions[i]` impressions (ascending, the prior alone at 0). 0 when
    the prior is already within and stays; infinity when the last estimate is still outside (it never settled
    within the sequence)."""
    outside = np.flatnonzero(np.abs(np.asarray(estimates, np.float64) - true_ctr) > rel_tol * true_ctr)
    if not len(outside):
        return 0.0
    last = int(outside[-1])
    return math.inf if last == len(estimates) - 1 else float(impressions[last + 1])


def impressions_to_within(true_ctr: float, prior_mean: float, prior_strength: float, rel_tol: float = 0.2, *,
                          rng: np.random.Generator, trials: int = 200, horizon: int = 100_000) -> float:
    """Median impressions a new ad needs until its shrunk click-rate estimate stays within rel_tol of its truth.

    Each trial serves the ad `horizon` impressions at the top position (so a click is Bernoulli(true_ctr), the
    position-normalised rate) and follows (prior_mean x prior_strength + clicks) / (prior_strength +
    impressions) after each one; "stays" means to the end of the horizon. A trial that is still outside at the
    horizon counts as infinity (so is the median when more than half are)."""
    _check_rates(true_ctr, prior_mean, prior_strength, rel_tol)
    if trials < 1 or horizon < 1:
        raise InvalidArgument(f"trials {trials}, horizon {horizon}: both at least 1")
    served = np.arange(horizon + 1, dtype=np.float64)
    settled = np.empty(trials)
    for trial in range(trials):
        clicks = np.concatenate(([0.0], np.cumsum(rng.random(horizon) < true_ctr, dtype=np.float64)))
        estimates = shrunk_estimates(prior_mean, prior_strength, served, clicks)
        settled[trial] = settled_after(estimates, served, true_ctr, rel_tol)
    return float(np.median(settled))


def impressions_to_within_observed(impressions: Sequence[float], clicks: Sequence[float], true_ctr: float,
                                   prior_mean: float, prior_strength: float, rel_tol: float = 0.2) -> float:
    """The same measure on one ad's observed traffic: `impressions[i]` and `clicks[i]` in step i, in time order
    (single impressions with a 0/1 click, or a log's counts per minute; position-normalised impressions when the
    ad did not always show at the top). `true_ctr`: the rate to learn (the simulator's truth, or the ad's rate
    over a long later window). Returns the cumulative impressions after which the estimate stays within rel_tol,
    0 when the prior already is, infinity when the last step is still outside."""
    _check_rates(true_ctr, prior_mean, prior_strength, rel_tol)
    shown = np.asarray(impressions, dtype=np.float64).reshape(-1)
    clicked = np.asarray(clicks, dtype=np.float64).reshape(-1)
    if shown.shape != clicked.shape:
        raise InvalidArgument(f"impressions ({len(shown)} steps) and clicks ({len(clicked)} steps) differ in length")
    if (shown < 0).any() or (clicked < 0).any() or not (np.isfinite(shown).all() and np.isfinite(clicked).all()):
        raise InvalidArgument("impressions and clicks: finite counts of at least 0 per step")
    served = np.concatenate(([0.0], np.cumsum(shown)))
    estimates = shrunk_estimates(prior_mean, prior_strength, served, np.concatenate(([0.0], np.cumsum(clicked))))
    return settled_after(estimates, served, true_ctr, rel_tol)
