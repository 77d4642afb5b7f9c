"""The skill-evolution harness with a real pretrained LLM as agent and reflector, on 2 CPU cores.

    python benchmarks/real_harness.py [--quick] [--work DIR] [--out reports]

The LLM is SmolLM2-135M-Instruct as `vtreetrm models prepare` builds it (a 4-bit Q4_1 GGUF checkpoint of the instruct
model, dequantized to float32), run by the harness's transformers backend (greedy, 64 new tokens a turn of an episode,
256 a reflection: an edit list needs the room). Its chat
template prints message contents alone, so the tool schemas and the `<tool_call>` syntax reach it in the system
prompt (`release.chat.inline_tools`, the one fallback). The data is the synthetic benchmark (`harness
make-synthetic`: caption trees of synthetic videos and multiple-choice questions over them), embeddings hashed (no
sentence-transformers download). Each step is a CLI subprocess as a user would start it:

1. `harness infer` on the generated questions (`--n-samples`): the share of answers the parser read, tool calls and
   seconds per episode, accuracy;
2. `harness train` with the reference Action Recognition config, one epoch and small pools, the CE-Gate on: the
   gate's decisions, the reflector's replies and how many gave an edit (each reply is stored in the run's db), and
   the final test of the starting against the final skills and prompts.

Writes reports/real_harness.json (every figure and what produced them) and reports/real_harness.md, the table the
README shows. No gain is expected at this size and none is claimed: the gate is there to accept no edit whose gain is
within noise. `--quick` is a check of the plumbing (a few episodes; its summary says so and the README refuses it)."""

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
from learnability import cli, step
from report import begin, render_report, summary_parser, work_folder, write_report

LLM = "smollm2-135m-instruct"
SYN = dict(n_train_videos=12, n_test_videos=10, per_task=12, test_ar=20, test_other=3)  # the harness tests' SMALL
FULL = dict(infer_n=40, max_steps=4, test_size=10, val_size=4, diag_size=8, batch_size=4, synthetic=SYN)
QUICK = dict(infer_n=2, max_steps=2, test_size=2, val_size=2, diag_size=2, batch_size=2,
             synthetic=dict(n_train_videos=6, n_test_videos=6, per_task=4, test_ar=4, test_other=1))  # fmt: skip
COMMON = ["--backend", "transformers", "--model", LLM, "--concurrency", 1, "--quiet"]


def sets(*more) -> list:
    "The --set of every step: hashing embeddings, 64 new tokens an answer's turn, 256 a reflection's, and `more`."
    return ["--set", "embed.backend=hashing", "max_new_tokens=64", "reflect_max_new_tokens=256", *more]


def infer_figures(out: dict) -> dict:
    "What `harness infer` printed of its episodes."
    e = out["episodes"]
    return {
        "episodes": e["episodes"],
        "answered_share": e["answered_share"],
        "tool_calls_per_episode": e["tool_calls_per_episode"],
        "seconds_per_episode": e["seconds_per_episode"],
        "accuracy": out.get("accuracy"),
        "unanswered": out["unanswered"],
    }


def pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def markdown(f: dict) -> str:
    i, t = f["infer"], f["train"]
    e, g, r = t["episodes"], t["gate"], t["reflections"]
    dec = ", ".join(f"{k} {v}" for k, v in sorted(g["decisions"].items())) or "none"
    lines = [
        "| SmolLM2-135M-Instruct (4-bit GGUF, dequantized) as the harness's agent | episodes | answers parsed % | "
        "tool calls / episode | s / episode (median) | accuracy % |",
        "|---|---:|---:|---:|---:|---:|",
        f"| `harness infer`, generated questions | {i['episodes']} | {pct(i['answered_share'])} | "
        f"{i['tool_calls_per_episode']:.2f} | {i['seconds_per_episode']:.1f} | {pct(i['accuracy'])} |",
        f"| `harness train`, 1 epoch (every episode of the run) | {e['episodes']} | {pct(e['answered_share'])} | "
        f"{e['tool_calls_per_episode']:.2f} | {e['seconds_per_episode']:.1f} | – |",
        "",
        f"`harness train` (the CE-Gate on, one epoch, {f['plan']['batch_size']}-question mini-batches): gate "
        f"decisions {dec}; {r['model_replies']} reflector replies, {r['replies_with_edits']} of them with an edit the "
        f"parser read ({r['edits_proposed']} edits proposed); final test accuracy {pct(t['test']['baseline'])}% with "
        f"the starting skills and prompts, {pct(t['test']['final'])}% with the final ones, on "
        f"{t['test']['n']} questions. No gain is claimed at this size. An answer the parser cannot read is asked for "
        "again (up to the episode's turn limit), so an unanswered episode costs several generations: `harness infer` "
        f"took {f['wall_seconds']['infer']} s for its {i['episodes']} episodes, `harness train` "
        f"{f['wall_seconds']['train']} s.",
    ]
    return "\n".join(lines)


def main():
    ap = summary_parser("real_harness", __doc__, "a few episodes: the plumbing only")
    a = ap.parse_args()
    if a.render:
        return print(render_report("real_harness", markdown, a.out))
    plan = QUICK if a.quick else FULL
    pv = begin({**vars(a), **plan, "llm": LLM})
    t_start = time.time()
    with work_folder(a.work, "real_harness") as work:
        syn = work / "syn"
        step("prepare", cli("models", "prepare", LLM), work / "prepare.log", t_start)
        if not (syn / "synthetic.json").exists():
            from vtreetrm.harness.synthetic import make_synthetic

            make_synthetic(syn, **plan["synthetic"])
        print(f"[{time.time() - t_start:6.0f} s] start harness infer", flush=True)
        t0 = time.time()
        argv = cli("harness", "infer", "--store-dir", syn / "store", "--workspace-dir", work / "infer", "--run-id",
                   "real", "--n-samples", plan["infer_n"], "--max-steps", plan["max_steps"], *COMMON, *sets())  # fmt: skip
        p = subprocess.run(argv, capture_output=True, text=True, cwd=syn)
        (work / "infer.log").write_text(p.stdout + p.stderr)
        if p.returncode:
            sys.exit(f"harness infer failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
        infer = infer_figures(json.loads(p.stdout))
        wall = {"infer": round(time.time() - t0)}
        print(f"[{time.time() - t_start:6.0f} s] done  harness infer", flush=True)
        ws = syn / "workspaces/real-train"
        keys = ("test_size", "val_size", "diag_size", "batch_size")
        wall["train"] = step("harness train", cli("harness", "train", "--config", syn / "config/train_action_recognition.yaml",
                                  "--store-dir", syn / "store", "--test-questions", syn / "benchmarks/Video-MME",
                                  "--workspace-dir", ws, "--run-id", "real",
                                  "--epochs", 1, "--max-steps", plan["max_steps"], "--fresh", *COMMON,
                                  *sets(*(f"{k}={plan[k]}" for k in keys), f"momentum_samples={plan['batch_size']}")),
             work / "train.log", t_start)  # fmt: skip
        fin = json.loads((ws / "analyses/final_test_eval.json").read_text())
        test = {"baseline": fin["baseline"].get("accuracy"), "final": fin["final"].get("accuracy"),
                "n": fin["final"].get("n")}  # fmt: skip
        figures = {
            "model": LLM,
            "plan": plan,
            "synthetic": plan["synthetic"],
            "infer": infer,
            "train": {
                "episodes": fin["episodes"],
                "gate": fin["gate"],
                "reflections": fin["reflections"],
                "test": test,
                "pools": fin["pools"],
            },
            "wall_seconds": {"infer": wall["infer"], "train": round(wall["train"])},
        }
        print(json.dumps(figures, indent=1, ensure_ascii=False))
        write_report("real_harness", figures, markdown(figures), pv, time.time() - t_start, a.quick, a.out)


if __name__ == "__main__":
    main()
