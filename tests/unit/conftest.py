"""The unit tests' order. `./run tests` spreads the unit modules over every core (pytest-xdist, a module per
worker at a time, handed out in collection order); a module whose fixture takes minutes goes first, so one
worker builds it while the others take the rest, instead of starting it last and leaving the others idle."""
from __future__ import annotations

# modules whose setup alone takes a minute or more on two cores (a simulated day, a trained model)
FIRST = ("test_learning_loop.py",)


def pytest_collection_modifyitems(items) -> None:
    items.sort(key=lambda item: item.path.name not in FIRST)  # stable: the rest keep their order
