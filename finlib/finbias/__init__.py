"""Fin-Bias: do LLMs herd the analyst's opinion? One folder per stage, mirroring the notebooks.

data/ 00, labels/ 01, perturb/ 02, inference/ 03, scoring/ 04, dpo/ 05, figures/ 06, beyond/ 09: each
folder's `stage` module is the stage (`SECTION`, `run(cfg)`, `summary(cfg, result)`), the other modules its
parts. Shared by the stages: `vocab` (ratings, conditions, sectors), `answers` (the one rating parser),
`prompts` (the investor prompt, versioned), `sentences` (sentence splitting) and `artifacts` (which stage
writes each file; found by `finlib.core.artifacts.producers` through the package entry points).
"""
