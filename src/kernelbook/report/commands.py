"""The report verbs of kernelbook's command line (kernelbook.cli adds them): publish,
render, index, meta, before-after and compare, each one function of kernelbook.report."""

from __future__ import annotations

import json


def _project(args):
    from kernelbook import config as cfg

    overrides = json.loads(args.settings) if args.settings else None
    return cfg.load_project_file(args.configfile, overrides=overrides)


def cmd_publish(args) -> int:
    from kernelbook.report import publish

    return publish.publish_pairs(
        args.results, args.worklogs, args.pairs, args.render, args.configfile, args.why_none
    )


def cmd_render(args) -> int:
    from kernelbook.report import publish

    return publish.render_pairs(args.worklogs, args.pairs, args.configfile, args.study_config)


def cmd_index(args) -> int:
    from kernelbook.report import index

    print(index.write_index(args.worklogs))
    return 0


def cmd_meta(args) -> int:
    from kernelbook.report import meta

    return meta.write_study_meta(_project(args), args.study, args.out)


def cmd_before_after(args) -> int:
    from kernelbook.report import quality

    return quality.write_before_after(args.rev, args.folders, args.after, args.name)


def cmd_compare(args) -> int:
    from kernelbook.report import compare

    fail_on = [v.strip() for v in (args.fail_on or "").split(",") if v.strip()]
    return compare.run(
        args.a, args.b, args.out, fail_on, args.seed, args.resamples, args.threshold / 100.0
    )


def add_parsers(sub) -> None:
    s = sub.add_parser("publish", help="copy results/<gpu>/<study> into worklogs/, re-index")
    s.add_argument("--results", default="results")
    s.add_argument("--worklogs", default="worklogs")
    s.add_argument("--why-none", default="", help="said when there is nothing to publish")
    s.add_argument(
        "--render",
        action="store_true",
        help="render the worklog from the results' tables first, without Snakemake (for "
        "results measured on a GPU host and brought here); the page is the one rule worklog "
        "makes, the study's own notebook figures included",
    )
    s.add_argument("pairs", nargs="*", metavar="GPU/STUDY")
    s.set_defaults(fn=cmd_publish)

    s = sub.add_parser("render", help="render published pages again from their data/")
    s.add_argument("--worklogs", default="worklogs")
    s.add_argument(
        "--study-config",
        action="store_true",
        help="write each page's data/study.json again from the current config first (its "
        "targets, question, variants' texts); refused for a study `kernelbook check` reports "
        "stale",
    )
    s.add_argument("pairs", nargs="+", metavar="GPU/STUDY")
    s.set_defaults(fn=cmd_render)

    s = sub.add_parser("index", help="regenerate worklogs/README.md")
    s.add_argument("--worklogs", default="worklogs")
    s.set_defaults(fn=cmd_index)

    s = sub.add_parser("meta", help="write study.json: what a worklog needs from the config")
    s.add_argument("study")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_meta)

    s = sub.add_parser(
        "before-after", help="a study's published measurements against those at a git revision"
    )
    s.add_argument("rev")
    s.add_argument(
        "--after",
        metavar="REV2",
        help="compare with the measurements published at REV2, not with data/ as it is now",
    )
    s.add_argument(
        "--name",
        help="write before-after-NAME.md: a later change of method beside an earlier one's file",
    )
    s.add_argument(
        "folders",
        nargs="+",
        metavar="FOLDER",
        help="a published study's folder: worklogs/<gpu>/<study>",
    )
    s.set_defaults(fn=cmd_before_after)

    s = sub.add_parser(
        "compare", help="is B faster than A? ratios of medians with bootstrap intervals"
    )
    s.add_argument("a", help="measurements.parquet, a study folder, or REV:PATH of either")
    s.add_argument("b", help="the same for the other side")
    s.add_argument("--out", help="also write OUT.md and OUT.parquet")
    s.add_argument("--fail-on", help="comma-separated verdicts that exit 1, e.g. slower")
    s.add_argument("--seed", type=int, default=20261201)
    s.add_argument("--resamples", type=int, default=2000)
    s.add_argument("--threshold", type=float, default=1.0, help="%% within which it is 'same'")
    s.set_defaults(fn=cmd_compare)
