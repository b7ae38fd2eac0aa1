"""Reading gzip text data files: one clear error for a corrupt or empty file."""

import gzip


def read_gzip_lines(path, parse, *, name, expected, errors=()):
    """Parse each line of a gzip UTF-8 file: returns [parse(line, number), ...].

    Raises one ValueError naming `name`, the path and `expected` when the file
    is not gzip UTF-8 text, when `parse` raises one of `errors`, or when it
    holds no lines. (Missing files are the caller's check: its message says
    where the file should come from.)

    Args:
        path: path of a gzip file.
        parse: callable `(line, line_number) -> row`.
        name: str. The data set's name, for messages.
        expected: str. What the file should hold, for messages.
        errors: tuple of exception types `parse` raises on a bad line.

    Returns:
        list of rows.

    Example:

    >>> import gzip, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "words.gz"
    >>> _ = path.write_bytes(gzip.compress(b"one two" + bytes([10]) + b"three"))
    >>> read_gzip_lines(path, lambda line, number: (number, line.split()), name="words", expected="text")
    [(1, ['one', 'two']), (2, ['three'])]
    """
    rows, number = [], 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                rows.append(parse(line, number))
    except (OSError, EOFError, UnicodeDecodeError, *errors) as err:
        where = f" line {number}" if number else ""
        raise ValueError(f"Corrupt {name} file {path}{where}: expected {expected} "
                         f"({type(err).__name__}: {err})") from err
    if not rows:
        raise ValueError(f"{name} file {path} is empty: expected {expected}.")
    return rows
