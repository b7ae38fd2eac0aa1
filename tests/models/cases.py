"""Small overrides per builder and matching random inputs, shared by the model tests."""

import numpy as np

from kformer import models

SMALL = {
    "translator": dict(vocabulary_size=40, sequence_length=16, hidden_dim=16, num_heads=2,
                       intermediate_dim=32, num_encoder_layers=1, num_decoder_layers=2),
    "text_classifier": dict(vocabulary_size=40, sequence_length=12, hidden_dim=16, num_heads=2,
                            intermediate_dim=32),
    "bert": dict(vocabulary_size=40, sequence_length=16, hidden_dim=16, num_heads=2,
                 intermediate_dim=32, num_layers=2),
    "vit": dict(image_size=16, patch_size=4, hidden_dim=16, num_heads=2, intermediate_dim=32,
                num_layers=2, num_classes=3),
    "conformer_encoder": dict(num_features=16, num_layers=2, hidden_dim=16, num_heads=2, kernel_size=3),
    "speech_recognizer": dict(num_features=16, num_layers=2, hidden_dim=16, num_heads=2, kernel_size=3),
    "causal_lm": dict(vocabulary_size=40, sequence_length=16, hidden_dim=16, num_heads=2,
                      intermediate_dim=32, num_layers=2),
}
# Paper-sized presets: built and counted only. Parameters as published.
PAPER_PARAMS = {
    "transformer_base": 65e6,  # Vaswani et al., Table 3
    "transformer_big": 213e6,
    "bert_base": 110e6,  # Devlin et al., section 3
    "vit_base_patch16_224": 86e6,  # Dosovitskiy et al., Table 1
    "vit_large_patch16_224": 307e6,
    "gpt2_small": 124_439_808,  # Radford et al. 2019 (the 124M model; tied output): exact
}


def small_model(name, **extra):
    preset = models.get_preset(name)
    small = dict(SMALL[preset["builder"]])
    if preset.get("stem_channels"):  # a stride-2 convolution per stem entry must fit in a patch
        small["patch_size"] = max(small["patch_size"], 2 ** len(preset["stem_channels"]))
    return models.build(name, **{**small, **extra})


def random_inputs(model, batch=2, length=8, seed=0):
    rng = np.random.default_rng(seed)
    data = {}
    for tensor in model.inputs:
        shape = (batch,) + tuple(length if d is None else d for d in tensor.shape[1:])
        if "int" in str(tensor.dtype):
            ids = rng.integers(3, 40, shape).astype("int32")
            ids[-1, -2:] = 0  # some padding
            data[tensor.name] = ids
        elif "bool" in str(tensor.dtype):
            data[tensor.name] = np.ones(shape, bool)
        else:
            data[tensor.name] = rng.uniform(0, 255, shape).astype("float32")
    if "segment_ids" in data:
        data["segment_ids"] = (data["segment_ids"] % 2).astype("int32")
        data["padding_mask"] = data["token_ids"] != 0
    return data
