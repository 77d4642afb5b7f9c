#!/usr/bin/env python3
"""README.md is generated from nbs/index.ipynb (the docs' home page) with nbconvert's Markdown exporter.

python .ci/readme.py           # write README.md
python .ci/readme.py --check   # exit 1 when README.md differs from what nbs/index.ipynb gives"""

import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]


def render() -> str:
    from nbconvert import MarkdownExporter

    body, _ = MarkdownExporter().from_filename(str(root / "nbs" / "index.ipynb"))
    return body


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
