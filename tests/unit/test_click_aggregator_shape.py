"""The click aggregator's Python bill reads rows keyed in the JVM (jobs/jvm/.../ByCampaign.java): both sides
must name the same fields in the same order, or the bill would read one field as another."""
from __future__ import annotations

import re
from pathlib import Path

from jobs import click_aggregator

JAVA = Path(__file__).resolve().parents[2] / "jobs" / "jvm" / "io" / "adserve" / "flink" / "ByCampaign.java"


def test_the_jvm_keyed_row_has_the_python_bill_row_fields_in_order():
    source = JAVA.read_text()
    declared = re.search(r"String\[\] FIELDS = \{(.*?)\};", source, re.S)
    assert declared is not None, "ByCampaign.FIELDS not found"
    assert re.findall(r'"(\w+)"', declared.group(1)) == click_aggregator.ROW_FIELDS
