"""The inspect_ai entry point (`[project.entry-points.inspect_ai]`): importing it registers the
tasks as `finlib/finbias_herding` and `finlib/bizfinbench_<family>` (aea, fnc, ftr, ftu, fqa, fdd,
er, sp, fner). Loaded by inspect only, never by the stages."""

from finlib.harness.inspect_bizfin import FAMILY_TASKS
from finlib.harness.inspect_finbias import finbias_herding

globals().update(FAMILY_TASKS)  # each family's task under its registered name, for `file.py@bizfinbench_fnc` too

__all__ = ["finbias_herding", *FAMILY_TASKS]
