"""The release chain's data files, byte for byte: sha256 of every parquet and data JSON file of a fixed synthetic chain.

A speed change to an export, validator or mixture must leave its output unchanged. Reports (`*_report.json`,
`validation.json`, the audit) carry provenance, timings and absolute paths, so they are left out; the records' absolute source
path is replaced by `<ROOT>` before hashing. Parquet files are pinned twice: their bytes (which also name the writer's
pyarrow version, so they are compared only under the pyarrow that pinned them) and their rows as JSON (compared always).

Re-pin, after checking a change of output is intended: `python tests/test_release_bytes.py` prints both tables.
"""

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from vtreetrm.cli import main  # noqa: E402
from vtreetrm.release.assets import write_grading_manifest  # noqa: E402
from vtreetrm.release.cli import chain_commands  # noqa: E402

RECORDS = 2000
PINNED_PYARROW = "26.0.1"

# fmt: off
FILE_SHA256 = {
    "run/canonical/shougang/all.json": "67ddde71a3eea3b9160b75454520b1b42c2eb26b722575e130976e928ef485d6",
    "run/grading-manifest.json": "bd06522ed77ae2a3e265135f23720fb96699fef9ab270d7ee7fcdbee96dbb7c2",
    "run/grading.json": "ddf44272b3c12b68486914036233671d7857ffc598628ddb889f9b5575aac9ed",
    "run/processed/shougang/all.json": "854fb3532ee81b0a218e8dd1eb479273123bfd91dddb04ef091c8344188d065d",
    "run/releases/rl/shougang/grading/grading-manifest.json": "1fff5df48e0155682e309784c84e30ee278e6473c8ce28406eab72f581855704",
    "run/releases/rl/shougang/grading/shougang.grading.json": "ddf44272b3c12b68486914036233671d7857ffc598628ddb889f9b5575aac9ed",
    "run/releases/rl/shougang/test.parquet": "ba7eda3af43c6e1bd396d76a51f31967377a0fa61c46836f74444dcfb323e64e",
    "run/releases/rl/shougang/train.parquet": "1270c4193eeaf1777836773f5b271cb6ac0270ff5acce3c46810f08e58c88402",
    "run/releases/rl/shougang/val.parquet": "7c109ab7e38282d3974374ef32ea2a81c78b00eb4ae236582f5be38374679d63",
    "run/releases/rl/source/shougang/test.parquet": "5fbf52943cf9d4e7b06ccb84da917f1f05cfdadebb3b6d5bf85c218e0d851868",
    "run/releases/rl/source/shougang/train.parquet": "73298fde09f1f827ecb9c8e7c0e5a9bf533976ad1d7f08bf3f0ada25e670b4ab",
    "run/releases/rl/source/shougang/val.parquet": "347b52fb24eeb0be91f946c4d38306783db0ead7e4d3bd9e7f8082a73c4d8de8",
    "run/releases/sft-legacy/shougang/test.parquet": "fbf43fa89acf211df5bd895aaf235dfa141afa7f0f1a7290ed39c69d6aa679a9",
    "run/releases/sft-legacy/shougang/train.parquet": "b2c5c14aca7ce624760345d750a8871a531ee62a25c70b14ef8045a2248ee170",
    "run/releases/sft-legacy/shougang/val.parquet": "c4d57897b3d785c77810f1188af25802d1da690a840ee40f87313f8bc6b069f3",
    "run/releases/sft-legacy/standardized/grading/grading-manifest.json": "1fff5df48e0155682e309784c84e30ee278e6473c8ce28406eab72f581855704",
    "run/releases/sft-legacy/standardized/grading/shougang.grading.json": "ddf44272b3c12b68486914036233671d7857ffc598628ddb889f9b5575aac9ed",
    "run/releases/sft-legacy/standardized/test.parquet": "9427f76bc92ac23fc0d408626de017e933060ecbdd20e30e8968567f405199da",
    "run/releases/sft-legacy/standardized/train.parquet": "7c1f80be19c508db26925dd18de3249f8647ec30df218f2ab9f64be39bcb3d5a",
    "run/releases/sft-legacy/standardized/val.parquet": "687d394d0f244491c1056908ad610eb37916130772fd04f50fbc007cbdd851de",
    "run/releases/sft-trajectory/shougang/test.parquet": "37ce8d6545017fa463d52fafa1f03c918bce54744abe92e03f8ad057238b9e70",
    "run/releases/sft-trajectory/shougang/train.parquet": "61a2f4ad02cdd61d6c77913bbeeaf850819464ff048760a7c1e3dbc8886bb153",
    "run/releases/sft-trajectory/shougang/val.parquet": "93cb780e1876d898aa68d7b31847b6b4428f5d82ac9464215f62967f26754743",
    "syn/ASSETS/corpora/shougang.corpus.json": "be28b5f79afb2b7e8ebe87696cd00d03fa90f0d405bcc5ee11eb0b552fdffb0d",
    "syn/ASSETS/mappings/shougang.mapping.json": "8b9cd70864a8d195194efd2aedf9de74634ba7209ed0f52c03feb34720c8b893",
    "syn/ASSETS/registries/shougang.registry.json": "8541c7339a6eb7d47144378d5c80dbaa17691402003ab53ea86034d66e45659d",
    "syn/CFG/datasets.json": "bbc1d9b1dcd55a183c1093a9ce6f68f3f2e3f04920aed20a2b00f6e060c5b63e",
    "syn/CFG/shougang.task.json": "3abb7e0729248ae19c9cb32522299250d42f12d0742a5ffaf4dc6016aeb9d265",
    "syn/RAW/shougang.xlsx": "4221fe53519df09c370f0673c90e7f40e1568142d05c67b2a570b77f080cf08a",
    "syn/STANDARDS/shougang.classification.json": "161242ac6713e4b40b0bb46cb3692d9a06574f1943aab893790315b52367aa18",
    "syn/STANDARDS/shougang.grading.json": "ddf44272b3c12b68486914036233671d7857ffc598628ddb889f9b5575aac9ed",
}
ROWS_SHA256 = {
    "run/releases/rl/shougang/test.parquet": "4c7b68c4b4452e63157463f3eb9fefc6027cf88154fa3dfdfc7a4dc269267c94",
    "run/releases/rl/shougang/train.parquet": "6587776a9503bc8b95d5d23db9bd9184d119fac0b626eea8a91d37dda34e8d23",
    "run/releases/rl/shougang/val.parquet": "8e5f1981a53be92d1ecad099029f002517e9786dbbde7519050d62359b91f61b",
    "run/releases/rl/source/shougang/test.parquet": "fca4400040c3a2f846715cdba2f21de59ff4adc6ffdaf22a923b89719a329316",
    "run/releases/rl/source/shougang/train.parquet": "99150b94c7835d2e254681a9c6fa32e25824daf726ba57ad6a4ca36f35d5173e",
    "run/releases/rl/source/shougang/val.parquet": "03dbbfb877209e6952241c6025a6408657ed23608ecded7db4662ee127d55054",
    "run/releases/sft-legacy/shougang/test.parquet": "8b8b98d2f809d767d7fd482069e9a01d0163d6d248963d0a6f579ed433c80b93",
    "run/releases/sft-legacy/shougang/train.parquet": "8ef26d552bd49d517bccad70857dc8d5209cb643df3423f4e6554d632699a7b9",
    "run/releases/sft-legacy/shougang/val.parquet": "3e478eaa56aae2f089a4043d4627edc89edced986d157da755b322963d5dee1f",
    "run/releases/sft-legacy/standardized/test.parquet": "d9ee6d2804b06b2b60a9b7d52725c5863d93a394b1d9cb3e751f705e73a2cc44",
    "run/releases/sft-legacy/standardized/train.parquet": "51dc1ecc84297fe99534129755def4618ac42d4d5aa41c78cbbb44927af7602a",
    "run/releases/sft-legacy/standardized/val.parquet": "628ad28eb0c2105602c9f865b8c44b996e60cb42b8acc513f0d17b24674b5592",
    "run/releases/sft-trajectory/shougang/test.parquet": "175d919cdeb01202d1e9cad03ba62509142c558762fba5206b4f0df52fa2c3d5",
    "run/releases/sft-trajectory/shougang/train.parquet": "39abf96880984131e3df882da9b2ceadaea5f009bc36aceec6f3077858599e1a",
    "run/releases/sft-trajectory/shougang/val.parquet": "412c7c9e3dc89e2f4d68472d929bcfb7a6cfa3b671eb9ed55f619d6d8e930343",
}
# fmt: on


def run_chain(root: Path) -> Path:
    "Every step of `chain_commands` (trajectories included) on `RECORDS` synthetic records under `root`."
    syn, run = root / "syn", root / "run"
    for name, argv in chain_commands(syn, run, RECORDS).items():
        if name == "mixture-sft":
            run.mkdir(parents=True, exist_ok=True)
            shutil.copy(syn / "STANDARDS/shougang.grading.json", run / "grading.json")
            write_grading_manifest(run / "grading-manifest.json", {"shougang": "grading.json"})
        assert main(["release", *map(str, argv), "--no-progress"]) == 0, name
    return root


def data_files(root: Path) -> list:
    "The chain's data files under `root`: everything but reports and publication markers."
    skip = ("_report.json", "validation.json", ".vtreetrm-published")
    files = (p for p in root.rglob("*") if p.is_file() and not p.name.endswith(skip))
    return sorted(p for p in files if p.parent.name != "audits")


def file_digests(root: Path) -> dict:
    "`{relative path: sha256}` of every data file, `root` replaced by `<ROOT>` in JSON files."
    out = {}
    for p in data_files(root):
        b = p.read_bytes()
        if p.suffix == ".json":
            b = b.replace(str(root).encode(), b"<ROOT>")
        out[str(p.relative_to(root))] = hashlib.sha256(b).hexdigest()
    return out


def rows_digests(root: Path) -> dict:
    "`{relative path: sha256}` of every parquet file's schema and rows as JSON."
    out = {}
    for p in data_files(root):
        if p.suffix == ".parquet":
            t = pq.read_table(p)
            h = hashlib.sha256(str(t.schema.remove_metadata()).encode())
            for row in t.to_pylist():
                h.update(json.dumps(row, ensure_ascii=False, sort_keys=True).encode() + b"\n")
            out[str(p.relative_to(root))] = h.hexdigest()
    return out


def test_release_chain_bytes_unchanged(tmp_path):
    root = run_chain(tmp_path)
    rows = rows_digests(root)
    assert set(rows) == set(ROWS_SHA256)
    assert {k: v for k, v in rows.items() if ROWS_SHA256[k] != v} == {}
    if pa.__version__ == PINNED_PYARROW:  # parquet bytes name the writer's version
        files = file_digests(root)
        assert set(files) == set(FILE_SHA256)
        assert {k: v for k, v in files.items() if FILE_SHA256[k] != v} == {}


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as t:
        root = run_chain(Path(t))
        print(f"# pyarrow {pa.__version__}")
        for name, d in (("FILE_SHA256", file_digests(root)), ("ROWS_SHA256", rows_digests(root))):
            print(f"{name} = {{")
            for k, v in d.items():
                print(f'    "{k}": "{v}",')
            print("}")
