#!/usr/bin/env python3
"""The documentation site: every notebook in nbs/ a page, built with mkdocs + mkdocs-jupyter (no binary download).

    python .ci/docs.py                  # build _site/ (published whole: the old site stays until the new one is complete)
    python .ci/docs.py --out DIR        # build elsewhere
    python .ci/docs.py --serve          # build, then serve it on http://127.0.0.1:8000

Module notebooks are shown the way nbdev shows them: exported source is hidden and each public name it defines
gets its API entry (nbdev's `show_doc`, rendered from the imported module), `exports` cells keep their source,
examples and tests stay as written. The experiment and report notebooks are pages too, as they are stored.

Written here rather than with `nbdev_proc_nbs` because nbdev's processor executes every cell that contains an import
(tests and training runs included) and its output targets Quarto; this needs only the exported module."""

from __future__ import annotations

import argparse
import ast
import copy
import functools
import importlib
import json
import re
import tempfile
from pathlib import Path

root = Path(__file__).resolve().parents[1]
NBS = root / "nbs"
SECTIONS = {
    "": "Library",
    "video": "Video behaviour",
    "eval": "Evaluation",
    "analysis": "Analysis",
    "models": "Real models",
    "release": "Data release",
    "harness": "Skill-evolution harness",
    "runs": "Runs and reports",
    "experiments": "Experiment notebooks",
    "reports": "Report notebooks",
}
_DIRECTIVE = re.compile(r"^\s*#\|\s*(\w+)(.*)$")
_SOURCE_LINK = re.compile(r"^\[source\]\(.*$\n?", re.M)  # show_doc's link to a hosted repository (none here)


def directives(src: str) -> dict[str, str]:
    "The `#| name args` lines at the top of a cell."
    out = {}
    for line in src.splitlines():
        m = _DIRECTIVE.match(line)
        if not m:
            break
        out[m[1]] = m[2].strip()
    return out


def strip_directives(src: str) -> str:
    lines = src.splitlines()
    while lines and _DIRECTIVE.match(lines[0]):
        lines.pop(0)
    return "\n".join(lines)


def public_names(src: str) -> list[str]:
    "Names an export cell defines at top level that are part of the module's API (not `_private`)."
    names = []
    for node in ast.parse(src).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name) and t.id.isupper():
                    names.append(t.id)  # documented constants only
    return [n for n in names if not n.startswith("_")]


def api_entry(obj, name: str) -> str:
    from nbdev.showdoc import show_doc

    if not callable(obj):
        return f"---\n\n### {name}\n\n```python\n{name} = {obj!r}\n```\n"
    return _SOURCE_LINK.sub("", show_doc(obj, name=name, title_level=3)._repr_markdown_())


def md_cell(text: str, name: str) -> dict:
    return {"cell_type": "markdown", "id": f"api-{name}", "metadata": {}, "source": text}


def unique_headings(cells: list[dict]) -> None:
    """Headings whose anchors agree between the page and its table of contents: mkdocs-jupyter takes the TOC from
    Python-Markdown (which drops code spans and numbers repeated anchors `x_1`) but the page's ids from nbconvert
    (which keeps code text and repeats ids). So headings lose their backticks and a repeated one gets a suffix."""
    from markdown.extensions.toc import slugify

    used = set()
    for c in cells:
        if c["cell_type"] != "markdown":
            continue
        lines, fence = c["source"].split("\n"), False
        for i, line in enumerate(lines):
            if line.lstrip().startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"(#{1,6}) (.*)$", line)
            if not m:
                continue
            text, n = m[2].replace("`", ""), 1
            base = text
            while slugify(text, "-") in used:
                n += 1
                text = f"{base} ({'API' if c.get('id', '').startswith('api-') and n == 2 else n})"
            used.add(slugify(text, "-"))
            lines[i] = f"{m[1]} {text}"
        c["source"] = "\n".join(lines)


def page(nb: dict, path: Path) -> dict:
    "A notebook as its docs page: directives gone, exported code replaced by API entries, headings without nbdev's ` -`."
    mod, cells = None, []
    for c in nb["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "code":
            d = directives(src)
            if "default_exp" in d:
                mod = importlib.import_module(f"vtreetrm.{d['default_exp'].split()[0]}")
                continue
            if "hide" in d or "exporti" in d:
                continue
            if "export" in d or "exports" in d:
                if "exports" in d:
                    cells.append({**c, "source": strip_directives(src), "outputs": [], "execution_count": None})
                names = public_names(strip_directives(src))
                missing = [n for n in names if mod is None or not hasattr(mod, n)]
                if missing:
                    raise SystemExit(f"{path}: {', '.join(missing)} not in the exported module (run `make export`)")
                cells += [md_cell(api_entry(getattr(mod, n), n), n) for n in names]
                continue
            cells.append({**c, "source": strip_directives(src)})
        elif c["cell_type"] == "markdown":
            cells.append({**c, "source": re.sub(r"^(#+ .*?) -\s*$", r"\1", src, flags=re.M)})
    unique_headings(cells)
    out = copy.deepcopy(nb)
    out["cells"] = cells
    return out


def title(nb: dict, path: Path) -> str:
    for c in nb["cells"]:
        if c["cell_type"] == "markdown":
            m = re.match(r"#\s+(.+)", "".join(c["source"]).strip())
            if m:
                return m[1].strip()
    return path.stem


def notebooks() -> list[Path]:
    return sorted(
        p for p in NBS.rglob("*.ipynb") if not any(part.startswith(("_", ".")) for part in p.relative_to(NBS).parts)
    )


def write_site_sources(src: Path) -> dict:
    "Pages under `src/docs`, and the mkdocs config (returned) whose nav lists them by section."
    nav = {s: [] for s in SECTIONS}
    for p in notebooks():
        rel = p.relative_to(NBS)
        nb = json.loads(p.read_text(encoding="utf-8"))
        dest = src / "docs" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(
            json.dumps(
                page(nb, p.relative_to(root)) if rel.parts[0] not in ("experiments", "reports") else nb, indent=1
            ),
            encoding="utf-8",
        )
        section = rel.parts[0] if len(rel.parts) > 1 else ""
        if rel.name in ("index.ipynb", "architecture.ipynb") and not section:
            continue  # both come first in the nav
        if section not in nav:
            raise SystemExit(f"{p}: folder nbs/{section} has no docs section (add it to SECTIONS in .ci/docs.py)")
        nav[section].append({title(nb, p): rel.as_posix()})
    return {
        "site_name": "vtreetrm",
        "docs_dir": "docs",
        "use_directory_urls": True,
        "strict": True,
        "theme": {"name": "material", "font": False, "features": ["navigation.sections", "search.highlight"]},
        "plugins": [
            "search",
            {
                "mkdocs-jupyter": {
                    "execute": False,
                    "include_source": False,
                    "ignore_h1_titles": False,
                    "include_requirejs": False,
                }
            },
        ],
        "nav": [{"Home": "index.ipynb"}, {"Architecture": "architecture.ipynb"}]
        + [{SECTIONS[s]: pages} for s, pages in nav.items() if pages],
    }


def build(out: Path) -> Path:
    from mkdocs.commands.build import build as mk_build
    from mkdocs.config import load_config

    from vtreetrm.utils import atomic_dir

    with tempfile.TemporaryDirectory(prefix=".docs-src-", dir=root) as d, atomic_dir(out) as staging:
        cfg = write_site_sources(Path(d))
        (Path(d) / "mkdocs.yml").write_text(json.dumps(cfg, indent=1), encoding="utf-8")  # JSON is YAML
        mk_build(load_config(str(Path(d) / "mkdocs.yml"), site_dir=str(staging)))
    return out.resolve()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=root / "_site", help="site folder (default: _site)")
    ap.add_argument("--serve", action="store_true", help="serve the built site on http://127.0.0.1:8000")
    a = ap.parse_args(argv)
    site = build(a.out)
    print(f"site written to {site}")
    if a.serve:
        import http.server

        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
        print("serving on http://127.0.0.1:8000 (Ctrl-C stops)")
        http.server.ThreadingHTTPServer(("127.0.0.1", 8000), handler).serve_forever()


if __name__ == "__main__":
    main()
