"""Stage 06 (notebooks/06_figures.ipynb): the paper's figures, our results figures, paper-vs-ours tables.

Reads: every earlier Fin-Bias artifact that exists (stages 00-05).
Writes: `figures/<run>/*` with captions, `figures_report`, `paper_vs_ours_*` tables. `base` is the one
figure style and palette of the project (print size, fonts, rating colours); `paper` draws Fin-Bias
Figures 2-5, `beyond` the figures of stage 09.
"""
