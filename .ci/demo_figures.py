"""demo_figures.py OLD NEW: exit 1 (listing them) where two demo summaries (demo_summary.json) differ in any figure.

Only the wall time and the provenance may change between two runs of `make demo`; for example, against the summary
committed at a revision: `python .ci/demo_figures.py <(git show REV:reports/demo_summary.json) reports/demo_summary.json`.
"""

import json
import sys

from vtreetrm.demo import figure_changes

if len(sys.argv) != 3:
    sys.exit(__doc__.strip())
old, new = (json.loads(open(f).read()) for f in sys.argv[1:])
changes = figure_changes(old, new)
print("\n".join(changes) if changes else "every figure of the two summaries is the same")
sys.exit(1 if changes else 0)
