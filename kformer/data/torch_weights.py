"""Reading a `pytorch_model.bin` checkpoint as tensors only, with torch (a backend, so here in `data/`).

Many published checkpoints (OPUS-MT among them) ship this pickled file alone. `torch.load(...,
weights_only=True)` unpickles tensors and plain containers only: a file that would build any other
object (and so could run code) is refused, naming the file.
"""

import pathlib


def read_pytorch_bin(path):
    """`pytorch_model.bin` -> {tensor name: numpy array} (floating point as float32).

    Args:
        path: the file.

    Returns:
        dict of str -> numpy array.

    Example:

        weights = read_pytorch_bin("opus-mt-en-es/pytorch_model.bin")
        weights["final_logits_bias"].shape  # (1, 65001)
    """
    path = pathlib.Path(path)
    try:
        import torch
    except ImportError:
        raise ValueError(f"{path.parent} holds pytorch_model.bin and no model.safetensors; reading it needs torch "
                         "(pip install torch), or convert it to safetensors.") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 (torch raises many kinds for a damaged or hostile file)
        raise ValueError(f"{path} could not be read as tensors (weights_only=True): {type(err).__name__}: "
                         f"{str(err)[:300]}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path} must hold a dict of tensor name -> tensor.")
    return {str(name): tensor.detach().float().numpy() if tensor.is_floating_point() else tensor.numpy()
            for name, tensor in state.items()}
