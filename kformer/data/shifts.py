"""Seeded distribution shifts of uint8 image batches, for out-of-distribution test figures.

Each function takes `(n, h, w, c)` uint8 images (as `kformer.data.images`
loads them) and returns a new uint8 array of the same shape, the same for the
same arguments (NumPy only: any Keras backend). At zero strength each is the
identity. The ViT recipe evaluates its test images under each shift
(`recipes/train_vit.py`, `ood_shift_*_accuracy`).

    shifted = translate(images, pixels=3, seed=0)   # every image 3 px off, both axes
    shifted = rotate(images, degrees=15, seed=0)     # every image turned 15 degrees
    shifted = gaussian_noise(images, std=0.1, seed=0)
    shifted = reduce_contrast(images, factor=0.5)
"""

import numpy as np


def _check_images(images):
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4:
        raise ValueError("`images` must be uint8 (n, height, width, channels). "
                         f"Received: dtype={images.dtype}, shape={images.shape}")
    return images


def _signs(n, seed):
    """n random +1/-1 (int), seeded."""
    return np.random.default_rng(seed).choice(np.array([-1, 1]), size=n)


def translate(images, pixels=3, seed=0):
    """Move every image `pixels` px vertically and `pixels` px horizontally, zero fill.

    The directions (up or down, left or right) are seeded random signs, one
    pair per image, so every image moves by exactly `pixels` on both axes (a
    diagonal of `pixels * sqrt(2)`); what leaves the frame is lost and what
    comes in is black (0).

    Args:
        images: uint8 `(n, height, width, channels)`.
        pixels: int >= 0. The offset on each axis. `0` is the identity. Defaults to `3`.
        seed: int. Seed of the directions. Defaults to `0`.

    Returns:
        uint8 `(n, height, width, channels)`.

    Example:

    >>> import numpy as np
    >>> image = np.zeros((1, 5, 5, 1), "uint8"); image[0, 2, 2, 0] = 255
    >>> (y, x), = np.argwhere(translate(image, pixels=1)[0, :, :, 0])
    >>> int(abs(y - 2)), int(abs(x - 2))  # one pixel on each axis
    (1, 1)
    """
    images = _check_images(images)
    if not isinstance(pixels, (int, np.integer)) or pixels < 0:
        raise ValueError(f"`pixels` must be an int >= 0. Received: pixels={pixels!r}")
    n, height, width, _ = images.shape
    if n == 0:
        return images.copy()
    rng = np.random.default_rng(seed)
    dys, dxs = (rng.choice(np.array([-1, 1]), size=n) * pixels for _ in range(2))
    padded = np.pad(images, ((0, 0), (pixels, pixels), (pixels, pixels), (0, 0)))  # black border
    # output pixel (y, x) is input pixel (y - dy, x - dx), i.e. padded (y - dy + pixels, x - dx + pixels)
    return np.stack([padded[i, pixels - dy:pixels - dy + height, pixels - dx:pixels - dx + width]
                     for i, (dy, dx) in enumerate(zip(dys, dxs))])


def rotate(images, degrees=15.0, seed=0):
    """Turn every image by `degrees` about its centre, clockwise or anticlockwise, zero fill.

    The direction is a seeded random sign per image, so every image turns by
    exactly `degrees`. Pixels are sampled bilinearly (inverse mapping) and
    rounded; corners that come from outside the frame are black (0).

    Args:
        images: uint8 `(n, height, width, channels)`.
        degrees: float >= 0. The angle. `0` is the identity. Defaults to `15.0`.
        seed: int. Seed of the directions. Defaults to `0`.

    Returns:
        uint8 `(n, height, width, channels)`.

    Example:

    >>> import numpy as np
    >>> image = np.zeros((1, 5, 5, 1), "uint8"); image[0, 2, :, 0] = 255  # a horizontal bar
    >>> turned = rotate(image, degrees=90)
    >>> turned[0, :, :, 0].tolist()[0], turned[0, :, 2, 0].tolist()  # now a vertical bar
    ([0, 0, 255, 0, 0], [255, 255, 255, 255, 255])
    """
    images = _check_images(images)
    if not np.isfinite(degrees) or degrees < 0:
        raise ValueError(f"`degrees` must be a finite number >= 0. Received: degrees={degrees!r}")
    n, height, width, _ = images.shape
    if degrees == 0:
        return images.copy()
    angles = np.deg2rad(degrees) * _signs(n, seed)
    cy, cx = (height - 1) / 2, (width - 1) / 2
    ys, xs = np.meshgrid(np.arange(height) - cy, np.arange(width) - cx, indexing="ij")
    out = np.empty_like(images)
    for i, angle in enumerate(angles):
        cos, sin = np.cos(angle), np.sin(angle)
        # where each output pixel comes from: the inverse rotation of its coordinates
        src_y, src_x = cos * ys - sin * xs + cy, sin * ys + cos * xs + cx
        out[i] = _bilinear(images[i].astype("float32"), src_y, src_x)
    return out


def _bilinear(image, ys, xs):
    """`image` (h, w, c) float sampled at float coordinates `ys`, `xs` (h, w); 0 outside -> uint8."""
    height, width, _ = image.shape
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    wy, wx = (ys - y0)[..., None], (xs - x0)[..., None]

    def at(y, x):
        inside = ((y >= 0) & (y < height) & (x >= 0) & (x < width))[..., None]
        return np.where(inside, image[np.clip(y, 0, height - 1), np.clip(x, 0, width - 1)], 0.0)

    value = ((1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x0 + 1))
             + wy * ((1 - wx) * at(y0 + 1, x0) + wx * at(y0 + 1, x0 + 1)))
    return np.clip(np.rint(value), 0, 255).astype("uint8")


def gaussian_noise(images, std=0.1, seed=0):
    """Add seeded Gaussian noise of standard deviation `std * 255` to every pixel, then round and clip to 0..255.

    Args:
        images: uint8 `(n, height, width, channels)`.
        std: float >= 0. The noise's standard deviation as a share of the
            0..255 range (`0.1`: about 25.5 grey levels). `0` is the identity. Defaults to `0.1`.
        seed: int. Seed of the noise. Defaults to `0`.

    Returns:
        uint8 `(n, height, width, channels)`.

    Example:

    >>> import numpy as np
    >>> images = np.full((2, 4, 4, 1), 128, "uint8")
    >>> noisy = gaussian_noise(images, std=0.1)
    >>> noisy.dtype.name, bool((noisy != 128).any()), bool((gaussian_noise(images, std=0.1) == noisy).all())
    ('uint8', True, True)
    """
    images = _check_images(images)
    if not np.isfinite(std) or std < 0:
        raise ValueError(f"`std` must be a finite number >= 0. Received: std={std!r}")
    noise = np.random.default_rng(seed).normal(0.0, std * 255.0, images.shape)
    return np.clip(np.rint(images + noise), 0, 255).astype("uint8")


def reduce_contrast(images, factor=0.5):
    """Pull every pixel towards its image's mean (per channel): `mean + factor * (pixel - mean)`, rounded.

    Not random. `factor=0.5` halves the contrast; `1` is the identity, `0`
    makes each channel of an image one flat grey.

    Args:
        images: uint8 `(n, height, width, channels)`.
        factor: float in [0, 1]. Defaults to `0.5`.

    Returns:
        uint8 `(n, height, width, channels)`.

    Example:

    >>> import numpy as np
    >>> images = np.array([0, 100, 200, 100], "uint8").reshape(1, 2, 2, 1)  # mean 100
    >>> reduce_contrast(images, factor=0.5)[0, :, :, 0].tolist()
    [[50, 100], [150, 100]]
    """
    images = _check_images(images)
    if not np.isfinite(factor) or not 0 <= factor <= 1:
        raise ValueError(f"`factor` must be a number in [0, 1]. Received: factor={factor!r}")
    mean = images.mean(axis=(1, 2), keepdims=True)
    return np.clip(np.rint(mean + factor * (images - mean)), 0, 255).astype("uint8")
