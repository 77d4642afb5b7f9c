"""The documentation site (`make docs`): built from nbs/, every page opened in headless Chromium from a local server,
every internal link and anchor followed, the search box tried."""

import functools
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
from conftest import CHROMIUM, CHROMIUM_FLAGS, once

# the site build (about 40 s) and the crawl of every page (about a minute) run in the slow tier, which `.ci/run` runs
# at every landing; `.ci/docs.py` itself is imported by nothing else
pytestmark = pytest.mark.slow


def _build(d: Path):
    r = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "docs.py"), "--out", str(d / "site")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="session")
def site(tmp_path_factory, worker_id):
    "The site, built once per test session (see `conftest.once`)."
    pytest.importorskip("mkdocs_jupyter", reason="the docs extra is not installed (pip install -e .[docs])")
    return once(tmp_path_factory, worker_id, "docs", _build) / "site"


@pytest.fixture(scope="module")
def server(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


def pages() -> dict:
    "Each notebook's page path on the site."
    nbs = sorted(
        p
        for p in (ROOT / "nbs").rglob("*.ipynb")
        if not any(s.startswith(("_", ".")) for s in p.relative_to(ROOT / "nbs").parts)
    )
    rels = {nb: nb.relative_to(ROOT / "nbs").with_suffix("").as_posix() for nb in nbs}
    return {nb: "" if rel == "index" else f"{rel}/" for nb, rel in rels.items()}


def test_every_notebook_is_a_page_with_its_api(site):
    for nb, path in pages().items():
        assert (site / path / "index.html").is_file(), f"{nb} has no page"
    utils = (site / "00_utils" / "index.html").read_text()
    assert 'id="publish_dir"' in utils and "atomic_write" in utils and "#| export" not in utils
    # exported source is hidden, its API entry shown: the signature's parameter comment, not the function body
    assert "destination file" in utils and "os.replace(src, dest)" not in utils
    index = json.loads((site / "search" / "search_index.json").read_text())
    assert any("publish_dir" in d["title"] for d in index["docs"])


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (make test installs it where it can)")
def test_every_page_loads_and_no_internal_link_is_broken(site, server):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[docs])")
    problems, seen, anchors = [], set(), {}
    todo, links = [server], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page()
        page.on("pageerror", lambda e: problems.append(f"{page.url}: script error {e}"))
        # a resource that is missing (HTTP error) or fails to load; a load cut short by moving to the next page is neither
        page.on("response", lambda r: r.status >= 400 and problems.append(f"{page.url}: HTTP {r.status} for {r.url}"))
        page.on(
            "requestfailed",
            lambda r: (
                "ERR_ABORTED" not in (r.failure or "") and problems.append(f"{page.url}: {r.failure} for {r.url}")
            ),
        )
        page.on("console", lambda m: m.type == "error" and problems.append(f"{page.url}: console {m.text}"))
        while todo:
            url = todo.pop()
            if url in seen:
                continue
            seen.add(url)
            resp = page.goto(url, wait_until="load")
            if resp is None or resp.status != 200:
                problems.append(f"{url}: HTTP {resp and resp.status}")
                continue
            anchors[url] = set(page.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
            for href in page.eval_on_selector_all("a[href]", 'els => els.map(e => e.getAttribute("href"))'):
                full = urljoin(url, href)
                if urlparse(full).netloc != urlparse(server).netloc:
                    continue
                target, frag = urldefrag(full)
                links.append((url, href, target, frag))
                if target.endswith("/") and target not in seen:
                    todo.append(target)
        # the search box finds an API entry
        page.goto(server)
        page.fill("input.md-search__input", "publish_dir")
        page.wait_for_selector(".md-search-result__item", timeout=60_000)
        results = page.inner_text(".md-search-result")
        browser.close()
    unreached = [str(nb) for nb, path in pages().items() if server + path not in seen]
    assert not unreached, f"pages not reachable from the home page: {unreached}"
    for src, href, target, frag in links:
        if target.endswith("/"):
            if target not in anchors:
                problems.append(f"{src}: link {href} to a page that does not load")
                continue
            if frag and frag not in anchors[target]:
                problems.append(f"{src}: link {href}: no #{frag} on that page")
        elif not (Path(site) / urlparse(target).path.lstrip("/")).is_file():
            problems.append(f"{src}: link {href} to a missing file")
    assert not problems, "\n".join(problems[:30])
    assert "publish_dir" in results
