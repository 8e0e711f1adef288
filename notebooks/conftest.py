"""The notebook test tier (`pytest notebooks --nbval-lax`) executes every stage on params/smoke.yaml.

The notebooks' parameters cell leaves `run_name` at None (JupyterLab opens the most recent run);
`finlib.core.lab.open_run` reads FINLIB_RUN first, so the kernels nbval starts work on the smoke run
and never on a run a user made.
"""
import os


def pytest_configure(config) -> None:
    os.environ.setdefault("FINLIB_RUN", "smoke")
