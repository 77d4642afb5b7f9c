"""The library's shape: no function takes more than 8 parameters (an options dataclass counts as one) and no class
gets more than 5 methods from `@patch` cells. Pure `ast` over `vtreetrm/*.py`: fast, default tier."""

import ast
from collections import Counter
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "vtreetrm"
MAX_PARAMS = 8  # beyond this, group the parameters into an options dataclass
MAX_PATCHES = 5  # beyond this, the methods belong inside the class


def _modules():
    return [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(LIB.rglob("*.py")) if p.name != "_modidx.py"]


def _params(f: ast.FunctionDef) -> list:
    "Every parameter of `f` (positional, keyword-only, *args, **kwargs) but self/cls."
    a = f.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + [x.arg for x in (a.vararg, a.kwarg) if x]
    return [n for n in names if n not in ("self", "cls")]


def _patched_class(f: ast.FunctionDef) -> str | None:
    "The class a `@patch` function is added to (its first parameter's annotation), else None."
    decs = [d.func if isinstance(d, ast.Call) else d for d in f.decorator_list]
    if not any((d.id if isinstance(d, ast.Name) else getattr(d, "attr", None)) == "patch" for d in decs):
        return None
    args = f.args.posonlyargs + f.args.args
    anno = args[0].annotation if args else None
    return ast.unparse(anno) if anno is not None else None


def long_signatures() -> list:
    "`path:line name (n parameters)` of every function over MAX_PARAMS parameters."
    return [f"{p.relative_to(LIB.parent)}:{n.lineno} {n.name} ({len(_params(n))} parameters)"
            for p, tree in _modules() for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(_params(n)) > MAX_PARAMS]  # fmt: skip


def patched_classes() -> Counter:
    "`{module:class: number of @patch methods}`."
    return Counter(f"{p.relative_to(LIB.parent)}:{c}" for p, tree in _modules() for n in ast.walk(tree)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and (c := _patched_class(n)))  # fmt: skip


def test_no_function_takes_more_than_8_parameters():
    bad = long_signatures()
    assert not bad, "functions over 8 parameters (group them into an options dataclass):\n" + "\n".join(bad)


def test_no_class_has_more_than_5_patch_methods():
    bad = {k: n for k, n in patched_classes().items() if n > MAX_PATCHES}
    assert not bad, "classes with more than 5 @patch methods (move them into the class):\n" + "\n".join(
        f"{k}: {n}" for k, n in sorted(bad.items())
    )


def test_the_checks_can_fail():
    "A made-up module with a 9-parameter function and a class with 6 @patch methods is caught."
    src = "def f(a, b, c, d, e, f, g, h, i): pass\n" + "".join(
        f"@patch\ndef m{i}(self: Foo, x): pass\n" for i in range(6)
    )
    tree = ast.parse(src)
    fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert len(_params(fns[0])) == 9
    assert Counter(_patched_class(n) for n in fns[1:]) == {"Foo": 6}
    assert _patched_class(fns[0]) is None


def test_the_duplicate_code_check_fails_on_a_shared_run_of_five_lines(tmp_path):
    "`make check-duplicates` (pylint's duplicate-code with pyproject.toml's settings) fails on 5 lines two modules share."
    import subprocess
    import sys

    body = "    total = 0\n    for x in xs:\n        total += x * x\n    total -= 1\n    return total / len(xs)\n"
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(f"def mean_square(xs):\n{body}")
    (pkg / "b.py").write_text(f"def other_name(xs, unused=None):\n    'a docstring'\n{body}")
    rc = LIB.parent / "pyproject.toml"

    def pylint(*args):
        return subprocess.run([sys.executable, "-m", "pylint", f"--rcfile={rc}", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    p = pylint("pkg")
    assert p.returncode != 0 and "R0801" in p.stdout and "==pkg.a:" in p.stdout, p.stdout + p.stderr
    (pkg / "b.py").write_text(f"def other_name(xs):\n{body.replace('x * x', 'abs(x)')}")
    p = pylint("pkg")
    assert p.returncode == 0, p.stdout + p.stderr
