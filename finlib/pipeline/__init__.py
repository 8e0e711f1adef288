"""Running the notebooks as one job: the runner and its manifest, the plan and preflight, the HTML report.

Sits above both papers: it may import any of them, and nothing below imports it.
"""
