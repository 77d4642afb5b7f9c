#!/usr/bin/env bash
# Smoke of the VeRL SFT line, every step through the `vtreetrm release` commands:
#   synthetic assets -> canonical -> trajectory release (mock think: a smoke) and an rl-cascade release,
#   a tiny Qwen2 built from a tokenizer trained on the trajectories,
#   verl's SFT trainer for 10 steps (verl-sft --smoke --no-dry-run), verl-merge of the last checkpoint,
#   the rollout gate on the merged model (a 10-step tiny model fails the 5-30% band: the script checks the gate ran
#   on the merged model, by sha256, not that it passed).
# Needs the [verl] extra, and one CUDA GPU unless --cpu. verl 0.9.1's own entry point (verl.trainer.sft_trainer) needs
# NCCL: verl/utils/distributed.py:62 asks for the backend "cpu:gloo,cuda:nccl"; with --cpu, verl-sft --device cpu runs
# the same trainer through vtreetrm.release.verl_cpu (a gloo process group, FSDP2 on the CPU: a smoke, ~2 s a step).
# Usage: benchmarks/verl_sft_smoke.sh [WORK_DIR] [--dry-run|--cpu]   (--dry-run: stop after the SFT gate)
set -euo pipefail
W=$(realpath -m "${1:-$(mktemp -d -t verl-sft-smoke.XXXXXX)}"); DRY=${2:-}
export HF_HUB_OFFLINE=1
S=$W/syn; R=$W/run
A=(--registry "$S/ASSETS/registries/shougang.registry.json" --corpus "$S/ASSETS/corpora/shougang.corpus.json"
   --task-config "$S/CFG/shougang.task.json")
MF=(--metadata-fields field_name table_name field_description table_description)
G=(--grading-config "$S/STANDARDS/shougang.grading.json")
v() { vtreetrm release "$@"; }
mkdir -p "$W"
v make-synthetic --out "$S" --records 400
v preprocess --input "$S/RAW/shougang.xlsx" --mapping "$S/ASSETS/mappings/shougang.mapping.json" \
  --output "$R/processed/shougang/all.json" --dataset shougang
v canonical --processed-dir "$R/processed" --canonical-dir "$R/canonical" --config-file "$S/CFG/datasets.json" \
  --registry-dir "$S/ASSETS/registries" --corpus-dir "$S/ASSETS/corpora" --dataset shougang
v split --canonical-dir "$R/canonical" --dataset shougang
v trajectory-export --dataset shougang --canonical "$R/canonical/shougang/all.json" "${A[@]}" "${MF[@]}" "${G[@]}" \
  --think-source mock --output-dir "$R/traj"
v rl-export --canonical "$R/canonical/shougang/all.json" --output-dir "$R/rl-source" --dataset shougang "${A[@]}" "${MF[@]}" "${G[@]}"
cp "$S/STANDARDS/shougang.grading.json" "$R/grading.json"
python - "$R" <<'PY'
import sys; from pathlib import Path
from vtreetrm.release.assets import write_grading_manifest
write_grading_manifest(Path(sys.argv[1])/'grading-manifest.json', {'shougang': 'grading.json'})
PY
v mixture --family rl-cascade --input "shougang=$R/rl-source" --grading-manifest "$R/grading-manifest.json" "${A[@]}" "${MF[@]}" \
  --output-dir "$R/rl"
python - "$R" "$W/model" <<'PY'
# a tokenizer trained on the trajectories (the project's chat template) and a tiny Qwen2 of its vocabulary
import json, sys; from pathlib import Path
import pyarrow.parquet as pq
from transformers import Qwen2Config, Qwen2ForCausalLM
from vtreetrm.release.chat import build_chat_tokenizer
from vtreetrm.release.trajectory import _clean
rows = pq.read_table(Path(sys.argv[1])/'traj/train.parquet').to_pylist()
tok = build_chat_tokenizer([json.dumps([_clean(m) for m in r['messages']], ensure_ascii=False) for r in rows], vocab_size=2000)
cfg = Qwen2Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=True)
Qwen2ForCausalLM(cfg).save_pretrained(sys.argv[2]); tok.save_pretrained(sys.argv[2])
PY
RUN=(--release "$R/traj" --model "$W/model" --output-dir "$W/sft" --smoke --max-length 4096
     --extra trainer.total_training_steps=10 trainer.save_freq=10 trainer.test_freq=-1 data.train_batch_size=8
             data.micro_batch_size_per_gpu=2)
if [ "$DRY" = "--dry-run" ]; then v verl-sft "${RUN[@]}"; echo "dry run: gate passed, command in $W/sft/command.sh"; exit 0; fi
[ "$DRY" = "--cpu" ] && RUN+=(--device cpu)
v verl-sft "${RUN[@]}" --no-dry-run
CK=$(dirname "$(find "$W/sft/checkpoints" -name fsdp_config.json | sort -V | tail -1)")
v verl-merge --checkpoint "$CK" --out "$W/merged" | tee "$W/merge.out"
set +e; v rollout-gate --model "$W/merged" --release "$R/rl" "${A[@]}" --n 16 --report "$W/gate.json"; echo "rollout-gate exit $?"; set -e
python - "$W" <<'PY'
import json, sys; from pathlib import Path
from vtreetrm.utils import model_identity
w = Path(sys.argv[1]); gate = json.loads((w/'gate.json').read_text()); merge = json.loads((w/'merged/merge_report.json').read_text())
sha = model_identity(w/'merged')['sha256']
assert gate['model']['sha256'] == sha == merge['sha256'], 'the gate did not score the merged model'
print(json.dumps({'sft_steps': 10, 'merged_sha256': sha, 'gate_status': gate['status'], 'nonzero_reward_rate': gate['nonzero_reward_rate'],
                  'merged_parameters': merge['parameters'], 'merged_world_size': merge['world_size']}, indent=1))
PY
