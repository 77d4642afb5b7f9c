"""Long videos with temporal annotations, end to end through the CLI: import (ActivityNet layout and CSV), segment
features, a 2-epoch Phase-1 that skips the branches nobody annotated, a Phase-2 run and its predictions."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vtreetrm.cli import main
from vtreetrm.video.labels import LOTE_SIMPLE, load_dataset
from vtreetrm.video.synthetic import LOTE_MOTION, render_frames, write_mp4

torch.set_num_threads(1)
LABELS = ['Feeding', 'Resting', 'Walking', 'Running']


def run(*args):
    return main([str(a) for a in args])


@pytest.fixture(scope='module')
def annotated(tmp_path_factory):
    "Six 8-second videos, each four 2-second behaviours in a row, annotated per segment (one span with two labels)."
    d = tmp_path_factory.mktemp('long'); rng = np.random.default_rng(0)
    db = {}
    for v in range(6):
        labs = [LABELS[(v + k) % 4] for k in range(4)]
        frames = np.concatenate([render_frames([('circle', (240, 240, 240), LOTE_MOTION[l])], 'forest', 16, 32, rng) for l in labs])
        write_mp4(d/'videos'/f'cam{v}.mp4', frames, fps=8)
        anns = [{'segment': [2.0 * k, 2.0 * k + 2.0], 'label': l} for k, l in enumerate(labs)]
        if v == 0: anns.append({'segment': [0.0, 2.0], 'label': 'Smelling'})
        db[f'cam{v}'] = {'duration': 8.0, 'subset': 'training' if v < 4 else 'validation' if v == 4 else 'testing', 'annotations': anns}
    (d/'anet.json').write_text(json.dumps({'database': db}))
    return d


def test_import_train_predict(annotated, tmp_path, capsys):
    d = annotated
    assert run('video', 'import', d/'anet.json', '--format', 'lote', '--videos', d/'videos', '--out', tmp_path/'ds') == 0
    ds = load_dataset(tmp_path/'ds')
    assert len(ds.clips) == 24 and ds.clips[0].labels == ['Feeding', 'Smelling'] and ds.clips[0].end == 2.0
    assert json.loads((tmp_path/'ds'/'label_map.json').read_text()) == LOTE_SIMPLE          # the seed's table by default
    assert {c.split for c in ds.clips} == {'train', 'val', 'test'} and all(c.species is None for c in ds.clips)
    cache = tmp_path/'cache'
    assert run('video', 'phase1', tmp_path/'ds', '--out', tmp_path/'p1', '--cache', cache, '--epochs', 2, '--width', 32) == 0
    out = capsys.readouterr().out
    assert 'not trained: species, environment' in out
    m1 = json.loads((tmp_path/'p1'/'metrics.json').read_text())
    assert m1['branches_trained'] == ['behaviour'] and m1['features']['ds']['encoded'] == 24
    assert run('video', 'phase2', tmp_path/'ds', '--out', tmp_path/'p2', '--phase1', tmp_path/'p1'/'best', '--cache', cache,
               '--epochs', 2, '--num-queries', 4, '--max-new-tokens', 24, '--threads', 1) == 0
    rows = [json.loads(l) for l in (tmp_path/'p2'/'predictions.jsonl').read_text().splitlines()]
    assert len(rows) == 4 and all(r['species'] is None for r in rows)
    assert json.loads((tmp_path/'p2'/'metrics.json').read_text())['num_samples'] == 4


def test_segment_features_are_cached_per_segment(annotated, tmp_path):
    """Two segments of one file get different features; the same segment read again is not re-encoded."""
    d = annotated
    (tmp_path/'a.csv').write_text('video,start,end,label,split\ncam0,0,2,Feeding,train\ncam0,2,4,Resting,train\ncam1,0,2,Resting,val\n')
    assert run('video', 'import', tmp_path/'a.csv', '--format', 'csv', '--videos', d/'videos', '--out', tmp_path/'ds') == 0
    from vtreetrm.video.labels import load_dataset as ld
    from vtreetrm.video.phase1 import open_cache
    cache = open_cache(tmp_path/'cache', 'tiny', 8, 4)
    feats, rep = cache.features_for(ld(tmp_path/'ds').clips, progress=False)
    assert rep['encoded'] == 3 and not np.allclose(*[feats[c.id] for c in ld(tmp_path/'ds').clips[:2]])
    _, rep2 = open_cache(tmp_path/'cache', 'tiny', 8, 4).features_for(ld(tmp_path/'ds').clips, progress=False)
    assert rep2 == {**rep2, 'encoded': 0, 'cached': 3}
