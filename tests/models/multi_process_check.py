"""JAX multi-process data parallel on one machine: two CPU processes train as one.

    KERAS_BACKEND=jax python -m tests.models.multi_process_check PROCESS_ID PORT  # once per process
    KERAS_BACKEND=jax python -m tests.models.multi_process_check reference

Each process calls `keras.distribution.initialize` (gloo collectives on CPU),
sets `DataParallel` over the global devices, and trains a kformer classifier
one step on its own half of a batch. `reference` trains the same model in one
process on the whole batch. Each prints the loss and a weight checksum; all
three lines must agree.
"""

import sys

import numpy as np

BATCH = 8  # per process


def batch(process_id):
    rng = np.random.default_rng(process_id)
    return rng.integers(1, 40, (BATCH, 8)).astype("int32"), rng.integers(0, 2, BATCH).astype("int32")


def train_one_step():
    import keras

    from kformer import models

    keras.utils.set_random_seed(0)
    model = models.text_classifier(preset="imdb_tiny", vocabulary_size=40, sequence_length=8, dropout=0.0)
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
    return model


def main(argv):
    import jax
    import keras

    if argv[0] == "reference":
        model = train_one_step()
        x, y = (np.concatenate(parts) for parts in zip(batch(0), batch(1)))
    else:
        process_id, port = int(argv[0]), argv[1]
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes
        keras.distribution.initialize(job_addresses=f"localhost:{port}", num_processes=2, process_id=process_id)
        assert jax.process_count() == 2 and len(jax.devices()) == 2, jax.devices()
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        model = train_one_step()
        x, y = batch(process_id)  # this process's shard of the global batch
    loss = float(np.asarray(model.train_on_batch(x, y)))
    checksum = sum(float(np.abs(np.asarray(w)).sum()) for w in model.get_weights())
    print(f"RESULT loss={loss:.6f} weights={checksum:.6f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
