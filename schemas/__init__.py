"""The contracts: one `.avsc` per record type in this folder (the current
version) and every earlier version under `history/`, kept so a reader can
always resolve an older writer. `schemas.codec` encodes and decodes them."""
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent
HISTORY_DIR = SCHEMA_DIR / "history"
