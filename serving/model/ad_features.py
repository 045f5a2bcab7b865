"""The ad-feature snapshot file, as the prediction service and the ad servers import it: the format itself
is streams.ad_features (the features job writes it, a layer below serving)."""
from streams.ad_features import (COLUMNS, DEFAULT_PRIOR_STRENGTH, FILE_PATTERN, OPTIONAL_COLUMNS,  # noqa: F401
                                 AdFeatureSnapshot, SnapshotMissing, load, prune, versions)
