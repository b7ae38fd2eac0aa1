import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from recipes import train_imdb

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="--distribute is JAX/TF (torch: DDP)")
def test_data_parallel_on_4_devices_matches_one_device():
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4")
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "recipes" / "distribute_check.py")],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["devices"] == [1, 4]
    # Same global batch, same initial weights: the loss curve matches one device.
    np.testing.assert_allclose(result["parallel"], result["single"], rtol=1e-4)
    assert result["single"][-1] < result["single"][0]


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch only")
def test_distribute_on_torch_is_a_clear_flag_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_imdb.main(["--distribute"])
    assert exit_info.value.code != 0 and "--distribute supports" in capsys.readouterr().err
