"""`python3 -m pagetrace VERB`: the front door without the venv's entry
point. The verbs of the core (cache, startup, trace, replay, ...) need the
standard library only; the analysis verbs need numpy and pandas."""
import sys

from pagetrace.frontdoor import dispatch, short_help, version_text

NEEDS = ("needs numpy, pandas and matplotlib ({exc}): install them "
         "(pip install -r requirements.txt) or run the checkout's "
         ".venv/bin/pagetrace")


def without_analysis_layer(argv, exc):
    if argv[:1] in (["-V"], ["--version"]):
        print(version_text())
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        out = sys.stdout if argv else sys.stderr
        out.write(short_help() + "\n\nThe analysis verbs (summary, plot, waste, report, ...) "
                  "are not available: each " + NEEDS.format(exc=exc) + ".\n")
        return 0 if argv else 2
    print(f"pagetrace: {argv[0]}: " + NEEDS.format(exc=exc), file=sys.stderr)
    return 1


def main():
    code = dispatch(sys.argv[1:])
    if code is None:
        try:
            from pagetrace.cli import main as analysis_main
        except ImportError as exc:
            # The installed `pagetrace` runs on the system Python, which may
            # lack the analysis layer's libraries: the tools' verbs, help and
            # version still work; an analysis verb says what is missing.
            return without_analysis_layer(sys.argv[1:], exc)
        code = analysis_main()
    return code


if __name__ == "__main__":
    sys.exit(main())
