"""The release chain's launches on a real pretrained LLM, on 2 CPU cores: verl's SFT trainer, verl's merger, the live
rollout gate and the RL launch, each a CLI subprocess as a user would start it.

    python benchmarks/real_release.py [--quick] [--work DIR] [--out reports] [--steps 24] [--gate-n 16]

The LLM is SmolLM2-135M-Instruct as `vtreetrm models prepare` builds it (a 4-bit Q4_1 GGUF checkpoint of the instruct
model, dequantized to float32). Its chat template prints message contents alone, so every step shows it the tools
the way `release.chat.inline_tools` writes them (`--tool-format auto` resolves to `inline`):

1. the synthetic chain (tests/verl_chain.py: `--records` field records) with its native-tool trajectory release, the
   thoughts filled as a reviewed generator would (a formal SFT, not a smoke), and its rl-cascade release;
2. `release verl-sft --device cpu --no-dry-run --model <prepared folder>` for `--steps` steps of 2 conversations
   (verl's FSDP2 engine, float32 weights, bfloat16 compute); each step's loss from verl's console logger, and the
   seconds between the first and the last step's log line (start-up, the final validation and the checkpoint left
   out) give the steps per second;
3. `release verl-merge` of the last checkpoint (verl's merger writes bfloat16: the report says so);
4. `release rollout-gate` live on the untuned model and on the merged one, over the same `--gate-n` episodes of the
   rl-cascade release's val split (greedy, 3 turns, 96 new tokens a turn): the pass rate as it is, and the first
   replies each model wrote;
5. the release's audit, then `release verl-rl` (dry run) on the merged model with its gate: verl's own
   `validate_config` on the composed PPO config, or the launch's one-line refusal (a gate that failed is refused).

Writes reports/real_release.json (every figure and what produced them) and reports/real_release.md, the table the
README shows. `--quick` is a check of the plumbing (2 steps, 2 episodes; its summary says so and the README refuses
it). No gain is claimed: a 135M model tuned for a few dozen steps on CPU is not expected to pass the gate."""

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from learnability import cli, run_step, step
from report import begin, render_report, summary_parser, work_folder, write_report

from vtreetrm.models.prepare import model_path

LLM = "smollm2-135m-instruct"
THINK = "依据字段描述与表名选定类别。"  # the filled thought of every turn (tests/test_verl_trainer.py's)
FULL = dict(steps=24, gate_n=16, records=400, max_new_tokens=96)
QUICK = dict(steps=2, gate_n=2, records=80, max_new_tokens=16)
REPLIES = 3  # replies of each model kept in the summary
REPLY_CHARS = 300


def sft_extra(steps: int, lr: float) -> list:
    "verl overrides of the SFT run: `steps` steps of 2 conversations, one checkpoint at the end, a small final validation."
    return [f"trainer.total_training_steps={steps}", f"trainer.save_freq={steps}", "trainer.test_freq=-1",
            "trainer.total_epochs=1000", "data.train_batch_size=2", "data.micro_batch_size_per_gpu=2",
            "data.val_max_samples=4", f"optim.lr={lr}", "optim.lr_scheduler_type=constant"]  # fmt: skip


def timed_sft(argv: list, log: Path, t_start: float, env: dict) -> dict:
    "Run verl-sft, stamping each `step:N` line of verl's console logger as it arrives: losses, tokens and step times."
    print(f"[{time.time() - t_start:6.0f} s] start verl-sft", flush=True)
    t0, stamps, losses, tokens = time.time(), {}, {}, {}
    with open(log, "w") as f:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1)
        for line in p.stdout:
            f.write(line)
            for s, body in re.findall(r"step:(\d+) - (.*)", line):
                stamps.setdefault(int(s), time.time())
                if m := re.search(r"train/loss:(\S+)", body):
                    losses[int(s)] = float(m.group(1))
                if m := re.search(r"train/global_tokens:(\d+)", body):
                    tokens[int(s)] = int(m.group(1))
        rc = p.wait()
    if rc:
        sys.exit(f"verl-sft failed (exit {rc}): {' '.join(map(str, argv))}\n{log.read_text()[-3000:]}")
    first, last = min(stamps), max(stamps)
    timed = (stamps[last] - stamps[first]) / (last - first) if last > first else None
    print(f"[{time.time() - t_start:6.0f} s] done  verl-sft ({time.time() - t0:.0f} s)", flush=True)
    return {
        "losses": [losses[k] for k in sorted(losses)],
        "tokens_per_step": statistics.median(tokens.values()) if tokens else None,
        "seconds_per_step": timed,
        "steps_per_second": 1 / timed if timed else None,
        "wall_seconds": round(time.time() - t0),
    }


def gate_figures(report: Path, wall: float) -> dict:
    "What a rollout gate report says, its first replies cut to REPLY_CHARS, and the command's wall seconds per episode."
    g = json.loads(report.read_text())
    keys = ("status", "denominator", "nonzero_reward_rate", "answer_parsed_rate", "tool_call_rate", "likely_cause")
    eps = g.get("episodes") or []
    replies = [e["reply"][:REPLY_CHARS] for e in eps if isinstance(e.get("reply"), str)][:REPLIES]
    return {**{k: g.get(k) for k in keys}, "tool_format": g["agent_loop"].get("tool_format"),
            "model_sha256": g["model"]["sha256"], "seconds_per_episode": wall / max(g["denominator"], 1),
            "replies": replies}  # fmt: skip


def last_line(log: Path, work: Path) -> str:
    "The log's last line, the run folder's path written as WORK."
    lines = [x for x in log.read_text().splitlines() if x.strip()]
    return lines[-1][:400].replace(str(work), "WORK") if lines else ""


def shown(reply: str) -> str:
    "A reply as one Markdown code span: escapes visible, no backtick to end it early."
    return "`" + json.dumps(reply, ensure_ascii=False)[1:-1][:120].replace("`", "'") + "`"


def markdown(f: dict) -> str:
    s, g, m, rl = f["sft"], f["gate"], f["merge"], f["rl_launch"]
    ls = s["losses"]

    def gate_row(name: str, x: dict) -> str:
        return (f"| {name} | {x['denominator']} | {100 * x['nonzero_reward_rate']:.1f} | "
                f"{100 * x['answer_parsed_rate']:.1f} | {100 * x['tool_call_rate']:.1f} | "
                f"{x['seconds_per_episode']:.1f} | {x['status']} |")  # fmt: skip

    lines = [
        f"SmolLM2-135M-Instruct (4-bit GGUF, dequantized) through the release chain's launches on {f['cpus']} CPU "
        f"cores, its chat template shown the tools inline (`--tool-format {f['tool_format']}`). verl's SFT trainer: "
        f"{len(ls)} steps of 2 conversations ({s['tokens_per_step']:.0f} tokens a step), loss {ls[0]:.2f} at the "
        f"first step, {ls[-1]:.2f} at the last (mean of the last 3 {statistics.mean(ls[-3:]):.2f} against "
        f"{statistics.mean(ls[:3]):.2f} for the first 3), {s['seconds_per_step']:.1f} s a step "
        f"({s['steps_per_second']:.3f} steps/s, lr {f['lr']}). verl's merger wrote {'/'.join(m['merged'])} "
        f"weights (trained in {'/'.join(m['checkpoint'])}).",
        "",
        "| rollout gate, val episodes of the rl-cascade release | episodes | nonzero reward % (gate: 5-30) | "
        "answers parsed % | episodes with a tool call % | s / episode (the command's wall, model loading included) | gate |",
        "|---|---:|---:|---:|---:|---:|---|",
        gate_row("SmolLM2-135M-Instruct as prepared (no SFT)", g["base"]),
        gate_row(f"the same after {len(ls)} SFT steps, merged", g["tuned"]),
        "",
        "`verl-rl --dry-run` on the merged model and its gate: "
        + (
            f"ready (verl's validate_config passed; tools shown {rl['tool_format']})."
            if rl["exit"] == 0
            else f"refused, exit {rl['exit']}: {rl['said']}"
        ),
        "",
        "The first replies of the tuned model, as generated (the first 120 characters; `real_release.json` keeps "
        f"{REPLY_CHARS}, the gate's report 1,000): " + "; ".join(shown(r) for r in g["tuned"]["replies"]),
    ]
    return "\n".join(lines)


def main():
    ap = summary_parser("real_release", __doc__, "2 steps and 2 episodes: the plumbing only")
    ap.add_argument("--steps", type=int, default=None, help="SFT steps (default 24; 2 with --quick)")
    ap.add_argument("--gate-n", type=int, default=None, help="rollout-gate episodes (default 16; 2 with --quick)")
    ap.add_argument("--lr", type=float, default=5e-5, help="SFT learning rate (constant)")
    a = ap.parse_args()
    if a.render:
        return print(render_report("real_release", markdown, a.out))
    plan = {**(QUICK if a.quick else FULL), **{k: v for k, v in (("steps", a.steps), ("gate_n", a.gate_n)) if v}}
    pv = begin({**vars(a), **plan, "llm": LLM, "think": THINK})
    t_start = time.time()
    # the launched torchrun and trainer import this checkout's vtreetrm, through this interpreter's environment
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}  # fmt: skip
    with work_folder(a.work, "real_release") as work:
        step("prepare", cli("models", "prepare", LLM), work / "prepare.log", t_start)
        base = model_path(LLM)
        from verl_chain import TRAINED_QWEN2, verl_chain

        print(f"[{time.time() - t_start:6.0f} s] start chain ({plan['records']} records)", flush=True)
        c = verl_chain(work / "chain", records=plan["records"], think=THINK, **TRAINED_QWEN2)
        r, assets = c.run, c.assets
        tools = ["--registry", assets.registry, "--corpus", assets.corpus, "--task-config", assets.task_config]
        sft = timed_sft(cli("release", "verl-sft", "--release", r / "traj", "--model", base, "--output-dir",
                            work / "sft", "--device", "cpu", "--no-dry-run", "--extra", *sft_extra(plan["steps"], a.lr)),
                        work / "sft.log", t_start, env)  # fmt: skip
        if len(sft["losses"]) != plan["steps"]:
            sys.exit(f"verl logged {len(sft['losses'])} losses for {plan['steps']} steps: see {work / 'sft.log'}")
        launch = json.loads((work / "sft/launch_report.json").read_text())
        merged = work / "merged"
        step("verl-merge", cli("release", "verl-merge", "--checkpoint",
                               work / f"sft/checkpoints/global_step_{plan['steps']}", "--out", merged),
             work / "merge.log", t_start)  # fmt: skip
        gate = {}
        for name, model in (("base", base), ("tuned", merged)):
            argv = cli("release", "rollout-gate", "--model", model, "--release", r / "rl", *tools, "--n",
                       plan["gate_n"], "--max-turns", 3, "--max-new-tokens", plan["max_new_tokens"], "--report",
                       work / f"gate-{name}.json", "--no-progress")  # fmt: skip
            rc, wall = run_step(f"rollout-gate ({name})", argv, work / f"gate-{name}.log", t_start, env)
            if rc not in (0, 1):
                sys.exit(f"rollout-gate failed (exit {rc}):\n{(work / f'gate-{name}.log').read_text()[-3000:]}")
            gate[name] = {**gate_figures(work / f"gate-{name}.json", wall), "exit": rc}
        std = [f"--{k}-standard=shougang={c.syn}/STANDARDS/shougang.{k}.json" for k in ("classification", "grading")]
        step("audit", cli("release", "audit", "--bundle", "--canonical", f"shougang={r}/canonical/shougang/all.json",
                          *std, "--report", work / "audit.json", "--no-progress"), work / "audit.log", t_start)  # fmt: skip
        rl_argv = cli("release", "verl-rl", "--release", r / "rl", "--sft-model", merged, "--rollout-gate",
                      work / "gate-tuned.json", *tools, "--audit", work / "audit.json", "--reference", base,
                      "--output-dir", work / "rl-launch")  # fmt: skip
        rc, _ = run_step("verl-rl (dry run)", rl_argv, work / "rl.log", t_start, env)
        rl = {"exit": rc, "said": last_line(work / "rl.log", work) if rc else None, "tool_format": None}
        if rc == 0:
            rl["tool_format"] = json.loads((work / "rl-launch/launch_report.json").read_text())["tool_format"]["used"]
        mrep = json.loads((merged / "merge_report.json").read_text())
        figures = {
            "model": LLM,
            "cpus": os.cpu_count(),
            "plan": plan,
            "lr": a.lr,
            "tool_format": launch["tool_format"]["used"],
            "template_drops": launch["tool_format"]["template_drops"],
            "sft": sft,
            "loss_fell": statistics.mean(sft["losses"][-3:]) < statistics.mean(sft["losses"][:3]),
            "merge": {**mrep["dtype"], "parameters": mrep["parameters"], "sha256": mrep["sha256"]},
            "gate": gate,
            "rl_launch": rl,
        }
        print(json.dumps(figures, indent=1, ensure_ascii=False))
        write_report("real_release", figures, markdown(figures), pv, time.time() - t_start, a.quick, a.out)


if __name__ == "__main__":
    main()
