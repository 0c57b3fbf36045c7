"""python -m reporting --results_dir=results --out_dir=report: the PDF report from the results alone (docs/report.md).
Exit status 0 with the report written, 2 on bad flags or unreadable input (one line naming the flag or file)."""
import harness
from harness import UsageError, flags
from harness.results import ResultsError
from reporting.build import build


def main(argv=None):
    parser = flags.FlagSet("python -m reporting", __doc__)
    flags.DEFINE_string("results_dir", "results", "where make verify and make bench wrote", flag_values=parser)
    flags.DEFINE_string("out_dir", "report", "where report.pdf, its source and figures go", flag_values=parser)
    args = flags.parse(parser, argv)
    try:
        pdf = build(args.results_dir, args.out_dir)
    except ResultsError as error:
        raise UsageError(str(error))
    print(f"report: {pdf}")
    return 0


if __name__ == "__main__":
    harness.main(main)
