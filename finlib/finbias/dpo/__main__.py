"""`python -m finlib.finbias.dpo --run NAME [--parts ...] [--model NAME]`: stage 05 without the notebook.

The same entry point scales out with accelerate (no code of ours is distributed):
`accelerate launch --config_file params/accelerate/ddp.yaml -m finlib.finbias.dpo --run real --parts train --model qwen3-8b`
"""
from __future__ import annotations

import argparse

from finlib.core.config import load_run
from finlib.finbias.dpo.stage import PARTS, run_stage


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m finlib.finbias.dpo", description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="default", help="params/<run>.yaml (default: default)")
    ap.add_argument("--params", default=None, help="explicit params file (overrides --run's)")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS,
                    help="triplets (split + teacher), train (LoRA DPO), evaluate (Table 8); default: all")
    ap.add_argument("--model", default=None, help="registry name of the model to tune (default: dpo.model)")
    args = ap.parse_args(argv)
    res = run_stage(load_run(args.run, args.params), tuple(args.parts), args.model)
    if res is not None:
        print(res.triplet_summary.to_string(index=False))
        print(res.table8.to_string(index=False))


if __name__ == "__main__":
    main()
