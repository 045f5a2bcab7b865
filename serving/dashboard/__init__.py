"""The pacing dashboard: a pacing API over budget.state, serving.campaigns and Redis `pacing:{campaign}`, a web
page over that API, and the fleet panels (serving.dashboard.panels) queried from Prometheus."""
