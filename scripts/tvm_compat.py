"""Run TVM's relay-era tests against Kiln and write docs/tvm_compat.md.

Usage::

    python scripts/tvm_compat.py                        # all files and tutorials; writes docs/tvm_compat.md
    python scripts/tvm_compat.py -k op_level1 --no-doc  # a subset; print the table only
    python scripts/tvm_compat.py --timeout 120          # per-file timeout in seconds

The tests are read from ``../shared/tvm_relay_tests/tests/`` (next to the checkout) or ``--suite``,
the tutorials from ``../shared/tvm_relay_tests/tutorials/`` or ``--tutorials`` (``-k`` selects both).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kiln.testing.compat import compat_markdown, run_suite, run_tutorials  # noqa: E402

DEFAULT_SUITE = ROOT.parent / "shared" / "tvm_relay_tests" / "tests"
DEFAULT_TUTORIALS = ROOT.parent / "shared" / "tvm_relay_tests" / "tutorials"


def main(argv: list[str] | None = None) -> int:
    """Run the suite; print the totals; write the doc unless ``--no-doc``."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", type=Path, default=DEFAULT_SUITE, help="folder of TVM test files")
    ap.add_argument("-k", default="", help="only files whose name contains this")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "tvm_compat.md")
    ap.add_argument("--no-doc", action="store_true", help="print, do not write the doc")
    ap.add_argument("--tutorials", type=Path, default=DEFAULT_TUTORIALS, help="folder of TVM tutorials")
    ap.add_argument("--no-tutorials", action="store_true", help="run the test files only")
    ap.add_argument("--tutorial-timeout", type=float, default=900.0, help="seconds per tutorial")
    args = ap.parse_args(argv)
    sources = sorted(p for p in args.suite.glob("test_*.py") if args.k in p.name)
    tutorials = [] if args.no_tutorials else sorted(
        p for p in args.tutorials.glob("*.py") if args.k in p.name)
    if not sources and not tutorials:
        print(f"no test files in {args.suite} or tutorials matching {args.k!r}", file=sys.stderr)
        return 2
    start = time.monotonic()
    results = run_suite(sources, timeout=args.timeout, progress=True)
    tut_results = run_tutorials(tutorials, timeout=args.tutorial_timeout, progress=True)
    text = compat_markdown(results, tutorials=tut_results)
    total = sum(len(r.units) for r in results)
    passed = sum(r.count("passed") for r in results)
    imports = sum(bool(r.import_error) for r in results)
    pct = 100.0 * passed / total if total else 0.0
    runs = sum(t.status == "runs" for t in tut_results)
    print(f"units passed: {passed} / {total} ({pct:.1f}%); files failing at import: {imports} / "
          f"{len(results)}; tutorials run: {runs} / {len(tut_results)}; "
          f"{time.monotonic() - start:.0f}s")
    if args.no_doc:
        print(text)
    else:
        args.doc.write_text(text, encoding="utf-8")
        print(f"wrote {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
