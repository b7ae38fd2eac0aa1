"""Export folders: versions stay in TF Serving's int64 range, and a bad base folder is named before any work."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from kformer.export import export_for_serving
from kformer.export.versioning import MAX_VERSION, next_version, write_new_version

VERSIONING = pathlib.Path(__file__).resolve().parents[2] / "kformer" / "export" / "versioning.py"
# The base folder and version are checked, and versions written, with plain files before any model is touched.
pytestmark = pytest.mark.once("version folders written with plain files")


def _fill(tmp):
    (tmp / "model.txt").write_text("weights")


def _never(tmp):
    raise AssertionError("the write ran although the arguments were refused")


@pytest.mark.parametrize("version", [10**30, MAX_VERSION + 1, 0, -1, 1.0, True])
def test_an_explicit_version_outside_int64_is_refused_before_the_write(tmp_path, version):
    with pytest.raises(ValueError, match=rf"`version` must be an int in \[1, 2\*\*63 - 1 = {MAX_VERSION}\].*"
                                         rf"Received: version={version!r}"):
        write_new_version(tmp_path / "models", _never, version=version)
    assert not (tmp_path / "models").exists()


def test_names_that_are_not_int64_versions_are_ignored(tmp_path):
    (tmp_path / "\u00b2").write_text("a superscript two: a digit to str.isdigit, not to TF Serving")
    (tmp_path / "\u0663").mkdir()  # an Arabic-Indic three
    (tmp_path / str(10**20)).mkdir()  # past int64: TF Serving cannot read it as a version either
    for name in ("0", "-4", "+5", " 6", "1e3"):
        (tmp_path / name).mkdir()
    assert next_version(tmp_path) == 1
    assert write_new_version(tmp_path, _fill).name == "1"
    (tmp_path / "007").mkdir()  # ASCII digits: version 7 to TF Serving
    assert next_version(tmp_path) == 8
    with pytest.raises(ValueError, match="Version 7 already exists .*'007'"):
        write_new_version(tmp_path, _never, version=7)
    assert write_new_version(tmp_path, _fill, version=MAX_VERSION).name == str(MAX_VERSION)


def test_no_version_past_the_largest_int64(tmp_path):
    (tmp_path / str(MAX_VERSION)).mkdir()
    with pytest.raises(ValueError, match=rf"holds version {MAX_VERSION}, the largest TF Serving reads"):
        next_version(tmp_path)
    with pytest.raises(ValueError, match="there is no next version"):
        write_new_version(tmp_path, _never)
    assert write_new_version(tmp_path, _fill, version=3).name == "3"  # an explicit free one still works


def test_a_base_folder_below_a_file_is_named_before_the_export(tmp_path):
    (tmp_path / "some_file").write_text("not a folder")
    below = tmp_path / "some_file" / "sub"
    for base, where in ((below, "some_file is a file \\(cannot create .*sub below it\\)"),
                        (tmp_path / "some_file", "some_file is a file\\.")):
        # `task` is not a task: the folder is checked first, before the model is traced or saved
        with pytest.raises(ValueError, match=f"`export_dir` must be a directory; .*{where}.*"
                                             f"Received: export_dir='{base}'"):
            export_for_serving(object(), base)
        with pytest.raises(ValueError, match=f"`base_dir` must be a directory; .*{where}"):
            write_new_version(base, _never)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["some_file"]


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_a_base_folder_this_process_cannot_write_is_named_before_the_write():
    """As another user where the tests run as root (root may write anywhere)."""
    with tempfile.TemporaryDirectory() as folder:  # not pytest's tmp_path: its parent is private to this user
        pathlib.Path(folder).chmod(0o755)
        _check_locked(pathlib.Path(folder) / "locked")


def _check_locked(locked):
    # The module runs from a copy beside `locked`: `nobody` may not enter the checkout (a clone in a folder
    # only its owner may enter, as `mktemp -d` makes one).
    module = shutil.copy(VERSIONING, locked.with_name("versioning.py"))
    pathlib.Path(module).chmod(0o644)
    locked.mkdir()
    locked.chmod(0o555)
    script = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('v', sys.argv[1]); "
              "v = importlib.util.module_from_spec(spec); spec.loader.exec_module(v)\n"
              "for base in (sys.argv[2], sys.argv[2] + '/new/sub'):\n"
              "    try:\n"
              "        v.write_new_version(base, lambda tmp: sys.exit('the write ran'))\n"
              "    except ValueError as err:\n"
              "        print(err)\n")
    root = os.geteuid() == 0  # then as `nobody`, with an interpreter it may run (this one may be under /root)
    python = shutil.which("python3", path="/usr/bin:/bin") if root else sys.executable
    if python is None:
        pytest.skip("running as root without a system python3 to run as another user")
    run = subprocess.run([python, "-c", script, str(module), str(locked)], capture_output=True,
                         text=True, user=65534 if root else None, group=65534 if root else None, cwd="/")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert len(lines) == 2, run.stdout
    for line, base in zip(lines, (locked, locked / "new" / "sub")):
        assert line == (f"`base_dir` must be a directory this process can write; {locked} is not writable. "
                        f"Received: base_dir={str(base)!r}")
    assert list(locked.iterdir()) == []
