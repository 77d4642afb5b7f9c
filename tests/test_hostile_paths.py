"""Paths out of their roots: names that become path components, ids that name files, links that leave a folder."""
import json
import os
from pathlib import Path

import pytest

from vtreetrm.cli import main

ESCAPES = ['../../../escaped', '/tmp/abs-escape', '..', '.hidden', 'a/b', 'x\x00y']


@pytest.fixture(scope='module')
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp('paths')
    assert main(['harness', 'make-synthetic', '--out', str(d/'syn')]) == 0
    return d/'syn'/'store'


@pytest.mark.parametrize('name', ESCAPES)
@pytest.mark.parametrize('flag', ['name', '--parent'])
def test_seed_names_stay_in_the_store(store, tmp_path, capsys, name, flag):
    before = sorted(p for p in tmp_path.parent.rglob('*') if 'escaped' in p.name or 'abs-escape' in p.name)
    args = ['harness', 'init-seed', '--store-dir', str(store)] + ([name] if flag == 'name' else ['ok-seed', '--parent', name])
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2 and 'must be a single file or folder name' in err, err
    assert not (store/'seeds'/'ok-seed').exists() and not Path('/tmp/abs-escape').exists()
    assert sorted(p for p in tmp_path.parent.rglob('*') if 'escaped' in p.name or 'abs-escape' in p.name) == before


@pytest.mark.parametrize('vid', ['../../../etc/passwd', '/etc/passwd', '..', 'a/../../b'])
def test_video_ids_cannot_name_files_outside_the_trees(tmp_path, vid):
    from vtreetrm.harness.questions import load_benchmark
    from vtreetrm.utils import UserError
    q = {'question_id': 'q1', 'video_id': vid, 'task_type': 'Action Recognition', 'question': 'what?',
         'options': ['A. a', 'B. b', 'C. c', 'D. d'], 'answer': 'A'}
    (tmp_path/'qs.json').write_text(json.dumps([q]))
    with pytest.raises(UserError) as e: load_benchmark(tmp_path/'qs.json')
    assert 'video_id' in str(e.value) and 'qs.json' in str(e.value)


def test_think_file_link_out_of_the_root(tmp_path):
    from vtreetrm.release.trajectory import resolve_think_file
    from vtreetrm.utils import UserError
    (tmp_path/'root'/'dir').mkdir(parents=True)
    (tmp_path/'outside.jsonl').write_text('{"sample_id": "secret"}\n')
    os.symlink(tmp_path/'outside.jsonl', tmp_path/'root'/'dir'/'a.jsonl')
    with pytest.raises(UserError, match='outside the allowed folder'): resolve_think_file('file:dir', tmp_path/'root')
