"""Rewrite `tests/file_durations.json`: seconds per test file and backend, from JUnit XML reports.

    KERAS_BACKEND=tensorflow python -m pytest -q -n 2 --dist loadfile --junitxml=tf.xml   # and jax, torch
    python tests/file_durations.py tensorflow=tf.xml jax=jax.xml torch=torch.xml

`tests/conftest.py` hands the slowest files to the xdist workers first.
"""

import collections
import json
import pathlib
import sys
import xml.etree.ElementTree as ET


def file_seconds(junit_xml):
    """{test file: seconds (setup, call and teardown of its tests)} from one report."""
    totals = collections.Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        totals[_file_of(case.get("classname", ""))] += float(case.get("time", 0))
    return {path: round(seconds, 1) for path, seconds in totals.most_common()}


def _file_of(classname):
    """"tests.data.test_mlm" or "tests.data.test_mlm.TestClass" -> "tests/data/test_mlm.py"."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if pathlib.Path(path).is_file():
            return path
    raise ValueError(f"No test file for classname {classname!r} under {pathlib.Path.cwd()}")


def main(argv):
    if not argv or any("=" not in a for a in argv):
        raise SystemExit(f"usage: python tests/file_durations.py BACKEND=JUNIT_XML ... Received: {argv}")
    table = {backend: file_seconds(xml) for backend, xml in (a.split("=", 1) for a in argv)}
    out = pathlib.Path(__file__).with_name("file_durations.json")
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {out}: " + ", ".join(f"{b} {len(t)} files, {sum(t.values()):.0f} s" for b, t in table.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
