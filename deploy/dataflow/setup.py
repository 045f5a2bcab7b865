"""The Beam pipelines as one installable package for Dataflow workers: `--setup_file deploy/dataflow/setup.py`.

A worker imports only what the pipelines import: `core`, `schemas` (with its .avsc contracts and their history)
and `pipelines` (the layering keeps everything else out: tests/unit/test_dataflow_package.py checks the import
closure). Beam's stager runs `python setup.py sdist` in this folder. From a checkout this file first copies those
three packages from the repository root into ./src, so the source distribution carries them; on a worker, which
installs the unpacked source distribution, ./src is used as shipped. The copy is removed when the build ends, so
the checkout keeps one copy of each module. The third-party requirements are
requirements.txt, pinned to the versions of the project's pyproject.toml; apache-beam itself is the worker
image's, the version the pipeline was submitted with."""
from __future__ import annotations

import atexit
import shutil
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent.parent
SOURCE = HERE / "src"
WORKER_PACKAGES = ("core", "schemas", "pipelines")
VERSION = "0.1.0"  # the project's version (pyproject.toml)


def assemble_source() -> None:
    """Copy the worker packages from the checkout into ./src, fresh; nothing to do in an unpacked sdist."""
    if (HERE / "PKG-INFO").exists():
        return
    if SOURCE.exists():
        shutil.rmtree(SOURCE)
    atexit.register(shutil.rmtree, SOURCE, ignore_errors=True)
    for name in WORKER_PACKAGES:
        shutil.copytree(REPOSITORY / name, SOURCE / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))


def requirements() -> list[str]:
    lines = (HERE / "requirements.txt").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


assemble_source()
setup(
    name="adserve-pipelines",
    version=VERSION,
    description="adserve's Beam pipelines with the core rules and schemas they import, for Dataflow workers",
    python_requires=">=3.11,<3.12",
    package_dir={"": "src"},
    packages=find_packages("src", include=[f"{name}*" for name in WORKER_PACKAGES]),
    package_data={"schemas": ["*.avsc", "history/*.avsc"]},
    install_requires=requirements(),
)
