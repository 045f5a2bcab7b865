"""Offline learning: reading training examples, fitting the click and conversion models, their calibration
and the pre-ranker's students, offline metrics, the canary's promotion check and synthetic training data.

May import serving.model (the feature assembly and the bundle it writes are shared); nothing that serves
requests imports this package."""
