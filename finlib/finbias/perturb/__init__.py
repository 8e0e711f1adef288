"""Stage 02 (notebooks/02_perturbations.ipynb): each report in the paper's four conditions.

Reads: `reports` (stage 00) and the MPQA lexicon (`lexicon`; part-of-speech tags by `postag`).
Writes: `conditions`, `lexicon_stats`, `perturb_report`, `perturb_set_aside`, `rating_statements`. The rating
statement is found in the front matter by `statement` (provider scales in `provider_scales`) and faked by
`ratings`; strongly subjective sentences are removed by `subjectivity`.
"""
