"""python -m reporting --results_dir=results --out_dir=report: the PDF report from the results alone.

Exit status 0 with the report written; 2 on input that cannot be read (one line naming the file and line)."""
import argparse
import sys

from reporting import InputError
from reporting.build import build


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m reporting", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results_dir", default="results", help="where make verify and make bench wrote")
    parser.add_argument("--out_dir", default="report", help="where report.pdf, its source and figures go")
    args = parser.parse_args(argv)
    try:
        pdf = build(args.results_dir, args.out_dir)
    except InputError as error:
        print(f"report: error: {error}", file=sys.stderr)
        return 2
    print(f"report: {pdf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
