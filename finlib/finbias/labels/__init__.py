"""Stage 01 (notebooks/01_labels.ipynb): return-based ground truth (Fin-Bias Appendix A.1).

Reads: `reports`, `prices`, `market` (stage 00).
Writes: `labels`, `labels_report`; Table 3 (lower half) and the label diagnostics. The market model and
the per-year 30/40/30 buckets are `market_model`.
"""
