"""The inspect_ai entry point (`[project.entry-points.inspect_ai]`): importing it registers the
tasks as `finlib/<task>`. Loaded by inspect only, never by the stages."""

from finlib.harness.inspect_finbias import finbias_herding

__all__ = ["finbias_herding"]
