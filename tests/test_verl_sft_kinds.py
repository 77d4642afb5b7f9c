"""`release verl-sft` on every kind of SFT release the chain writes: legacy (sft-export), native-tool trajectories
(trajectory-export) and their mixtures (mixture --family sft, sft-trajectory). The dataset class a launch names in
`data.custom_cls`, found by verl's own `load_extern_object`, reads every row of every split the launch points verl at
with the launch's tokenizer (a chat template written to Qwen3's rules); verl's stock `MultiTurnSFTDataset` cannot,
which is why no launch names it."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from verl_chain import verl_chain

from vtreetrm.cli import main
from vtreetrm.utils import read_json

pytest.importorskip("verl", reason="needs the optional verl extra")
pytestmark = pytest.mark.verl

QWEN3_RULES = Path(__file__).parent / "fixtures/qwen3_rules_chat_template.jinja"
# release folder under run/, and the kind verl-sft must find in it
RELEASES = {
    "legacy": ("legacy", "legacy"),
    "legacy-mixture": ("legacy-mix", "legacy"),
    "trajectory": ("traj", "trajectory"),
    "trajectory-mixture": ("traj-mix", "trajectory"),
}


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    "The chain's four SFT releases and a `verl-sft` dry-run launch of each: `{name: launch folder}`."
    from vtreetrm.release.mixture import mixture
    from vtreetrm.release.sft import sft_export

    t = tmp_path_factory.mktemp("sft-kinds")
    c = verl_chain(t)
    r, a = c.run, c.assets
    sft_export(r / "canonical/shougang/all.json", r / "legacy", progress=False, assets=a)
    for family, src, out in (("sft", "legacy", "legacy-mix"), ("sft-trajectory", "traj", "traj-mix")):
        mixture(
            family, [f"shougang={r}/{src}"], r / "grading-manifest.json", output_dir=r / out, progress=False, assets=a
        )
    (t / "model/chat_template.jinja").write_text(QWEN3_RULES.read_text())
    out = {}
    for name, (folder, kind) in RELEASES.items():
        out[name] = t / f"launch-{name}"
        smoke = ["--smoke"] if kind == "trajectory" else []  # mock thoughts launch only as a smoke; legacy has none
        argv = ["verl-sft", "--release", r / folder, "--model", t / "model", "--output-dir", out[name], *smoke]
        assert main(["release", *map(str, argv)]) == 0, name
    return out


def _assistant_blocks(tok, row) -> str:
    "What training on the assistant turns alone means, independent of the mask code: their blocks of the whole text."
    from vtreetrm.release.trajectory import _clean

    tools = _clean(row["tools"]) if row.get("tools") is not None else None
    whole = tok.apply_chat_template([_clean(m) for m in row["messages"]], tools=tools, tokenize=False)
    return "".join(b[len("assistant\n") :] for b in whole.split("<|im_start|>")[1:] if b.startswith("assistant\n"))


@pytest.mark.parametrize("name", RELEASES)
def test_launch_class_reads_every_row(launches, name):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
    from verl.utils.import_utils import load_extern_object

    from vtreetrm.release.launch import SFT_DATASETS

    out, kind = launches[name], RELEASES[name][1]
    rep = read_json(out / "launch_report.json")
    cfg = OmegaConf.load(out / "config.yaml")  # what the launch hands verl
    assert rep["release_kind"] == kind and rep["checks"]["custom_cls"] == ":".join(SFT_DATASETS[kind])
    assert f"data.custom_cls.name={cfg.data.custom_cls.name}" in (out / "command.sh").read_text()
    cls = load_extern_object(cfg.data.custom_cls.path, cfg.data.custom_cls.name)  # as verl's trainer finds it
    tok = AutoTokenizer.from_pretrained(cfg.model.path)
    assert "<think>" in tok.chat_template  # the model's own template, the Qwen3-style one
    for split in (cfg.data.train_files, cfg.data.val_files):
        rows = pq.read_table(split).to_pylist()
        ds = cls(split, tok, cfg.data)
        assert len(ds) == len(rows) > 0
        checked = set()
        for i, row in enumerate(rows):
            item = ds[i]  # verl's whole-conversation check runs inside
            ids, mask = item["input_ids"], item["loss_mask"].bool()
            assert mask.any(), (split, i)
            shape = row.get("trajectory_class") or row["stage"]
            if shape not in checked:  # the first row of each shape: the mask is the assistant turns, nothing else
                checked.add(shape)
                assert tok.decode(ids[mask]) == _assistant_blocks(tok, row), (split, i)
        assert len(checked) >= 2, checked
    # verl's stock class renders each message alone, which under this template is not the conversation: it refuses
    stock = MultiTurnSFTDataset(cfg.data.train_files, tok, cfg.data)
    with pytest.raises(AssertionError, match="each turn separately"):
        stock[0]
    assert not issubclass(MultiTurnSFTDataset, cls)  # so the launch never names it (nor a class it stands for)
