"""`python -m finlib.finbias.dpo --run NAME [--parts ...] [--model NAME ...] [--dry-run]`: stage 05 without the notebook.

The same entry point scales out with accelerate (no code of ours is distributed), one launch per model:
`accelerate launch --config_file params/accelerate/ddp.yaml -m finlib.finbias.dpo --run paper --parts train --model qwen3-8b`
`--dry-run` stops before loading weights after checking params, the launch, data and tokenizer (docs/dpo.md).
"""
from __future__ import annotations

import argparse
import sys

from finlib.core.config import load_run
from finlib.finbias.dpo.stage import PARTS, AdapterMissingError, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m finlib.finbias.dpo", description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="default", help="params/<run>.yaml (default: default)")
    ap.add_argument("--params", default=None, help="explicit params file (overrides --run's)")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS,
                    help="triplets (split + teacher), train (LoRA DPO), evaluate (Table 8); default: all")
    ap.add_argument("--model", nargs="+", default=None, help="registry name(s) to tune (default: dpo.models)")
    ap.add_argument("--dry-run", action="store_true",
                    help="check params, launch, data and tokenizer; stop before loading weights")
    ap.add_argument("--stand-in-tokenizer", default=None,
                    help="with --dry-run: a registry model whose tokenizer stands in when the model's own cannot "
                         "be loaded offline (stated in the output)")
    args = ap.parse_args(argv)
    cfg = load_run(args.run, args.params)
    if args.dry_run:
        from finlib.finbias.dpo.preflight import dry_run

        pf = dry_run(cfg, args.model, args.stand_in_tokenizer)
        print("\n".join(pf.lines))
        print(f"dry run: {'FAILED: ' + '; '.join(pf.problems) if pf.problems else 'passed'} (nothing trained)")
        return 1 if pf.problems else 0
    try:
        res = run(cfg, tuple(args.parts), args.model)
    except AdapterMissingError as exc:
        print(exc, file=sys.stderr)
        return 1
    if res is not None:
        print(res.triplet_summary.to_string(index=False))
        print(res.table8.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
