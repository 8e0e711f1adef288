"""Stage 00 (notebooks/00_data_prep.ipynb): the reports and prices every later stage reads.

Reads: `data.source` — the seeded synthetic market (`synth`, `synth_corpus`, `messy_corpus`, cached by
`synth_cache`), local files (`validation`, `prices`) or the Hugging Face dataset.
Writes: `reports`, `prices`, `market`, `truth` (synthetic only: what was planted, `synth_planted`),
`data_report`; Fin-Bias Tables 2 and 3 (upper half).
"""
