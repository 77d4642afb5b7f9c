"""`vtreetrm harness build-trees` end to end: synthetic videos encoded with PyAV, the simulated captioner, an
OpenAI-compatible stub (faults, retries), a tiny transformers image-text-to-text captioner built from a config,
bad inputs, and a build killed mid-video that resumes."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from vtreetrm.cli import main
from vtreetrm.harness.agent import CaptionTree
from vtreetrm.harness.stub import StubServer
from vtreetrm.video.synthetic import SPECIES, render_frames, write_mp4

SMALL = ["--clips", "3", "--segments-per-clip", "2", "--frames-per-segment", "2", "--fps", "2", "--quiet"]


def scene_video(path, scenes, secs=4, fps=8, size=64):
    rng = np.random.default_rng(len(scenes))
    return write_mp4(
        path,
        np.concatenate(
            [
                render_frames([(*SPECIES[sp], "right")], env, n_frames=secs * fps, size=size, rng=rng)
                for env, sp in scenes
            ]
        ),
        fps=fps,
    )


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    d = tmp_path_factory.mktemp("videos")
    scene_video(d / "forest_snow.mp4", [("forest", "giant panda"), ("snow", "takin")])
    scene_video(d / "night.mp4", [("night", "golden monkey")])
    return d


def run(*argv):
    return main(["harness", "build-trees", *map(str, argv)])


def test_build_trees_simulated_then_kept(videos, tmp_path, capsys):
    rc = run("--videos", videos, "--out", tmp_path / "store/trees", "--captioner", "simulated", *SMALL)
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["counts"] == {"built": 2, "kept": 0, "failed": 0} and out["captions_made"] > 0
    t = CaptionTree.load(tmp_path / "store/trees/forest_snow.json")  # the agent's loader accepts it
    assert [(c["start"], c["end"]) for c in t.data["clips"]] == [(0.0, 4.0), (4.0, 8.0)]
    assert "green" in t.read_captions("c0")["captions"][0] and "white" in t.read_captions("c1")["captions"][0]
    assert all(s["keyframes"] == [c["t"] for c in s["captions"]] for c in t.data["clips"] for s in c["segments"])
    assert t.search_captions("white scene", k=1)["hits"][0]["node_id"].startswith("c1")
    rep = json.loads((tmp_path / "store/trees/trees_build_report.json").read_text())
    assert rep["frames_embedded"] == 16 + 8 and rep["provenance"]["params"]["captioner"]["kind"] == "simulated"
    rc = run("--videos", videos, "--out", tmp_path / "store/trees", "--captioner", "simulated", *SMALL)
    assert rc == 0 and json.loads(capsys.readouterr().out)["counts"]["kept"] == 2


def test_bad_videos_are_listed_and_the_rest_built(videos, tmp_path, capsys):
    d = tmp_path / "v"
    d.mkdir()
    (d / "good.mp4").write_bytes((videos / "night.mp4").read_bytes())
    (d / "broken.mp4").write_bytes(b"\x00" * 64)
    import av

    with av.open(str(d / "empty.mp4"), "w") as c:  # a container with no frame in it
        st = c.add_stream("mpeg4", rate=8)
        st.width = st.height = 64
        st.pix_fmt = "yuv420p"
        c.start_encoding()
    lst = tmp_path / "list.txt"
    lst.write_text(f"{d / 'good.mp4'}\n{d / 'broken.mp4'}\nempty\t{d / 'empty.mp4'}\nmissing\t{d / 'nope.mp4'}\n")
    rc = run("--videos", lst, "--out", tmp_path / "trees", "--captioner", "simulated", *SMALL)
    cap = capsys.readouterr()
    assert rc == 1 and json.loads(cap.out)["counts"] == {"built": 1, "kept": 0, "failed": 3}
    lines = [l for l in cap.err.splitlines() if l.startswith("failed: ")]
    assert any("broken" in l and "cannot decode" in l for l in lines) and any(
        "empty" in l and ("no decodable frame" in l or "no video stream" in l) for l in lines
    )
    assert any("missing" in l and "not found" in l for l in lines) and "Traceback" not in cap.err
    assert sorted(p.name for p in (tmp_path / "trees").iterdir()) == ["good.json", "trees_build_report.json"]
    lst.write_text(f"../escape\t{d / 'good.mp4'}\n")
    assert run("--videos", lst, "--out", tmp_path / "trees", "--captioner", "simulated") == 2
    assert "list.txt:1: field 'video_id'" in capsys.readouterr().err
    assert run("--videos", d, "--out", tmp_path / "t2") == 2 and "no captioner named" in capsys.readouterr().err


def test_openai_captioner_retries_faults_and_resumes(videos, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = ["--videos", videos, "--out", tmp_path / "trees", "--captioner", "openai", "--model", "stub", *SMALL]
    with StubServer(fail_500_every=1) as s:  # the endpoint is down: each video fails after its retries
        assert run(*args, "--base-url", s.url, "--max-retries", "1") == 1
    assert "HTTP 500" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "trees").iterdir()] == ["trees_build_report.json"]  # no tree
    # non-JSON bodies and 429s are retried: each distinct request's first arrival is the one that can fault, so every
    # request meets at most one fault whatever order the requests in flight arrive in
    with StubServer(garbage_every=3, fail_429_every=5, faults_per_request=True) as s:
        assert run(*args, "--base-url", s.url) == 0
        st = s.stats
        assert st["ok"] > 0 and st["faults"] > 0 and st["requests"] == st["ok"] + st["faults"]  # each fault retried
    t = json.loads((tmp_path / "trees/night.json").read_text())
    assert t["clips"][0]["segments"][0]["captions"][0]["text"].startswith("A frame whose image hash is")
    assert t["clips"][0]["summary"].startswith("Summary: ") and t["source"]["captioner"]["model"] == "stub"


def test_killed_build_resumes_from_cached_captions(videos, tmp_path):
    "Killed after its first tree: that tree is whole, no other is half-written, and the next run reuses the captions made before the kill."
    with StubServer(latency_s=0.15) as s:
        cmd = [
            sys.executable,
            "-c",
            "from vtreetrm.cli import console_main; console_main()",
            "harness",
            "build-trees",
            "--videos",
            str(videos),
            "--out",
            str(tmp_path / "trees"),
            "--captioner",
            "openai",
            "--model",
            "stub",
            "--base-url",
            s.url,
            "--jobs",
            "1",
            *SMALL,
        ]
        p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        caps, trees = tmp_path / ".cache/captions", tmp_path / "trees"
        deadline = time.time() + 120
        while time.time() < deadline and not list(trees.glob("*.json")):  # killed once the first tree is written
            time.sleep(0.02)
        assert p.poll() is None, p.communicate()[1][-2000:]  # still running when killed
        p.send_signal(signal.SIGKILL)
        p.wait()
        # the one tree written, whole, and nothing else: no temporary file, no other tree begun, no build report
        killed = {f.name: f.read_bytes() for f in sorted(trees.iterdir())}
        assert set(killed) in ({"night.json"}, {"forest_snow.json"}), sorted(killed)
        made = len(list(caps.rglob("*.json")))
        assert made >= 3
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["counts"]["failed"] == 0 and out["captions_cached"] > 0
    assert out["captions_made"] == len(list(caps.rglob("*.json"))) - made  # none made before the kill was made again
    assert out["counts"]["kept"] == len(killed)  # each tree there after the kill was whole: the next build keeps it
    for name, data in killed.items():
        assert json.loads(data) == json.loads((trees / name).read_text()), name


def test_transformers_captioner_tiny_llava(videos, tmp_path, capsys):
    "A LLaVA-shaped image-text-to-text model built from a config (CLIP vision tower, Llama text model, its processor)."
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    special = ["<|endoftext|>", "<image>", "<|im_start|>", "<|im_end|>"]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(
        ["Describe what is visible in this video frame: a panda walks in the forest."] * 20,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": "<image>"},
    )
    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.content %}{% if c.type == 'image' %}<image>"
        "{% else %}{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    proc = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy="default",
        chat_template=template,
        num_additional_image_tokens=1,
    )
    torch.manual_seed(0)
    cfg = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        text_config=LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        ),
        image_token_index=tok.convert_tokens_to_ids("<image>"),
    )
    LlavaForConditionalGeneration(cfg).save_pretrained(tmp_path / "llava")
    proc.save_pretrained(tmp_path / "llava")
    rc = run(
        "--videos",
        videos,
        "--out",
        tmp_path / "trees",
        "--captioner",
        "transformers",
        "--model",
        tmp_path / "llava",
        *SMALL,
    )
    assert rc == 0, capsys.readouterr().err
    t = json.loads((tmp_path / "trees/night.json").read_text())
    caps = [c for cl in t["clips"] for s in cl["segments"] for c in s["captions"]]
    assert caps and all(isinstance(c["text"], str) for c in caps) and t["source"]["captioner"]["kind"] == "transformers"


class SlowCaptioner:
    """The simulated captioner's texts after a random delay, counting the requests in flight (its peak is `most`).
    With `fill`, the first requests are held until `fill` are in flight at once (or `timeout` s passed, after which
    none is held): a scheduler that can keep `fill` requests in flight reaches that peak however busy the machine."""

    def __init__(self, seed: int, delay: float, fill: int = 0, timeout: float = 10.0):
        from vtreetrm.harness.trees import SimulatedCaptioner

        self.sim, self.identity, self.delay = SimulatedCaptioner(), SimulatedCaptioner.identity, delay
        self.rng, self.now, self.most = np.random.default_rng(seed), 0, 0
        self.fill, self.timeout, self.full = fill, timeout, None

    async def _wait(self):
        import asyncio

        self.now += 1
        self.most = max(self.most, self.now)
        if self.fill:
            self.full = self.full or asyncio.Event()
            if self.now >= self.fill:
                self.full.set()
            try:
                await asyncio.wait_for(self.full.wait(), self.timeout)
            except TimeoutError:
                self.full.set()  # the peak was not reached: the rest go on unheld, and `most` says how far it got
        await asyncio.sleep(self.delay * self.rng.random())
        self.now -= 1

    async def caption(self, image):
        await self._wait()
        return await self.sim.caption(image)

    async def summarize(self, captions):
        await self._wait()
        return await self.sim.summarize(captions)


def test_trees_identical_whatever_the_requests_order(videos, tmp_path):
    "One request at a time with no delay, or 6 in flight answered in random order: the same tree bytes; the limit is reached."
    from vtreetrm.harness.config import BuildOptions, FrameSampling, TreeParams
    from vtreetrm.harness.trees import build_trees

    p = dict(clips=3, segments_per_clip=2, frames_per_segment=2)
    fr = FrameSampling(fps=4)
    slow = SlowCaptioner(seed=1, delay=0.05, fill=6)
    for name, cap, jobs in (("one", SlowCaptioner(0, 0.0), 1), ("many", slow, 6)):
        rep = build_trees(videos, tmp_path / name, cap, TreeParams(**p, jobs=jobs), fr, BuildOptions(cache_dir=tmp_path / f"c-{name}"), progress=False)  # fmt: skip
        assert rep["counts"]["built"] == 2, rep
    assert slow.most == 6  # the requests of both videos, captions and summaries, fill every slot
    for v in ("forest_snow.json", "night.json"):
        one, many = ((tmp_path / d / v).read_text() for d in ("one", "many"))
        assert one == many.replace('"jobs": 6', '"jobs": 1')  # the same bytes but the jobs setting they record


@pytest.fixture(scope="module")
def scene_videos(tmp_path_factory):
    "Videos of 3 to 5 scenes, so that the clustering picks between several cuts."
    d = tmp_path_factory.mktemp("scenes")
    envs, sps = ["forest", "snow", "night", "forest", "snow"], list(SPECIES)
    for i, n in enumerate((3, 4, 5)):
        scene_video(d / f"s{n}.mp4", [(envs[(k + i) % 5], sps[(k + 2 * i) % len(sps)]) for k in range(n)], secs=6)
    return d


def tree_digests(trees):
    "sha256 of each tree's bytes, its source path (a temporary folder) replaced by the file's name."
    import hashlib

    out = {}
    for f in sorted(trees.glob("s*.json")):
        t = json.loads(f.read_text())
        t["source"]["path"] = os.path.basename(t["source"]["path"])
        out[f.name] = hashlib.sha256(json.dumps(t, indent=1, ensure_ascii=False).encode()).hexdigest()[:16]
    return out


PINNED_TREES = {"s3.json": "fcfdc1e7046f525f", "s4.json": "1e590f010a0256dd", "s5.json": "17758493ab2c5a0a"}


def test_tree_bytes_pinned(scene_videos, tmp_path):
    "The trees of fixed videos (simulated captioner, default cuts) keep their bytes: scheduling and clustering changes must not move them."
    from vtreetrm.harness.config import BuildOptions, FrameSampling, TreeParams
    from vtreetrm.harness.trees import build_trees

    rep = build_trees(scene_videos, tmp_path / "t", SlowCaptioner(2, 0.01), TreeParams(), FrameSampling(fps=2), BuildOptions(cache_dir=tmp_path / "c"), progress=False)  # fmt: skip
    assert rep["counts"]["built"] == 3, rep
    clips = {f.name: len(json.loads(f.read_text())["clips"]) for f in sorted((tmp_path / "t").glob("s*.json"))}
    assert clips == {"s3.json": 3, "s4.json": 4, "s5.json": 5}  # a clip per scene, cut where the scene changes
    assert tree_digests(tmp_path / "t") == PINNED_TREES


class WaitsForOthers:
    "The simulated captions, each answered only once what a build without barriers would have asked for first was asked."

    def __init__(self, timeout: float = 10.0):
        import asyncio

        from vtreetrm.harness.trees import SimulatedCaptioner

        self.sim, self.identity, self.timeout = SimulatedCaptioner(), SimulatedCaptioner.identity, timeout
        self.summarised, self.night_seen = asyncio.Event(), asyncio.Event()

    async def _after(self, event, what):
        import asyncio

        try:
            await asyncio.wait_for(event.wait(), self.timeout)
        except asyncio.TimeoutError:
            raise AssertionError(
                f"a caption waited {self.timeout} s for {what}: the scheduling has a barrier"
            ) from None

    async def caption(self, image):
        text = await self.sim.caption(image)
        light, background = text.split()[1:3]  # "A {light} {background} scene ..."
        if light == "dark":
            self.night_seen.set()
        elif (
            background == "white"
        ):  # forest_snow's last scene: the forest clip's summary is asked for before it is answered
            await self._after(self.summarised, "the first clip's summary")
        elif background == "green":  # forest_snow's first scene: the other video is being captioned at the same time
            await self._after(self.night_seen, "the other video's captions")
        return text

    async def summarize(self, captions):
        if any(c.split()[2] == "green" for c in captions):  # forest_snow's first clip
            self.summarised.set()
        return await self.sim.summarize(captions)


def test_no_barrier_between_clips_or_videos(videos, tmp_path):
    "A clip is summarised before its video's later clips are captioned, and two videos are captioned at once: a build that waits for a whole video's captions, or for one video before the next, fails here."
    from vtreetrm.harness.config import BuildOptions, FrameSampling, TreeParams
    from vtreetrm.harness.trees import build_trees

    p = TreeParams(clips=3, segments_per_clip=2, frames_per_segment=2, jobs=32)  # waiting requests fill no slot limit
    rep = build_trees(videos, tmp_path / "t", WaitsForOthers(), p, FrameSampling(fps=4), BuildOptions(cache_dir=tmp_path / "c"), progress=False)  # fmt: skip
    assert rep["counts"]["built"] == 2, rep
    ref = build_trees(videos, tmp_path / "r", SlowCaptioner(0, 0.0), p, FrameSampling(fps=4), BuildOptions(cache_dir=tmp_path / "c2"), progress=False)  # fmt: skip
    assert ref["counts"]["built"] == 2
    for v in ("forest_snow.json", "night.json"):
        assert (tmp_path / "t" / v).read_text() == (tmp_path / "r" / v).read_text().replace(
            str(tmp_path / "r"), str(tmp_path / "t")
        )
