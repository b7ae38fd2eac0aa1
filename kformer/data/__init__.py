"""Input pipelines (TensorFlow allowed here: tf.data runs on every Keras backend).

Imported explicitly (`from kformer.data import imdb`), never by `import kformer`.
"""
