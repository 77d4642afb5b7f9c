"The harness_train experiment notebook through `vtreetrm run`, with small parameters, recording its metrics."
import json
import pytest


def test_harness_train_notebook_runs(tmp_path, cli):
    cli('run', 'harness_train', '--runs-dir', tmp_path / 'runs', '--name', 'small', '--no-html',
        '-p', 'embed_backend=hashing', 'n_train_videos=12', 'n_test_videos=16', 'epochs=2', check=0)
    d = tmp_path / 'runs' / 'small'
    m = json.loads((d / 'metrics.json').read_text())
    assert m['epochs_run'] == 2 and len(m['per_epoch_val']) == 2
    assert m['test_accuracy_final'] >= m['test_accuracy_baseline']
    assert m['gate_off']['bad_edits_accepted'] > m['gate']['bad_edits_accepted']
    nb = json.loads((d / 'small.ipynb').read_text())
    outputs = json.dumps([c.get('outputs', []) for c in nb['cells'] if c['cell_type'] == 'code'])
    assert 'holdout not run' not in outputs and 'batch_accuracy' in outputs and 'candidate' in outputs   # four-way table, dual_metric shown
