"""Screenshots of ``teamrl report``'s page, one PNG per section, for docs/report.md:

    python docs/screenshots.py RUN_DIR OUT_PREFIX [--max-height PX]

writes RUN_DIR/report.html (as ``teamrl report RUN_DIR``), opens it from file:// in headless
Chromium with every request off the machine refused, and saves OUT_PREFIX-curves.png,
-samples.png, -tree.png and -evals.png. Needs ``pip install 'teamrl[browser]'`` and the
system's Chromium (``apt-get install chromium``; or TEAMRL_CHROMIUM=/path/to/chromium).
The docs' images: ``python docs/screenshots.py RUN docs/images/report-magrpo`` on a MAGRPO run
and ``... docs/images/report-at-grpo`` on an AT-GRPO one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from teamrl.commands.report import write_report
from teamrl.commands.report_browser import missing, screenshots


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="A run folder (its metrics.jsonl, samples.jsonl, ...).")
    p.add_argument("out_prefix", help="Each section goes to OUT_PREFIX-<section>.png.")
    p.add_argument("--max-height", type=int, default=1400, help="Cut taller sections (pixels).")
    args = p.parse_args(argv)
    why = missing()
    if why:
        print(f"screenshots: {why}", file=sys.stderr)
        return 2
    page = write_report(Path(args.run_dir))
    for path in screenshots(page, args.out_prefix, args.max_height):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
