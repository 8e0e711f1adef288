"""Stage 09 (notebooks/09_beyond_the_paper.ipynb): how much of "herding" is sampling noise, and the
rating sweep.

Reads: `draws`, `predictions` (03), `conditions` (02), `labels` (01), `reports` (00).
Writes: `beyond_*` tables, frames and figures (`sampling_noise`, `rating_sweep`).
"""
