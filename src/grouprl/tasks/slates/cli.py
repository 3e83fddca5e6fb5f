"""``grouprl grail-data``: write the synthetic slate datasets (hub schema) and their ceilings."""

from __future__ import annotations

import argparse
import json


def cmd_grail_data(args: argparse.Namespace) -> int:
    from grouprl.tasks.slates.synthetic import write_dataset

    issues = ["gun_control", "minimum_wage"] if args.issue == "both" else [args.issue]
    report = write_dataset(
        args.out, issues, args.n_train, args.n_validation, args.seed, args.noise, args.opinion_noise, args.max_prior
    )
    print(json.dumps(report, indent=2))
    print(f"rows written under {args.out}/<gun|wage>/{{train,validation}}.jsonl; ceilings in {args.out}/ceiling.json")
    return 0


def add_grail_data_parser(sub) -> None:
    p = sub.add_parser("grail-data", help="write synthetic GRAIL slate rows (hub schema) with a learnable rule")
    p.add_argument("--out", default="data/grail", help="output dir (default: data/grail)")
    p.add_argument(
        "--issue",
        default="both",
        choices=["both", "gun_control", "minimum_wage"],
        help="which issue(s) (default: both)",
    )
    p.add_argument("--n_train", type=int, default=2000, help="training rows per issue (default: 2000)")
    p.add_argument("--n_validation", type=int, default=300, help="validation rows per issue (default: 300)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default: 0)")
    p.add_argument("--noise", type=float, default=0.15, help="share of random clicks (default: 0.15)")
    p.add_argument("--opinion_noise", type=float, default=0.1, help="share of random opinion moves (default: 0.1)")
    p.add_argument("--max_prior", type=int, default=4, help="most videos watched before the current one (default: 4)")
    p.set_defaults(func=cmd_grail_data)
