"""Running the notebooks as one job: the stage table (`stages`), the runner and its manifest (`runner`), the
plan and preflight (`plan`), the HTML report (`report`), and the table comparison of two runs (`compare_runs`).

Sits above both papers: it may import any of them, and nothing below imports it.
"""

# The papers register their closed vocabularies (`bizfin.tasks`, ...) on import; loading them here makes
# every params load under the orchestration layer check those names.
import finlib.bizfin  # noqa: F401
