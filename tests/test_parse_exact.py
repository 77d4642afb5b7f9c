"""The answer parser, in this process, against a plain reading of its rule written here: the last opening tag (any case,
spaces inside), up to the first closing tag after it or the end; split on , ; | ， ； 、 and newlines; list markers
dropped, quotes and . 。 * - trimmed; empty parts dropped; repeats (up to case, spacing and Unicode form) dropped, the
first kept; each part snapped to the candidate spelled like it. Thousands of random outputs built from the pieces
that matter must read the same, so the parser's fast path and its prefilters change no answer."""

import re
import unicodedata

import numpy as np
import pytest

from vtreetrm.eval.parse import (
    WHITESPACE,
    LabelMap,
    _dedup_pairs,
    check_label,
    label_survives_parsing,
    norm_label,
    parse_actions,
)
from vtreetrm.utils import UserError

WS = "[" + re.escape(WHITESPACE) + "]"
OPEN = re.compile(rf"<{WS}*predicted_actions{WS}*>", re.I)
CLOSE = re.compile(rf"<{WS}*/{WS}*predicted_actions{WS}*>", re.I)
MARKER = re.compile(rf"^(?:\(?[0-9]+[.)]|[A-Za-z][.)]){WS}+")
TRIM = " \t\r\"'`*-•.。" + WHITESPACE


def key(s: str) -> str:
    return " ".join(unicodedata.normalize("NFC", s).split()).casefold()


def reference(text, candidates=None):
    if not isinstance(text, str):
        return None
    opens = list(OPEN.finditer(text))
    if not opens:
        return None
    body = text[opens[-1].end() :]
    if m := CLOSE.search(body):
        body = body[: m.start()]
    out, seen = [], set()
    for part in re.split("[,;|\n\uff0c\uff1b\u3001]", body):
        part = MARKER.sub("", part.strip(WHITESPACE)).strip(TRIM)
        if not part:
            continue
        same = [c for c in candidates or () if key(c) == key(part)]
        label = part if part in (candidates or ()) else same[0] if same else " ".join(part.split())
        if key(label) not in seen:
            seen.add(key(label))
            out.append(label)
    return out


PIECES = ["<predicted_actions>", "</predicted_actions>", "< Predicted_Actions >", "</ predicted_actions>",
          "<PREDICTED_ACTIONS>", "<", ">", "/", "eat", "Eat", "run", "walk  slowly", "e\u0301t\u00e9", "été", " ",
          ",", ";", "|", "\n", "，", "、", "；", "1. ", "12) ", "(3) ", "(x", "a) ", "B. ", "1x", '"', "*", "-", ".",
          "。", "\u3000", "\u00a0", "x", "predicted_actions", "</predicted_actions"]  # fmt: skip
CANDIDATES = ["eat", "Run", "walk slowly", "été"]


@pytest.mark.parametrize("seed", range(4))
def test_random_outputs_read_as_the_rule_says(seed):
    rng = np.random.default_rng(seed)
    for _ in range(2500):
        text = "".join(rng.choice(PIECES, size=int(rng.integers(0, 14))))
        cands = CANDIDATES if rng.random() < 0.5 else None
        assert parse_actions(text, cands) == reference(text, cands), (text, cands)


@pytest.mark.parametrize(
    "text,want",
    [
        ("ab</predicted_actions>", None),  # a closing tag alone is no answer
        ("x</predicted_actions>y", None),
        ("", None),
        ("<predicted_actions>", []),
        ("<predicted_actions>eat</predicted_actions>", ["eat"]),
        ("<predicted_actions>run</predicted_actions> <predicted_actions>eat</predicted_actions>", ["eat"]),
        ("<predicted_actions>eat</predicted_actions> then <b>", ["eat"]),
        ("<predicted_actions>eat</predicted_actions><", ["eat"]),
        ("<predicted_actions>(1) eat, (2) run</predicted_actions>", ["eat", "run"]),
        ("<predicted_actions>12) eat; b) run</predicted_actions>", ["eat", "run"]),
        ("<predicted_actions>eat, Eat, EAT</predicted_actions>", ["eat"]),
        ("<predicted_actions> eat <and> run", ["eat <and> run"]),
    ],
)
def test_the_cases_that_decide_the_fast_path(text, want):
    assert parse_actions(text) == want == reference(text)


def test_what_is_not_text_reads_as_no_answer():
    assert parse_actions(None) is None and parse_actions(b"<predicted_actions>eat") is None and parse_actions(3) is None


def test_a_label_the_parser_rewrites_is_refused_with_where_it_came_from():
    assert label_survives_parsing("walk slowly") and check_label("walk slowly") == "walk slowly"
    for bad, read in [("eat, run", "['eat', 'run']"), ("1. eat", "['eat']"), ("eat.", "['eat']"), ("", "[]")]:
        assert not label_survives_parsing(bad)
        with pytest.raises(UserError, match=re.escape(f"is read back by the answer parser as {read}")) as e:
            check_label(bad, "map.json", 3, "official")
        assert (e.value.path, e.value.line, e.value.field) == ("map.json", 3, "official")
    with pytest.raises(UserError, match="a label must be a string, got int"):
        check_label(7)
    assert not label_survives_parsing(None)


def test_a_label_map_checks_both_sides_and_maps_each_way():
    with pytest.raises(UserError) as e:
        LabelMap({"grooming": "groom, lick"}, path="m.json")
    assert e.value.field == "grooming" and e.value.path == "m.json"  # a bad value names its key
    with pytest.raises(UserError) as e:
        LabelMap({"a, b": "ab"}, path="m.json")
    assert e.value.field == "a, b"
    with pytest.raises(UserError, match="unknown label-map direction 'up'"):
        LabelMap({"a": "b"}, "up")
    m = {"Self-Grooming": "groom", "Walking Slowly": "walk"}
    to_simple, to_official = LabelMap(m), LabelMap(m, "to_official")
    assert to_simple("self-grooming") == "groom" and to_simple("WALK") == "walk" and to_simple("swim") is None
    assert to_simple("swim", strict=False) == "swim"
    assert to_official("Groom") == "Self-Grooming" and to_official("walking  slowly") == "Walking Slowly"
    assert to_official("swim") is None and to_official("swim", strict=False) == "swim"


def test_repeated_pairs_keep_their_first_places():
    rows, cols = np.array([0, 0, 1, 0, 1, 2, 2]), np.array([3, 1, 3, 3, 3, 0, 0])
    r, c = _dedup_pairs(rows, cols, 4)
    assert r.tolist() == [0, 0, 1, 2] and c.tolist() == [3, 1, 3, 0]
    r, c = _dedup_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), 4)
    assert r.dtype == np.int64 and r.shape == (0,) and c.shape == (0,)
    assert norm_label(" Walk\u00a0 SLOWLY ") == "walk slowly" and norm_label("e\u0301") == norm_label("é")
