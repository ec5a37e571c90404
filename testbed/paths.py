"""Where the repository's files are, for code that runs from a source checkout."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "kuberhealthy"
CRD_DIR = CHART / "crds"
