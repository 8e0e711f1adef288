"""Fin-Bias's artifacts: which stage writes each file under `data/processed/<run>/`."""
from __future__ import annotations

PRODUCERS: dict[str, str] = {
    "reports": "00", "prices": "00", "market": "00", "truth": "00", "data_report": "00",
    "labels": "01", "labels_report": "01",
    "conditions": "02", "lexicon_stats": "02", "perturb_report": "02", "perturb_set_aside": "02",
    "rating_statements": "02",
    "predictions": "03", "inference_report": "03", "draws": "03",
    "metrics": "04", "paired_tests": "04", "scoring_report": "04",
    "dpo_split": "05", "dpo_triplets": "05", "dpo_drops": "05", "dpo_predictions": "05", "dpo_metrics": "05",
    "dpo_paired_tests": "05", "dpo_report": "05",
    "figures_report": "06",
    "beyond_noise_estimates": "09", "beyond_paper_vs_noise": "09", "beyond_draws_needed": "09",
    "beyond_response_matrix": "09", "beyond_sweep_lift": "09", "beyond_sweep_lift_sector": "09",
    "beyond_fully_herded": "09", "beyond_report": "09", "beyond_figures": "09",
}
