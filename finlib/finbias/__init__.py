"""Fin-Bias: data preparation, labels, perturbations, inference, scoring, figures and DPO."""
