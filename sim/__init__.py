"""Simulators, synthetic worlds and demos that drive the real platform: the pacing day and its report, the
learning day, the event-counts and serving demos. Above serving, jobs and learning; never imported by them."""
