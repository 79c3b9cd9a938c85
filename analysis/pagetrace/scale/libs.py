"""What every module of the scale layer shares: its one error, and numpy
and pyarrow, imported on first use (so that importing a module of the layer
stays cheap until it works)."""


class DatasetError(ValueError):
    """A trace or a dataset that cannot be used at all; the message names
    the file."""


def numpy():
    import numpy
    return numpy


def pyarrow():
    import pyarrow
    import pyarrow.compute
    import pyarrow.csv
    import pyarrow.parquet
    return pyarrow
