"""Stage 02 (notebooks/02_perturbations.ipynb): each report in the paper's four conditions.

Reads: `reports` (stage 00) and the MPQA lexicon (`lexicon`; part-of-speech tags by `postag`).
Writes: `conditions`, `lexicon_stats`, `perturb_report`, `perturb_set_aside`. The rating sentence is found
and faked by `ratings`; strongly subjective sentences are removed by `subjectivity`.
"""
