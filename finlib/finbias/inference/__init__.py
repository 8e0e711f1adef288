"""Stage 03 (notebooks/03_inference.ipynb): every condition of every report, answered by every model.

Reads: `conditions` (stage 02) and the model registry (`params/models.yaml`).
Writes: `predictions`, `inference_report`, `draws` (repeated draws and the rating sweep, `draws`).
"""
