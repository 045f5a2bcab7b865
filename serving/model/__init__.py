"""The click model's serving side and its inputs: the versioned ad-feature snapshot, the learned model,
its calibration, and the predictors the decision engine calls (in process or through the prediction service)."""
