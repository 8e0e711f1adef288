"""BizFinBench's artifacts: which stage writes each file under `data/processed/<run>/`."""
from __future__ import annotations

PRODUCERS: dict[str, str] = {
    "bizfin_items": "07", "bizfin_report": "07",
    "iterajudge_trajectories": "08", "iterajudge_results": "08", "judge_calibration_scores": "08",
    "judge_calibration": "08", "iterajudge_report": "08",
}
