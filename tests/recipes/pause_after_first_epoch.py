"""`python pause_after_first_epoch.py GATE RECIPE_MODULE FLAGS...`: run a recipe, pausing after epoch 1.

After the first epoch (its backup written: the callback comes after the
recipe's own), it creates `GATE.paused` and waits until the test creates
`GATE`, so the test can act while the run is alive mid-training: start a
second run, or send SIGINT.
"""

import importlib
import pathlib
import sys
import time

import keras

from recipes import common


class PauseAfterFirstEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            gate = pathlib.Path(sys.argv[1])
            gate.with_name(gate.name + ".paused").touch()
            while not gate.exists():
                time.sleep(0.05)


original = common.callbacks
common.callbacks = lambda *a, **k: original(*a, **k) + [PauseAfterFirstEpoch()]
importlib.import_module(sys.argv[2]).main(sys.argv[3:])
