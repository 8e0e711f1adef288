"""Stage 04 (notebooks/04_scoring.ipynb): herding and accuracy, Fin-Bias Tables 4-7.

Reads: `predictions` (03), `conditions` (02), `labels` (01), `reports` (00).
Writes: `metrics`, `paired_tests`, `scoring_report`; Tables 4-7 in our layout and the paper's
(`paper_layout`). The statistics have one definition each (`metrics`); `compare` says which of our
numbers each published column is compared with, and `consistency` checks that every compared number is
the one our own table prints.
"""
