"""The ground floor, with no paper's words: what every stage of both papers shares.

- params.py, config.py  the one params schema (pydantic) and a run's resolved params and folders (`load_run`)
- stage.py              the stage contract (`SECTION`, `run`, `summary`) every stage module keeps
- artifacts.py          the artifact store API: atomic writes, frames, JSON, the manifest; each paper
                        registers which stage writes each of its files
- tables.py, compare.py tables in CSV / Markdown / LaTeX, the published tables, ours beside them
- stats.py              confidence intervals and paired tests
- lab.py                which run a notebook opens in JupyterLab (an exploration never overwrites a run)
- sqlite_wal.py, progress_feed.py, kernel_interrupt.py, errors.py: SQLite in WAL mode across processes,
                        progress from a kernel to the terminal, Ctrl-C to a kernel, the params error

Imports nothing above it (`tests/repository/test_import_graph.py`).
"""
