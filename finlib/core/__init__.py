"""What every stage shares: params and their schema, artifacts, the runner and its manifest,
tables I/O, statistics, the report and the run plan."""
