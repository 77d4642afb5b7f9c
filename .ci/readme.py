#!/usr/bin/env python3
"""README.md is generated from nbs/index.ipynb (the docs' home page) with nbconvert's Markdown exporter; the line
`<!-- demo-summary -->` becomes reports/demo_summary.md, the table a full `make demo` run wrote (never typed by hand).

python .ci/readme.py           # write README.md
python .ci/readme.py --check   # exit 1 when README.md differs from what nbs/index.ipynb gives"""

import json
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]


MARK = "<!-- demo-summary -->"


def demo_table() -> str:
    "reports/demo_summary.md, once its .json says it is a full run's."
    s = json.loads((root / "reports" / "demo_summary.json").read_text(encoding="utf-8"))
    if s.get("quick"):
        sys.exit("reports/demo_summary.json is a --quick run's: run `make demo` in full, then `make readme`")
    return (root / "reports" / "demo_summary.md").read_text(encoding="utf-8").rstrip("\n")


def render() -> str:
    from nbconvert import MarkdownExporter

    body, _ = MarkdownExporter().from_filename(str(root / "nbs" / "index.ipynb"))
    if body.count(MARK) != 1:
        sys.exit(f"nbs/index.ipynb must hold the line {MARK} once (where the demo's results go)")
    return body.replace(MARK, demo_table())


def main():
    text = render()
    if "--check" in sys.argv[1:]:
        if (root / "README.md").read_text(encoding="utf-8") != text:
            sys.exit(
                "README.md differs from nbs/index.ipynb: the README is generated; edit nbs/index.ipynb, then run `make readme`"
            )
        print("README.md is what nbs/index.ipynb gives")
        return
    tmp = root / ".README.md.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(root / "README.md")
    print("README.md written from nbs/index.ipynb")


if __name__ == "__main__":
    main()
