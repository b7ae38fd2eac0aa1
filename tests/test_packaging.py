"""`python -m build` makes an sdist and a wheel; the wheel installs into a fresh venv and runs `kformer list`.

The fresh venv gets the heavy dependencies (TensorFlow, Keras, ...) from the
test environment through a `.pth` line, so the test needs no network; the
wheel itself is installed with `pip --no-deps --no-index`, and the test checks
that the `kformer` the command imports is the installed one.
"""

import email
import pathlib
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile

import pytest

import kformer

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.only_backend("tensorflow")  # nothing here depends on the backend


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """(sdist, wheel) built from a copy of the source tree (the build writes egg-info into it)."""
    pytest.importorskip("build")
    tmp = tmp_path_factory.mktemp("build")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "saved_models", "*.egg-info", "build", "dist", "__pycache__", ".pytest_cache"))
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp / "dist"), str(source)],
                   check=True, capture_output=True)
    sdist, = (tmp / "dist").glob("kformer-*.tar.gz")
    wheel, = (tmp / "dist").glob("kformer-*.whl")
    return sdist, wheel


def test_wheel_holds_the_package_script_and_matching_version(dist):
    _, wheel = dist
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(info))
        entry_points = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert metadata["Version"] == kformer.__version__ and metadata["Name"] == "kformer"
    for package in ("kformer/__init__.py", "kformer/cli.py", "kformer/models/registry.py",
                    "kformer/data/wordpiece.py", "kformer/export/serving.py", "kformer/viz/attention.py"):
        assert package in names
    assert "kformer = kformer.cli:main" in entry_points
    assert not any(n.startswith(("tests/", "recipes/", "data/")) for n in names)  # the package only
    requires = metadata.get_all("Requires-Dist")
    assert any(r.startswith("keras") for r in requires) and any(r.startswith("matplotlib") for r in requires)
    assert not any(r.startswith("matplotlib") and "extra" not in r for r in requires)  # plots are an extra


def test_sdist_is_a_whole_source_tree(dist):
    sdist, _ = dist
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for path in ("pyproject.toml", "README.md", "constraints.txt", "CHANGELOG.md", "recipes/train_imdb.py",
                 "data/README.md", "data/imdb/train.jsonl.gz", "tests/conftest.py", "kformer/cli.py"):
        assert path in names, path
    assert not any("__pycache__" in name for name in names)


def test_wheel_installs_into_a_fresh_venv_and_runs_kformer_list(dist, tmp_path):
    _, wheel = dist
    venv = tmp_path / "venv"
    # A venv without its own pip (seeding one takes seconds): this environment's pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True)
    fresh_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                check=True, capture_output=True, text=True).stdout.strip()
    # Dependencies from this environment, after the venv's own site-packages (its kformer comes first).
    (pathlib.Path(fresh_site) / "test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    where = subprocess.run([python, "-c", "import kformer; print(kformer.__file__, kformer.__version__)"],
                           cwd=tmp_path, check=True, capture_output=True, text=True).stdout.split()
    assert where == [str(pathlib.Path(fresh_site) / "kformer" / "__init__.py"), kformer.__version__]
    listing = subprocess.run([venv / "bin" / "kformer", "list"], cwd=tmp_path, check=True,
                             capture_output=True, text=True).stdout
    for preset in ("imdb_small", "transformer_base", "bert_base", "vit_base_patch16_224", "gpt2_small"):
        assert preset in listing
    bad = subprocess.run([venv / "bin" / "kformer", "train", "imdb"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode != 0 and "source checkout" in bad.stderr  # recipes are not in the wheel
