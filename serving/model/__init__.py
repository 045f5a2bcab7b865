"""The click model as it serves: the versioned ad-feature snapshot, the feature assembly, the saved bundle and
its calibration, the pre-ranker's students and the predictors the decision engine calls (in process or through
the prediction service). Never trains or fits anything (learning does) and never imports learning."""
