#!/usr/bin/env python3
"""README.md is generated from nbs/index.ipynb (the docs' home page) with nbconvert's Markdown exporter; each line
`<!-- NAME -->` becomes reports/NAME.md (`-` read as `_`), the summary a full run wrote beside reports/NAME.json:
`<!-- demo-summary -->` from `make demo`, `<!-- learnability -->`, `<!-- phase2_scale -->` and `<!-- real_models -->`
from the scripts of the same names in benchmarks/. No figure in the README is typed by hand.

python .ci/readme.py           # write README.md
python .ci/readme.py --check   # exit 1 when README.md differs from what nbs/index.ipynb gives"""

import json
import re
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[1]

MARK = re.compile(r"^<!-- ([a-z0-9_-]+) -->$", re.M)
PRODUCER = {"demo_summary": "make demo", "learnability": "python benchmarks/learnability.py",
            "phase2_scale": "python benchmarks/phase2_scale.py --procs 2",
            "real_models": "python benchmarks/real_models.py", "real_harness": "python benchmarks/real_harness.py",
            "real_release": "python benchmarks/real_release.py"}  # fmt: skip


def summary(name: str, reports: Path = root / "reports") -> str:
    "reports/NAME.md, once reports/NAME.json says it is a full run's; exits naming the file otherwise."
    how = PRODUCER.get(name, f"the script that writes reports/{name}.json")
    js, md = reports / f"{name}.json", reports / f"{name}.md"
    if not js.is_file() or not md.is_file():
        sys.exit(f"{js if not js.is_file() else md} is missing: run `{how}` in full, then `make readme`")
    if json.loads(js.read_text(encoding="utf-8")).get("quick"):
        sys.exit(f"{js} is a --quick run's: run `{how}` in full, then `make readme`")
    for f in (js, md) if (root / ".git").exists() else ():  # a clean clone has only what git keeps
        if subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(f)]).returncode == 0:
            sys.exit(f"{f} is ignored by .gitignore: a clone would not have it; un-ignore it, then commit it")
    return md.read_text(encoding="utf-8").rstrip("\n")


def render() -> str:
    from nbconvert import MarkdownExporter

    body, _ = MarkdownExporter().from_filename(str(root / "nbs" / "index.ipynb"))
    names = MARK.findall(body)
    if "demo-summary" not in names or len(names) != len(set(names)):
        sys.exit("nbs/index.ipynb must hold the line <!-- demo-summary --> once, and each <!-- NAME --> line once")
    return MARK.sub(lambda m: summary(m[1].replace("-", "_")), body)


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
