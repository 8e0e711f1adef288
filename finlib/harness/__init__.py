"""Both papers as tasks of the evaluation harnesses researchers already use (inspect_ai, lm-eval).

The harness code is an optional extra (`pip install -e '.[harness]'`): nothing here is imported by
the stages, and the modules that import `inspect_ai` are loaded only by the harness itself (its
entry point), so `make reproduce` never pays for them. The statistics are the project's own
(`finlib.finbias.scoring`): a harness task sends the project's prompts and hands the replies to the
project's reader and Eq. 1, so a number read in `inspect view` is the number the pipeline prints.
"""
