"""`python3 -m pagetrace VERB`: the front door without the venv's entry
point. The verbs of the core (cache, startup, trace, replay, ...) need the
standard library only; the analysis verbs need numpy and pandas."""
import sys

from .frontdoor import dispatch


def main():
    code = dispatch(sys.argv[1:])
    if code is None:
        from .cli import main as analysis_main
        code = analysis_main()
    return code


if __name__ == "__main__":
    sys.exit(main())
